# Hardened build (on by default; -DHARDEN=OFF to drop it): every target defined after this file
# gets
#   -fstack-protector-strong        canaries in functions with arrays or address-taken locals;
#   -D_FORTIFY_SOURCE=2             checked memcpy/snprintf/read... (only where the optimiser
#                                   runs, i.e. not in Debug; and not under sanitizers, whose
#                                   interceptors the _chk variants would bypass);
#   -fPIE + -pie                    position-independent executables (ASLR for the binary too);
#   -Wl,-z,relro,-z,now             full RELRO: the GOT is resolved at start and made read-only.
# test_hardening (service/CMakeLists.txt, cmake/check_hardening.cmake) checks the result with
# readelf.
option(HARDEN "Build with stack protector, FORTIFY_SOURCE, PIE and full RELRO" ON)

if(HARDEN)
  include(CheckPIESupported)
  check_pie_supported(OUTPUT_VARIABLE pie_why LANGUAGES C)
  if(NOT CMAKE_C_LINK_PIE_SUPPORTED)
    message(FATAL_ERROR "HARDEN: the linker cannot make PIE executables: ${pie_why}")
  endif()
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
  add_compile_options(-fstack-protector-strong)
  if(NOT SANITIZE)
    # The compiler may predefine another level; the generator expression keeps Debug (-O0,
    # where FORTIFY does nothing but warn) out.
    add_compile_options($<$<NOT:$<CONFIG:Debug>>:-U_FORTIFY_SOURCE>
                        $<$<NOT:$<CONFIG:Debug>>:-D_FORTIFY_SOURCE=2>)
  endif()
  add_link_options(-Wl,-z,relro,-z,now -Wl,-z,noexecstack)
  message(STATUS "Hardening: stack protector, PIE, full RELRO, FORTIFY_SOURCE=2 (not in Debug "
                 "or under sanitizers)")
endif()

# add_hardening_test(TARGET): a ctest "test_hardening" that runs readelf on TARGET's file and
# checks PIE (ELF type DYN), full RELRO (GNU_RELRO segment + BIND_NOW), the stack protector
# (__stack_chk_fail imported) and, in an optimised build without sanitizers, FORTIFY (some
# __*_chk function imported).
function(add_hardening_test target)
  if(NOT HARDEN)
    return()
  endif()
  find_program(READELF_EXECUTABLE NAMES readelf ${CMAKE_READELF})
  if(NOT READELF_EXECUTABLE)
    message(WARNING "readelf not found: no test_hardening")
    return()
  endif()
  set(fortify 1)
  if(SANITIZE OR CMAKE_BUILD_TYPE STREQUAL "Debug")
    set(fortify 0)
  endif()
  add_test(NAME test_hardening
    COMMAND ${CMAKE_COMMAND} -DREADELF=${READELF_EXECUTABLE} -DBINARY=$<TARGET_FILE:${target}>
            -DFORTIFY=${fortify} -P ${PROJECT_SOURCE_DIR}/cmake/check_hardening.cmake)
  set_tests_properties(test_hardening PROPERTIES LABELS unit TIMEOUT 60)
endfunction()
