/*
 * lua.i - Lua typemaps for watchlock.i (module watchlock_core).
 *
 * The generated module is private: lua/watchlock.lua builds the user-facing
 * API over it. What this file decides:
 *
 *  - Names lose their watchlock_ prefix (core.lock_acquire, core.client_open).
 *  - Lock names are (pointer, length) taken from a Lua string, so they are
 *    binary-safe (NUL bytes included); numbers are refused, not coerced.
 *  - Output pointers (watchlock_client **out, int64_t *fence, ...) become
 *    extra results after the status code: `status, client = core.client_open(url)`.
 *  - int64_t/uint64_t are Lua integers on 5.3+ (lua_pushinteger). LuaJIT
 *    (and 5.1/5.2) have only doubles: counts, ids and milliseconds stay
 *    numbers there (exact below 2^53), but fencing tokens - lock_fencing_token(),
 *    lock_list_fence() and every `int64_t *fence` output - become exact decimal strings
 *    ("1795411183266123"): as doubles around 1.8e15 they are exact but print
 *    as 1.7954111832661e+15 (LuaJIT's %.14g), and a token is an identifier
 *    that is printed, logged and sent to storage far more than computed with.
 *    tostring(t) and tonumber(t) give the same answer on every Lua.
 *  - Handles are SWIG userdata that own their C object: the garbage collector
 *    calls watchlock_client_close / watchlock_lock_abandon (a dropped lock is
 *    not an unlock: a held one is left to its lease, see watchlock.h).
 *    client_close, lock_free and lock_abandon take ownership away from the
 *    userdata and clear its pointer, so an explicit close is never followed
 *    by a second one from the collector, and a closed handle reads as NULL
 *    (the library answers EINVAL), never as a dangling pointer. A lock holds
 *    a counted reference to its client in C, so the collector may free them
 *    in any order.
 *  - watchlock_lock_set_on_lost is not wrapped: the watchdog thread must never
 *    call into a lua_State. Loss is observed from Lua with lock_state(), and
 *    lua/watchlock.lua runs its on_lost hooks from the client's lost-event
 *    queue (client_enable_lost_events, client_next_lost_event with timeout 0),
 *    polled in the caller's thread at each call into the module.
 */

%rename("%(strip:[watchlock_])s") "";

%{
#include <stdio.h>
#include <string.h>

static void wl_lua_push_i64(lua_State *L, int64_t v)
{
#if LUA_VERSION_NUM >= 503
    lua_pushinteger(L, (lua_Integer)v);
#else
    lua_pushnumber(L, (lua_Number)v);
#endif
}

/* A fencing token: an integer where Lua has 64-bit integers, else the exact
 * decimal string (see the top of this file). */
static void wl_lua_push_token(lua_State *L, int64_t v)
{
#if LUA_VERSION_NUM >= 503
    lua_pushinteger(L, (lua_Integer)v);
#else
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    lua_pushstring(L, buf);
#endif
}

/* Reads an integer argument; 0 on success, -1 (message pushed) otherwise. */
static int wl_lua_to_i64(lua_State *L, int idx, const char *fn, int argnum, int64_t *out)
{
    if (lua_type(L, idx) != LUA_TNUMBER) {
        SWIG_Lua_pushferrstring(L, "%s: argument %d must be an integer, got %s", fn, argnum,
                                luaL_typename(L, idx));
        return -1;
    }
#if LUA_VERSION_NUM >= 503
    {
        int isnum = 0;
        lua_Integer v = lua_tointegerx(L, idx, &isnum);
        if (!isnum) {
            SWIG_Lua_pushferrstring(L, "%s: argument %d must be an integer, got %f", fn,
                                    argnum, (double)lua_tonumber(L, idx));
            return -1;
        }
        *out = (int64_t)v;
    }
#else
    {
        lua_Number v = lua_tonumber(L, idx);
        /* 9.2e18 < 2^63: the range check keeps the cast defined. */
        if (!(v > -9.2e18 && v < 9.2e18) || (lua_Number)(int64_t)v != v) {
            SWIG_Lua_pushferrstring(L, "%s: argument %d must be an integer, got %f", fn,
                                    argnum, (double)v);
            return -1;
        }
        *out = (int64_t)v;
    }
#endif
    return 0;
}
%}

