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

# How `ctest -j N` schedules the suite (scripts/test.sh runs each of its three passes with -j 2).
# One row a test: NAME COST [heavy]. COST is about its seconds in a serial run (a clean-clone
# ctest has no Testing/Temporary/CTestCostData.txt yet; measured in a normal -j2 pass on
# 2026-11-28): the longest start first, so none is left to run alone at the end. The heavy ones
# run one after the other, so their sum is a floor under each pass's length (about 260 s of a
# normal pass's 270 s): keep them few and short. "heavy": a test that starts a Redis Cluster, MariaDB, nginx,
# Prometheus or chromium, or burns CPU for seconds; the heavy ones take the one RESOURCE_LOCK
# "heavy", so at most one runs at a time, beside light ones (two at once failed it_cluster's
# replica acknowledgements, WAIT of 250 ms, on this 2-core machine). Every test not listed costs
# little and is light. test_schedule() applies the rows of the tests its directory registered
# (set_tests_properties sees no other directory's); test_schedule_check(), once after them all,
# fails the configure on a row that named no test (a test renamed and its row left behind).
set(TEST_SCHEDULE
  "it_cluster 50 heavy"
  "it_holds 40"
  "it_holds_cluster 13 heavy"
  "it_extend 13"
  "it_extend_cluster 7 heavy"
  "it_gate_store 15"
  "it_gate_store_cluster 10 heavy"
  "it_multi 19 heavy"
  "it_cart 12"
  "it_cart_cluster 24 heavy"
  "it_cart_heal 8"
  "it_cart_heal_cluster 5 heavy"
  "lockcore_it_mysql 11 heavy"
  "lockcore_it_zk 13 heavy"
  "it_lock_zookeeper 14 heavy"
  "it_lock_mysql 10 heavy"
  "it_status 16 heavy"
  "it_events 15"
  "it_queue 18 heavy"
  "lockcore_zk_ensemble 5 heavy"
  "script_peers 4 heavy"
  "script_verify_multi 5"
  "script_chaos_selftest 5"
  "it_sink 27 heavy"
  "lockcore_it_cluster 13 heavy"
  "lockcore_it_lost_reply 16"
  "lockcore_it_lost_reply_pipeline 16"
  "e2e_prometheus 14 heavy"
  "e2e_dashboard 12 heavy"
  "e2e_queue_page 25 heavy"
  "e2e_contract 10 heavy"
  "script_run_sh 13 heavy"
  "lockcore_it_redlock 13"
  "it_outcome 13"
  "it_rules_version 16"
  "it_rules 13"
  "lockcore_it_watchdog 12"
  "lockcore_it_watchdog_pipeline 12"
  "lockcore_it_async 8"
  "it_hostile 10"
  "lockcore_it_redlock_async 8"
  "it_gate 8"
  "it_pause 7"
  "it_ticket 16 heavy"
  "lockcore_it_redlock_restart 7"
  "it_limits 14 heavy"
  "it_groups 6"
  "it_groups_cluster 8 heavy"
  "it_concurrency 7 heavy"
  "lockcore_it_lock_pipeline 5"
  "it_lock_redis 4 heavy"
  "it_ratelimit 4"
  "lockcore_it_lock 5"
  "it_layout 4 heavy"
  "script_nginx_lb 2 heavy")

function(test_schedule)
  foreach(row ${TEST_SCHEDULE})
    string(REPLACE " " ";" row "${row}")
    list(GET row 0 name)
    list(GET row 1 cost)
    if(NOT TEST ${name})
      continue()
    endif()
    set_property(GLOBAL APPEND PROPERTY TEST_SCHEDULE_FOUND ${name})
    set_tests_properties(${name} PROPERTIES COST ${cost})
    list(LENGTH row n)
    if(n GREATER 2)
      set_tests_properties(${name} PROPERTIES RESOURCE_LOCK heavy)
    endif()
  endforeach()
endfunction()

function(test_schedule_check)
  get_property(found GLOBAL PROPERTY TEST_SCHEDULE_FOUND)
  foreach(row ${TEST_SCHEDULE})
    string(REPLACE " " ";" row "${row}")
    list(GET row 0 name)
    if(NOT name IN_LIST found)
      message(FATAL_ERROR "cmake/tests.cmake TEST_SCHEDULE: no test ${name}")
    endif()
  endforeach()
endfunction()
