# cmake -DBUILD=<build dir> -DWORK=<scratch dir> -DSRC=<this dir> -DCC=<c compiler> -P check_install.cmake
# Installs the build into a scratch prefix, checks the layout, then builds and
# runs a consumer three ways: find_package (shared and static) and pkg-config.
file(REMOVE_RECURSE ${WORK})
set(P ${WORK}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(RUN_OUT "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${P})
foreach(f include/watchlock.h lib/libwatchlock.so lib/libwatchlock.a lib/pkgconfig/watchlock.pc
          lib/cmake/watchlock/watchlockConfig.cmake lib/cmake/watchlock/watchlockConfigVersion.cmake
          lib/cmake/watchlock/watchlockTargets.cmake
          lib/libwatchlock_preload.so libexec/watchlock/watchlock-keeper)
  if(NOT EXISTS ${P}/${f})
    message(FATAL_ERROR "missing after install: ${f}")
  endif()
endforeach()

# The preload shim is announced by pkg-config, and finds its keeper once installed.
set(ENV{PKG_CONFIG_PATH} ${P}/lib/pkgconfig)
run(pkg-config --variable=preload watchlock)
string(STRIP "${RUN_OUT}" _preload)
if(NOT EXISTS "${_preload}")
  message(FATAL_ERROR "pkg-config's preload variable names no file: ${_preload}")
endif()
run(${P}/bin/watchlock exec --help)

# SONAME = major version.
run(objdump -p ${P}/lib/libwatchlock.so)
if(NOT RUN_OUT MATCHES "SONAME +libwatchlock\\.so\\.0\n")
  message(FATAL_ERROR "unexpected SONAME:\n${RUN_OUT}")
endif()

# find_package(watchlock) -> watchlock::watchlock and watchlock::watchlock_static
run(${CMAKE_COMMAND} -S ${SRC}/consumer -B ${WORK}/consumer -DCMAKE_PREFIX_PATH=${P})
run(${CMAKE_COMMAND} --build ${WORK}/consumer)
run(${WORK}/consumer/consumer)
run(${WORK}/consumer/consumer_static)

# pkg-config
set(ENV{PKG_CONFIG_PATH} ${P}/lib/pkgconfig)
run(pkg-config --cflags --libs watchlock)
string(STRIP "${RUN_OUT}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} ${SRC}/consumer/main.c ${flags} -Wl,-rpath,${P}/lib -o ${WORK}/consumer_pc)
run(${WORK}/consumer_pc)
message(STATUS "install layout, find_package and pkg-config consumers ok")
