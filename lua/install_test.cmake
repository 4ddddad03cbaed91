# ctest lua_install: `cmake --install BUILD_DIR --prefix PREFIX`, then, from a
# directory that is neither the source nor the build tree, load the module
# with nothing but LUA_PATH/LUA_CPATH pointing into PREFIX.
#   -DBUILD_DIR=... -DPREFIX=... -DCHECKS=interp|lmod_dir|cmod_dir[,...]
foreach(v BUILD_DIR PREFIX CHECKS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_test.cmake: -D${v}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()

set(elsewhere ${PREFIX}/elsewhere)
file(MAKE_DIRECTORY ${elsewhere})
string(REPLACE "," ";" checks "${CHECKS}")
set(script [=[
local prefix = os.getenv("WATCHLOCK_INSTALL_PREFIX")
local w = require("watchlock")
assert(type(w.connect) == "function" and type(w.with_lock) == "function")
assert(w.version == w._core.version_string(), "version mismatch")
local lpath = package.searchpath("watchlock", package.path)
local cpath = package.searchpath("watchlock_core", package.cpath)
assert(lpath:sub(1, #prefix) == prefix, "watchlock.lua not from the prefix: " .. lpath)
assert(cpath:sub(1, #prefix) == prefix, "watchlock_core not from the prefix: " .. cpath)
io.write("loaded watchlock ", w.version, " from ", lpath, " and ", cpath, "\n")
]=])
foreach(check IN LISTS checks)
  string(REPLACE "|" ";" parts "${check}")
  list(GET parts 0 interp)
  list(GET parts 1 lmod)
  list(GET parts 2 cmod)
  foreach(f ${PREFIX}/${lmod}/watchlock.lua ${PREFIX}/${cmod}/watchlock_core.so)
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env
            "LUA_PATH=${PREFIX}/${lmod}/?.lua;;" "LUA_CPATH=${PREFIX}/${cmod}/?.so;;"
            "WATCHLOCK_INSTALL_PREFIX=${PREFIX}/" ${interp} -e "${script}"
    WORKING_DIRECTORY ${elsewhere}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${interp}: require(\"watchlock\") from ${PREFIX} failed (${rc}):\n${out}${err}")
  endif()
  message(STATUS "${interp}: ${out}")
endforeach()
