/*
 * watchlock.i - the SWIG interface shared by the Python and Lua bindings.
 *
 * Shared here: the module, the header, prefix stripping and what is ignored.
 * Per-language typemaps (binary names, output pointers, status codes,
 * integers) live in python.i and lua.i, included below before the header.
 * The generated modules are private: users import the hand-written layers
 * (python/watchlock/, lua/watchlock.lua).
 */
#if defined(SWIGPYTHON)
%module(package="watchlock", threads="1") _native
#elif defined(SWIGLUA)
%module watchlock_core
#else
#error "watchlock.i supports Python and Lua"
#endif

%{
#include "watchlock.h"
%}

#if defined(SWIGPYTHON)
%include "python.i"
#elif defined(SWIGLUA)
%include "lua.i"
#endif

/* The outputs-first variants (issue 30.4) are for C callers; the bindings
 * wrap the older forms, whose typemaps they already have. */
%ignore watchlock_client_inspect_v2;
%ignore watchlock_client_member_inspect_v2;
%ignore watchlock_client_force_release_v2;
%ignore watchlock_client_next_lost_event_v2;
%ignore watchlock_client_histogram_v2;
%ignore watchlock_parse_renew_interval_v2;
%ignore watchlock_lock_fetch_fencing_token;

%include "watchlock.h"
