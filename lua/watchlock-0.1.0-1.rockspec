-- Build from the repository root (the rockspec lives in lua/):
--   luarocks --lua-version 5.4 make lua/watchlock-0.1.0-1.rockspec
--   luarocks --lua-version 5.1 make lua/watchlock-0.1.0-1.rockspec LUA_INCDIR=/usr/include/luajit-2.1
-- (the second for LuaJIT). Always give --lua-version: Debian's luarocks
-- targets Lua 5.1 by default. It builds the C library and the SWIG module
-- with CMake for the Lua that luarocks targets, and installs watchlock.lua
-- and watchlock_core.so. ctest lua_rock_5.4 / lua_rock_luajit run both lines.
-- Needs: a C compiler, CMake >= 3.16, SWIG >= 4.0, pkg-config and the
-- hiredis development files.
rockspec_format = "3.0"
package = "watchlock"
version = "0.1.0-1"
source = {
  url = "git+file://.",
  tag = "v0.1.0",
}
description = {
  summary = "Redis distributed lock with a watchdog (owner tokens, renewal, fencing tokens)",
  detailed = [[
A Redis lock whose lease is renewed by a watchdog thread in C while the
owner holds it, with owner-only release, strictly increasing fencing tokens,
pub/sub wake-up of waiters, and with_lock/wrap helpers for Lua.
]],
  license = "MIT",
  labels = { "redis", "lock", "distributed" },
}
dependencies = {
  "lua >= 5.1, < 5.5",
}
external_dependencies = {
  HIREDIS = { header = "hiredis/hiredis.h" },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    WATCHLOCK_LUA_INCDIR = "$(LUA_INCDIR)",
    WATCHLOCK_BUILD_TESTS = "OFF",
    WATCHLOCK_BUILD_CLI = "OFF",
  },
  -- Only the Lua module is installed (not the C library, headers or CMake
  -- package): the module links the library statically.
  install_pass = false,
  install = {
    lua = { watchlock = "lua/watchlock.lua" },
    lib = { watchlock_core = "build.luarocks/lua/rock/watchlock_core.so" },
  },
}