/* ---- handles: owned userdata freed by the collector ---------------------- */

%nodefaultctor watchlock_client;
%nodefaultdtor watchlock_client;
%nodefaultctor watchlock_lock;
%nodefaultdtor watchlock_lock;
%nodefaultctor watchlock_report;
%nodefaultdtor watchlock_report;
%nodefaultctor watchlock_name_info;
%nodefaultdtor watchlock_name_info;
struct watchlock_name_info {};
struct watchlock_client {};
struct watchlock_lock {};
struct watchlock_report {};
%extend watchlock_client {
    ~watchlock_client() { watchlock_client_close($self); }
}
%extend watchlock_lock {
    ~watchlock_lock() { watchlock_lock_abandon($self); }
}
/* A check's report is read at once by client:check() and then left to the
 * collector, which frees it: report_free is not wrapped. */
%extend watchlock_report {
    ~watchlock_report() { watchlock_report_free($self); }
}
%ignore watchlock_report_free;
/* The same for a name's info (client:name_info() copies it into a table). */
%extend watchlock_name_info {
    ~watchlock_name_info() { watchlock_name_info_free($self); }
}
%ignore watchlock_name_info_free;

%typemap(in, numinputs=0) watchlock_client **out (watchlock_client *tmp = NULL),
                          watchlock_lock **out (watchlock_lock *tmp = NULL),
                          watchlock_report **out (watchlock_report *tmp = NULL),
                          watchlock_name_info **out (watchlock_name_info *tmp = NULL)
    %{ $1 = &tmp; %}
%typemap(argout) watchlock_client **out, watchlock_lock **out, watchlock_report **out,
                 watchlock_name_info **out
    %{ SWIG_NewPointerObj(L, tmp$argnum, $*descriptor, 1); SWIG_arg++; %}

/* client_close(c) / lock_free(l) / lock_abandon(l): disown the userdata and
 * clear its pointer before the call, so the collector never closes it again. */
%typemap(in, checkfn="SWIG_isptrtype") watchlock_client *RELEASED, watchlock_lock *RELEASED
%{
    if (!SWIG_IsOK(SWIG_ConvertPtr(L, $input, (void **)&$1, $descriptor, 0))) {
        SWIG_fail_ptr("$symname", $argnum, $descriptor);
    }
    /* Not SWIG_POINTER_RELEASE: that refuses a handle already released,
     * and closing twice must be a no-op. */
    if (lua_type(L, $input) == LUA_TUSERDATA) {
        swig_lua_userdata *usr_ = (swig_lua_userdata *)lua_touserdata(L, $input);
        usr_->own = 0;
        usr_->ptr = NULL;
    }
%}
%ignore watchlock_client_close;
%ignore watchlock_lock_free;
%ignore watchlock_lock_abandon;
%rename(client_close) wl_lua_client_close;
%rename(lock_free) wl_lua_lock_free;
%rename(lock_abandon) wl_lua_lock_abandon;
%inline %{
static void wl_lua_client_close(watchlock_client *RELEASED) { watchlock_client_close(RELEASED); }
static void wl_lua_lock_free(watchlock_lock *RELEASED) { watchlock_lock_free(RELEASED); }
static int wl_lua_lock_abandon(watchlock_lock *RELEASED) { return watchlock_lock_abandon(RELEASED); }
%}

/* ---- binary-safe names ---------------------------------------------------- */

%typemap(in, checkfn="lua_isstring") (const void *name, size_t name_len)
%{
    if (lua_type(L, $input) != LUA_TSTRING) {
        SWIG_Lua_pushferrstring(L, "%s: the name must be a string, got %s", "$symname",
                                luaL_typename(L, $input));
        SWIG_fail;
    }
    {
        size_t len_ = 0;
        $1 = (void *)lua_tolstring(L, $input, &len_);
        $2 = len_;
    }
%}

