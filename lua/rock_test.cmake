# ctest lua_rock_5.4 / lua_rock_luajit: `luarocks make` with
# lua/watchlock-*.rockspec for one Lua, as the README says to run it, in a
# copy of the sources (luarocks builds in the current directory) and into a
# scratch tree; then require("watchlock") from that tree with that Lua's
# interpreter and take and release a lock on a real redis-server (the
# harness starts one).
#   -DSOURCE_DIR=... -DWORK=... -DLUAROCKS=... -DLUA=... -DROCKSPEC=name
#   -DLUA_VERSION=5.4|5.1 [-DLUA_INCDIR=... (LuaJIT's headers)]
#   -DPYTHON=... -DHARNESS=tests/harness/redis_server.py
foreach(v SOURCE_DIR WORK LUAROCKS LUA ROCKSPEC LUA_VERSION PYTHON HARNESS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "rock_test.cmake: -D${v}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/src)
foreach(item CMakeLists.txt core bindings lua cmake)
  file(COPY ${SOURCE_DIR}/${item} DESTINATION ${WORK}/src)
endforeach()

# The command line of the README and docs/lua.md, plus --tree.
set(cmd ${LUAROCKS} --lua-version ${LUA_VERSION} --tree ${WORK}/tree make lua/${ROCKSPEC})
if(LUA_INCDIR)
  list(APPEND cmd LUA_INCDIR=${LUA_INCDIR})
endif()
execute_process(COMMAND ${cmd}
  WORKING_DIRECTORY ${WORK}/src
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  string(REPLACE ";" " " shown "${cmd}")
  message(FATAL_ERROR "${shown} failed (${rc}):\n${out}${err}")
endif()

set(lmod ${WORK}/tree/share/lua/${LUA_VERSION})
set(cmod ${WORK}/tree/lib/lua/${LUA_VERSION})
set(script [=[
local w = require('watchlock')
local cpath = package.searchpath('watchlock_core', package.cpath)
assert(cpath:sub(1, #os.getenv('ROCK_CMOD')) == os.getenv('ROCK_CMOD'), 'module not from the rock: ' .. cpath)
local c = assert(w.connect())
local l = c:lock('rock-test:' .. tostring(os.time()), { ttl = 5 })
assert(l:acquire(5))
local token = tostring(l:fencing_token())
assert(token:match('^%d+$'), 'token ' .. token)
assert(l:release())
c:close()
io.write(cpath, ' ', _VERSION, jit and (' ' .. jit.version) or '', ' token ', token, '\n')
]=])
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env
          "LUA_PATH=${lmod}/?.lua;;" "LUA_CPATH=${cmod}/?.so;;" "ROCK_CMOD=${cmod}/"
          ${PYTHON} ${HARNESS} -- ${LUA} -e "${script}"
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^${cmod}/watchlock_core.so ")
  message(FATAL_ERROR "using the module after luarocks make failed (${rc}):\n${out}${err}")
endif()
message(STATUS "luarocks make installed and ran ${out}")
file(REMOVE_RECURSE ${WORK})
