# add_unit_test(NAME SOURCES... LIBS libs... [LABELS labels...] [TIMEOUT s])
# One cmocka executable per topic, registered with ctest. Tests labelled "integration" start
# their own redis-server (and, for the service, inventoryd processes) on free ports.
function(add_unit_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "INVENTORY_BUILD_BIN=${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()