/* lock_name(lock) -> string (may contain NUL bytes). */
%ignore watchlock_lock_name;
%native(lock_name) int wl_lua_lock_name(lua_State *L);
%{
static int wl_lua_lock_name(lua_State *L)
{
    watchlock_lock *lock = NULL;
    size_t len = 0;
    const char *name;
    if (lua_gettop(L) != 1 ||
        !SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&lock, SWIGTYPE_p_watchlock_lock, 0)))
        return luaL_error(L, "lock_name: expected a lock handle");
    name = watchlock_lock_name(lock, &len);
    if (name == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, name, len);
    return 1;
}
%}

/* ---- multi-lock (issue 23) ------------------------------------------------- */
/* multi_lock_new(client, {names...}) -> status, lock;
 * lock_name_at(lock, i) -> string or nil (i from 0);
 * lock_lost_name(lock) -> string or nil. Binary-safe names, as above. */
%ignore watchlock_multi_lock_new;
%ignore watchlock_lock_name_at;
%ignore watchlock_lock_lost_name;
%native(multi_lock_new) int wl_lua_multi_lock_new(lua_State *L);
%native(lock_name_at) int wl_lua_lock_name_at(lua_State *L);
%native(lock_lost_name) int wl_lua_lock_lost_name(lua_State *L);
%{
static int wl_lua_multi_lock_new(lua_State *L)
{
    watchlock_client *client = NULL;
    watchlock_lock *lock = NULL;
    size_t n, i;
    const void **names;
    size_t *lens;
    int status;
    if (lua_gettop(L) != 2 || !SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&client, SWIGTYPE_p_watchlock_client, 0)) ||
        lua_type(L, 2) != LUA_TTABLE)
        return luaL_error(L, "multi_lock_new: expected a client handle and a table of names");
#if LUA_VERSION_NUM >= 502
    n = (size_t)lua_rawlen(L, 2);
#else
    n = (size_t)lua_objlen(L, 2);
#endif
    names = (const void **)calloc(n + 1, sizeof *names);
    lens = (size_t *)calloc(n + 1, sizeof *lens);
    if (names == NULL || lens == NULL) {
        free((void *)names);
        free(lens);
        return luaL_error(L, "multi_lock_new: out of memory");
    }
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) {
            free((void *)names);
            free(lens);
            return luaL_error(L, "multi_lock_new: name %d must be a string, got %s", (int)i + 1,
                              luaL_typename(L, -1));
        }
        names[i] = lua_tolstring(L, -1, &lens[i]); /* kept alive by the table */
        lua_pop(L, 1);
    }
    status = watchlock_multi_lock_new(&lock, client, (const void *const *)names, lens, n);
    free((void *)names);
    free(lens);
    lua_pushinteger(L, status);
    SWIG_NewPointerObj(L, lock, SWIGTYPE_p_watchlock_lock, 1);
    return 2;
}

static int wl_lua_lock_name_at(lua_State *L)
{
    watchlock_lock *lock = NULL;
    size_t len = 0;
    const char *name;
    if (lua_gettop(L) != 2 || !SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&lock, SWIGTYPE_p_watchlock_lock, 0)) ||
        lua_type(L, 2) != LUA_TNUMBER || lua_tonumber(L, 2) < 0)
        return luaL_error(L, "lock_name_at: expected a lock handle and an index from 0");
    name = watchlock_lock_name_at(lock, (size_t)lua_tonumber(L, 2), &len);
    if (name == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, name, len);
    return 1;
}

static int wl_lua_lock_lost_name(lua_State *L)
{
    watchlock_lock *lock = NULL;
    size_t len = 0;
    const char *name;
    if (lua_gettop(L) != 1 || !SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&lock, SWIGTYPE_p_watchlock_lock, 0)))
        return luaL_error(L, "lock_lost_name: expected a lock handle");
    name = watchlock_lock_lost_name(lock, &len);
    if (name == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, name, len);
    return 1;
}
%}

/* ---- 64-bit integers ---------------------------------------------------------- */

