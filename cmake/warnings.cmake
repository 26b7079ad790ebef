# The house warning set (STYLE.md habit 1), applied to every target defined after this file.
add_compile_options(
  -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wwrite-strings -Wformat=2 -Wimplicit-fallthrough)
if(WERROR)
  add_compile_options(-Werror)
endif()
