# cmake -DREADELF=readelf -DBINARY=path -DFORTIFY=0|1 -P check_hardening.cmake
# Fails (non-zero exit, one line per missing property) unless BINARY is a PIE with full RELRO
# and stack-protector code, and, with FORTIFY=1, uses fortified libc functions.
foreach(var READELF BINARY FORTIFY)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_hardening: -D${var}=... is required")
  endif()
endforeach()

function(readelf out)
  execute_process(COMMAND ${READELF} -W ${ARGN} ${BINARY}
    OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_hardening: readelf ${ARGN} ${BINARY} failed: ${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

readelf(header -h)
readelf(segments -l)
readelf(dynamic -d)
readelf(symbols --dyn-syms)

set(problems "")
if(NOT header MATCHES "Type:[ \t]+DYN")
  string(APPEND problems "not a PIE: ELF type is not DYN\n")
endif()
if(NOT segments MATCHES "GNU_RELRO")
  string(APPEND problems "no GNU_RELRO segment (link with -z relro)\n")
endif()
# Full RELRO: BIND_NOW, either as its own tag or as the NOW flag in FLAGS / FLAGS_1.
if(NOT dynamic MATCHES "BIND_NOW" AND NOT dynamic MATCHES "Flags:[^\n]*NOW")
  string(APPEND problems "no BIND_NOW (link with -z now)\n")
endif()
if(NOT symbols MATCHES "UND[ \t]+__stack_chk_fail")
  string(APPEND problems "__stack_chk_fail is not imported (-fstack-protector-strong)\n")
endif()
if(FORTIFY AND NOT symbols MATCHES "UND[ \t]+__[a-z_]+_chk")
  string(APPEND problems "no __*_chk function imported (-D_FORTIFY_SOURCE=2)\n")
endif()

if(problems)
  message(FATAL_ERROR "check_hardening: ${BINARY}:\n${problems}")
endif()
set(fortify_note "")
if(FORTIFY)
  set(fortify_note ", FORTIFY_SOURCE")
endif()
message(STATUS "check_hardening: ${BINARY}: PIE, full RELRO, stack protector${fortify_note}")
