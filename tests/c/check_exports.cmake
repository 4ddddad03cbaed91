# Checks the dynamic symbol table of libwatchlock.so: every defined symbol is
# a watchlock_* function declared in watchlock.h (or one of the symbols the
# linker itself defines in every shared object), and every WATCHLOCK_API
# function of the header is exported.
#   cmake -DNM=nm -DLIB=libwatchlock.so -DHEADER=watchlock.h -P check_exports.cmake
cmake_policy(VERSION 3.16)
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
  OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed: ${err}")
endif()

file(READ ${HEADER} header)
string(REGEX MATCHALL "WATCHLOCK_API[^(;]*[ *](watchlock_[a-z0-9_]+)\\(" decls "${header}")
set(api)
foreach(d IN LISTS decls)
  string(REGEX REPLACE ".*[ *](watchlock_[a-z0-9_]+)\\($" "\\1" fn "${d}")
  list(APPEND api ${fn})
endforeach()
list(LENGTH api n_api)
if(n_api LESS 20)
  message(FATAL_ERROR "found only ${n_api} WATCHLOCK_API declarations in ${HEADER}")
endif()

# Defined by the linker in any shared object (GNU ld, gold, lld), not by our
# code: section/segment boundary markers and the legacy init/fini entries.
set(linker_symbols _init _fini _edata _end __bss_start _DYNAMIC _GLOBAL_OFFSET_TABLE_)

string(REPLACE "\n" ";" lines "${out}")
set(bad)
set(exported)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>[@version]"
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] +" "" sym "${line}")
  string(REGEX REPLACE "@.*$" "" sym "${sym}")
  if(sym IN_LIST linker_symbols)
    continue()
  endif()
  if(NOT sym IN_LIST api)
    list(APPEND bad "${sym}")
  else()
    list(APPEND exported "${sym}")
  endif()
endforeach()

set(missing)
foreach(fn IN LISTS api)
  if(NOT fn IN_LIST exported)
    list(APPEND missing ${fn})
  endif()
endforeach()

list(LENGTH exported n_exported)
message(STATUS "${n_exported} of ${n_api} header functions exported")
if(bad)
  message(FATAL_ERROR "symbols exported that are not watchlock_* API functions: ${bad}")
endif()
if(missing)
  message(FATAL_ERROR "API functions declared in the header but not exported: ${missing}")
endif()
