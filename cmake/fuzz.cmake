# -DFUZZ=ON: the libFuzzer targets of service/fuzz (fuzz_validate, fuzz_config, fuzz_router,
# fuzz_identity),
# built into bin/ next to inventoryd. Needs clang (-DCMAKE_C_COMPILER=clang); every target
# defined after this file is compiled with libFuzzer's coverage instrumentation
# (-fsanitize=fuzzer-no-link) and the fuzz targets are linked with libFuzzer's main
# (-fsanitize=fuzzer). Combine with -DSANITIZE=address,undefined. scripts/fuzz.sh does all of it.
option(FUZZ "Build the libFuzzer targets (needs CMAKE_C_COMPILER=clang)" OFF)

if(FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FUZZ=ON needs clang: cmake -DCMAKE_C_COMPILER=clang -DFUZZ=ON "
                        "(this build uses ${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER})")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
  add_link_options(-fsanitize=fuzzer-no-link)
  message(STATUS "Fuzzing: libFuzzer targets in service/fuzz")
endif()
