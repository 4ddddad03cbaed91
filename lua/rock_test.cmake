# ctest lua_rock: `luarocks make` with lua/watchlock-*.rockspec, in a copy of
# the sources (luarocks builds in the current directory) and into a scratch
# tree, then require("watchlock") from that tree.
#   -DSOURCE_DIR=... -DWORK=... -DLUAROCKS=... -DLUA=... -DROCKSPEC=name
foreach(v SOURCE_DIR WORK LUAROCKS LUA ROCKSPEC)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "rock_test.cmake: -D${v}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/src)
foreach(item CMakeLists.txt core bindings lua cmake)
  file(COPY ${SOURCE_DIR}/${item} DESTINATION ${WORK}/src)
endforeach()

execute_process(
  COMMAND ${LUAROCKS} --lua-version 5.4 --tree ${WORK}/tree make lua/${ROCKSPEC}
  WORKING_DIRECTORY ${WORK}/src
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "luarocks make failed (${rc}):\n${out}${err}")
endif()

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env
          "LUA_PATH=${WORK}/tree/share/lua/5.4/?.lua;;" "LUA_CPATH=${WORK}/tree/lib/lua/5.4/?.so;;"
          ${LUA} -e "local w = require('watchlock'); assert(w.connect); io.write(package.searchpath('watchlock_core', package.cpath), '\\n')"
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^${WORK}/tree/lib/lua/5.4/watchlock_core.so")
  message(FATAL_ERROR "require after luarocks make failed (${rc}):\n${out}${err}")
endif()
message(STATUS "luarocks make installed ${out}")
file(REMOVE_RECURSE ${WORK})