%typemap(in, checkfn="lua_isnumber") int64_t
%{
    if (wl_lua_to_i64(L, $input, "$symname", $argnum, &$1) != 0)
        SWIG_fail;
%}
%typemap(out) int64_t %{ wl_lua_push_i64(L, $1); SWIG_arg++; %}
%typemap(out) int64_t watchlock_lock_fencing_token, int64_t watchlock_lock_list_fence,
              int64_t watchlock_lock_fencing_token_at, int64_t watchlock_name_info_fence
    %{ wl_lua_push_token(L, $1); SWIG_arg++; %}
%typemap(out) uint64_t %{ wl_lua_push_i64(L, (int64_t)$1); SWIG_arg++; %}

/* ---- output parameters become extra results -------------------------------- */

%typemap(in, numinputs=0) int64_t *OUTPUT (int64_t tmp = 0), uint64_t *OUTPUT (uint64_t tmp = 0),
                          int *OUTPUT (int tmp = 0)
    %{ $1 = &tmp; %}
%typemap(argout) int64_t *OUTPUT %{ wl_lua_push_i64(L, tmp$argnum); SWIG_arg++; %}
%typemap(argout) uint64_t *OUTPUT %{ wl_lua_push_i64(L, (int64_t)tmp$argnum); SWIG_arg++; %}
%typemap(argout) int *OUTPUT %{ lua_pushinteger(L, tmp$argnum); SWIG_arg++; %}

%apply int *OUTPUT { int *held, int *released, int *reason, int *renew_num, int *renew_den };
%apply int64_t *OUTPUT { int64_t *remaining_ms, int64_t *out_ms, int64_t *upper_us, int64_t *count };
/* Fencing tokens out of client_inspect: a token, as lock_fencing_token(). */
%typemap(in, numinputs=0) int64_t *fence (int64_t tmp = 0) %{ $1 = &tmp; %}
%typemap(argout) int64_t *fence %{ wl_lua_push_token(L, tmp$argnum); SWIG_arg++; %}
%apply uint64_t *OUTPUT { uint64_t *lock_id };

/* ---- not wrapped ------------------------------------------------------------- */

/* The watchdog thread must never run Lua code: no callbacks. */
%ignore watchlock_lock_set_on_lost;
%ignore watchlock_lost_fn;

/* ---- a quorum's member URLs: a table (sequence) of strings (issue 21) ------- */
/* core.client_open_quorum({ "redis://a", "redis://b", ... }) -> status, client.
 * The strings are borrowed from the table, which outlives the call. */
%typemap(in, checkfn="lua_istable") (const char *const *urls, size_t n)
%{
    {
        size_t n_ = (size_t)lua_rawlen(L, $input), i_;
        $1 = ($1_ltype)calloc(n_ > 0 ? n_ : 1, sizeof(char *));
        if ($1 == NULL) {
            SWIG_Lua_pushferrstring(L, "%s: out of memory", "$symname");
            SWIG_fail;
        }
        $2 = n_;
        for (i_ = 0; i_ < n_; i_++) {
            size_t len_ = 0;
            const char *s_;
            lua_rawgeti(L, $input, (int)(i_ + 1));
            if (lua_type(L, -1) != LUA_TSTRING) {
                SWIG_Lua_pushferrstring(L, "%s: urls[%d] must be a string, got %s", "$symname",
                                        (int)(i_ + 1), luaL_typename(L, -1));
                free((void *)$1);
                $1 = NULL;
                SWIG_fail;
            }
            s_ = lua_tolstring(L, -1, &len_);
            lua_pop(L, 1); /* still referenced by the table */
            if (len_ != strlen(s_)) {
                SWIG_Lua_pushferrstring(L, "%s: urls[%d] contains a NUL byte", "$symname", (int)(i_ + 1));
                free((void *)$1);
                $1 = NULL;
                SWIG_fail;
            }
            ((const char **)$1)[i_] = s_;
        }
    }
%}
%typemap(freearg) (const char *const *urls, size_t n) %{ free((void *)$1); %}
