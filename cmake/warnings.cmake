# The house warning set, applied to every target defined after this file (errors with
# -DWERROR=ON, on by default under CI=true).
add_compile_options(
  -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wwrite-strings -Wformat=2 -Wimplicit-fallthrough
  # The Lua scripts are string literals (embed_lua.cmake); the ones sharing hold_end.lua are
  # past ISO C's 4095-character minimum, which gcc and clang exceed without limit.
  -Wno-overlength-strings)
if(WERROR)
  add_compile_options(-Werror)
endif()
