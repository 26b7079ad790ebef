# -DSANITIZE=address,undefined or -DSANITIZE=thread: instrument every target, tests included.
if(SANITIZE)
  if(SANITIZE MATCHES "thread" AND SANITIZE MATCHES "address")
    message(FATAL_ERROR "SANITIZE: thread cannot be combined with address")
  endif()
  add_compile_options(-fsanitize=${SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${SANITIZE})
  message(STATUS "Sanitizers: ${SANITIZE}")
endif()
