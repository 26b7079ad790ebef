# The house warning set, applied to every target defined after this file (errors with
# -DWERROR=ON, on by default under CI=true).
add_compile_options(
  -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wwrite-strings -Wformat=2 -Wimplicit-fallthrough)
if(WERROR)
  add_compile_options(-Werror)
endif()
