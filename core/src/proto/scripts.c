/*
 * scripts.c - the Lua scripts behind every state change, and their SHA1s.
 *
 * Each script touches one name's keys only (one hash tag, one slot), checks
 * the hold identity where it must, and never writes before a command that
 * could fail (Redis does not roll back a script that errors halfway).
 * Fencing tokens come from a per-name counter by one rule, WL_FENCE_LUA
 * (proto.h): max(counter + 1, server TIME in microseconds), so they keep
 * increasing after the counter expires and after a server came back with
 * an old counter (an RDB snapshot, a failover to a lagging replica).
 */
#include "proto/proto.h"

#include <stdio.h>
#include <string.h>

/* KEYS: lock, fence[, owner][, name]. ARGV: hold identity "<token>.1",
 * lease ms (0: a key without expiry, the name layout's no-expiry hold), fence ttl ms[, host, pid, label][, name] (owner fields with an
 * owner label; the name key and the name for a digested long name).
 * -> {1, fence} acquired, {0, pttl} held by someone else.
 * SET NX PX comes first, so a name held by someone else costs one write
 * attempt and a PTTL, and the fence is touched only by a hold that begins.
 * The fence is wl_fence's (proto.h): max(counter + 1, TIME in us), the
 * counter set to it; a counter not yet seeded (below WL_FENCE_SEEDED, 10^15:
 * first use, or it expired) gets its TTL then, which is never refreshed,
 * so no counter outlives it (docs/design.md, "Fencing"). The key already
 * holding this very identity is a
 * retry of an acquire whose reply was lost: it counts as acquired, with a
 * fresh fencing token (never the stored one). The commands that can fail
 * after the SET (INCR of a counter of another type or not a number, TIME
 * denied by an ACL) run under pcall and undo this script's writes before
 * the error is returned: a failing acquire never leaves a key held nor a
 * counter without TTL. The key is deleted also when it held this identity
 * before the script ran (the fast acquire's SET, lock.c acquire_fast, or a
 * lost reply): the caller is told the acquire failed, so no hold may be
 * left behind under its identity.
 * With the owner key (only when the handle has an owner label), the hold
 * also writes its owner record: a hash {token = "<token>.", host, pid,
 * label} with the fence's TTL. The record is best effort, so every write
 * of it runs under pcall: an ACL that denies HSET (or a key of another
 * type) costs the record, never the acquire (the lock's SET is done and
 * a failing script would leave it held unreported); a record whose TTL
 * could not be set is deleted rather than kept forever.
 * With the name key (a long name, whose keys carry its digest: keys.c),
 * the hold stores the name there, with the fence's TTL, best effort (under
 * pcall), so that listing can show it. */
static const char acquire_lua[] =
    WL_FENCE_LUA
    "local set\n"
    "if ARGV[2] == '0' then set = redis.call('SET', KEYS[1], ARGV[1], 'NX')\n"
    "else set = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) end\n"
    "if not set and redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
    "  return {0, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "local n = wl_fence(KEYS[2], true, ARGV[3])\n"
    "if type(n) ~= 'number' then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return n\n"
    "end\n"
    "if not set and ARGV[2] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
    "if #ARGV >= 6 then\n"
    "  redis.pcall('DEL', KEYS[3])\n"
    "  local w = redis.pcall('HSET', KEYS[3], 'token', string.match(ARGV[1], '^.*%.'), 'host', ARGV[4],\n"
    "                       'pid', ARGV[5], 'label', ARGV[6])\n"
    "  if type(w) == 'number' and type(redis.pcall('PEXPIRE', KEYS[3], ARGV[3])) ~= 'number' then\n"
    "    redis.pcall('DEL', KEYS[3])\n"
    "  end\n"
    "end\n"
    "if #ARGV == 4 or #ARGV == 7 then\n"
    "  redis.pcall('SET', KEYS[#KEYS], ARGV[#ARGV], 'PX', ARGV[3])\n"
    "end\n"
    "return {1, n}\n";

/* KEYS: lock. ARGV: "<token>." (the hold, any epoch; a token without the
 * '.': the name layout's hold, whose value is exactly the token), channel, the
 * publish command (PUBLISH, or SPUBLISH: sharded pub/sub under Cluster).
 * -> 1 released, 0 no key, -1 another owner (or not a string).
 * PUBLISH runs under pcall after the DEL: a user whose ACL denies the
 * channel still releases (Redis would not undo the DEL anyway); waiters
 * then get in when the holder's lease would have ended.
 * A queued kind's hold key (watchlock:{N}:q:h:<id>, as the renew script
 * below tells them apart) also leaves its name's holders entry, permits
 * and data (qscripts.c), and the name's state goes with its last holder
 * when nobody waits: the read-write lock on a quorum (qrw_scripts.c)
 * releases, gives back and closes its holds with this script on every
 * member. Every call on those keys runs under pcall: a key of another
 * type costs the bookkeeping, never the release. */
static const char release_lua[] =
    "local v = redis.pcall('GET', KEYS[1])\n"
    "if not v then return 0 end\n"
    "if type(v) ~= 'string' or (string.byte(ARGV[1], -1) == 46 and string.sub(v, 1, #ARGV[1]) or v) ~= ARGV[1] then\n"
    "  return -1\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "if string.byte(KEYS[1], -1) ~= 125 then\n"
    "  local b, h = string.match(KEYS[1], '^(.*):q:h:(%x+)$')\n"
    "  if b and redis.pcall('ZREM', b .. ':q:h', h) == 1 then\n"
    "    local k = tonumber(redis.pcall('HGET', b .. ':q:d', h)) or 0\n"
    "    redis.pcall('HDEL', b .. ':q:d', h, 'g:' .. h, 'o:' .. h)\n"
    "    if redis.pcall('HEXISTS', b, 'kind') == 1 then redis.pcall('HINCRBY', b, 'used', -k) end\n"
    "    if redis.pcall('ZCARD', b .. ':q:h') == 0 and redis.pcall('ZCARD', b .. ':q:q') == 0\n"
    "       and redis.pcall('HGET', b, 'fixed') ~= '1' then\n"
    "      redis.pcall('DEL', b, b .. ':q:h', b .. ':q:l', b .. ':q:d')\n"
    "    end\n"
    "  end\n"
    "end\n"
    "redis.pcall(ARGV[3], ARGV[2], '')\n"
    "return 1\n";

/* Renewal and extend, for n holds at once. KEYS: n lock keys. ARGV per
 * key: "<token>.<to>" (the hold's identity at the epoch this write
 * installs), from epoch, lease ms.
 * -> {r1, r2, ...}: 1 renewed (the key now holds "<token>.<to>" with the
 * full lease), 0 not ours (another owner, no key, or another type), 2 stale
 * (a later write of ours already installed a newer epoch: nothing done).
 * A name-layout hold's identity is its token alone (no '.', no epoch): only
 * a key that holds exactly it is ours.
 * A key that holds exactly "<token>.<to>" gets PEXPIRE (the common case,
 * one string comparison); one at an epoch of ours in [from, to) is moved
 * to `to`. Writes that set different leases carry different epochs, so a
 * write delayed on the wire can never shorten a lease a later write set
 * (docs/design.md, "Hold identity"). One MGET reads every key (a key of
 * another type reads as nil there: "not ours" for that entry only); one
 * redis.call per key instead of two halves the script's per-call overhead.
 * All keys live on one server (and, under Cluster, must share a slot).
 * A queued kind's hold key (watchlock:{N}:q:h:<id>, qscripts.c; a plain
 * lock key ends with its tag's '}') also extends the TTL of its name's
 * queue structure to twice the lease, so a holder that is only renewed
 * keeps its name's state alive, and sets the hold's entry in the name's
 * holders set to the new lease's end (server time), down as well as up:
 * a holder that shortened its lease and died is handed on when its short
 * lease ends, not when the first one would have (issue 29.13). */
static const char renew_lua[] =
    "local qnow\n"
    "local function qtouch(k, ms)\n"
    "  local b, h = string.match(k, '^(.*):q:h:(%x+)$')\n"
    "  if not b then return end\n"
    "  if not qnow then\n"
    "    local t = redis.call('TIME')\n"
    "    qnow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "  end\n"
    "  redis.pcall('ZADD', b .. ':q:h', 'XX', string.format('%.0f', qnow + tonumber(ms)), h)\n"
    "  local want = 2 * tonumber(ms) + 1000\n"
    "  for _, s in ipairs({b, b .. ':q:h', b .. ':q:q', b .. ':q:l', b .. ':q:d'}) do\n"
    "    local p = redis.call('PTTL', s)\n"
    "    if p >= 0 and p < want then redis.call('PEXPIRE', s, want) end\n"
    "  end\n"
    "end\n"
    "local out, vs = {}, redis.call('MGET', unpack(KEYS))\n"
    "for i = 1, #KEYS do\n"
    "  local a = 3 * i\n"
    "  local id = ARGV[a - 2]\n"
    "  local v = vs[i]\n"
    "  if v == id then\n"
    "    redis.call('PEXPIRE', KEYS[i], ARGV[a])\n"
    "    out[i] = 1\n"
    "    if string.byte(KEYS[i], -1) ~= 125 then qtouch(KEYS[i], ARGV[a]) end\n"
    "  else\n"
    "    local p = string.match(id, '^.*%.')\n"
    "    if not p or type(v) ~= 'string' or string.sub(v, 1, #p) ~= p then\n"
    "      out[i] = 0\n"
    "    else\n"
    "      local e, to = tonumber(string.sub(v, #p + 1)), tonumber(string.sub(id, #p + 1))\n"
    "      if e and e >= tonumber(ARGV[a - 1]) and e < to then\n"
    "        redis.call('SET', KEYS[i], id, 'PX', ARGV[a])\n"
    "        out[i] = 1\n"
    "        if string.byte(KEYS[i], -1) ~= 125 then qtouch(KEYS[i], ARGV[a]) end\n"
    "      else\n"
    "        out[i] = 2\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return out\n";

/* KEYS: lock. ARGV: channel, publish command. -> number of keys deleted;
 * wakes waiters. A name in use as a queued kind (its lock key is the
 * queue's state hash, qscripts.c) loses its whole queue: every holder's
 * key (the holders learn it at their next renewal, LOST_TAKEN), the
 * holders, the queue and the waiters' data; waiters queue again at their
 * next call. O(holders): an admin call. */
static const char force_release_lua[] =
    "if redis.call('TYPE', KEYS[1])['ok'] == 'hash' and redis.call('HEXISTS', KEYS[1], 'kind') == 1 then\n"
    "  local b = KEYS[1]\n"
    "  for _, h in ipairs(redis.call('ZRANGE', b .. ':q:h', 0, -1)) do redis.call('DEL', b .. ':q:h:' .. h) end\n"
    "  redis.call('DEL', b .. ':q:h', b .. ':q:q', b .. ':q:l', b .. ':q:d')\n"
    "end\n"
    "local n = redis.call('DEL', KEYS[1])\n"
    "redis.pcall(ARGV[2], ARGV[1], '')\n"
    "return n\n";

/* KEYS: lock, fence. -> {exists, pttl, fence}. */
static const char inspect_lua[] =
    "local f = redis.call('GET', KEYS[2]) or '0'\n"
    "return {redis.call('EXISTS', KEYS[1]), redis.call('PTTL', KEYS[1]), f}\n";

/* KEYS: lock, fence, owner[, name]. -> {state, pttl, fence[, host, pid,
 * label]}, or with the name key (a digested long name) always 7 entries:
 * {state, pttl, fence, host|false, pid|false, label|false, name|false}:
 * state 0 no key, 1 a string (a hold), 2 a key of another type, 3 / 4 / 5
 * a name in use as a fair lock / semaphore / read-write lock (its queue's
 * state hash, qscripts.c; pttl then the longest holder's lease left, at
 * least 1, from the holders' scores); the owner
 * fields only when the owner record names the current hold (its token is
 * the lock value's "<token>." prefix), so the record an earlier hold left
 * behind is never shown. Reads only; every read that can meet another
 * type runs under pcall. */
static const char inspect_owner_lua[] =
    "local v = redis.pcall('GET', KEYS[1])\n"
    "local f = redis.pcall('GET', KEYS[2])\n"
    "if type(f) ~= 'string' then f = '0' end\n"
    "local s = 1\n"
    "if type(v) ~= 'string' then s = redis.call('EXISTS', KEYS[1]) * 2 end\n"
    "local pttl = redis.call('PTTL', KEYS[1])\n"
    "if s == 2 then\n"
    "  local k = redis.pcall('HGET', KEYS[1], 'kind')\n"
    "  s = ({fair = 3, sem = 4, rw = 5})[k] or 2\n"
    "  if s > 2 then\n"
    "    local t = redis.call('TIME')\n"
    "    local last = redis.call('ZRANGE', KEYS[1] .. ':q:h', -1, -1, 'WITHSCORES')\n"
    "    pttl = last[2] and math.max(1, tonumber(last[2]) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))) or 1\n"
    "  end\n"
    "end\n"
    "local out = {s, pttl, f}\n"
    "if s == 1 then\n"
    "  local o = redis.pcall('HMGET', KEYS[3], 'token', 'host', 'pid', 'label')\n"
    "  if type(o) == 'table' and type(o[1]) == 'string' and #o[1] > 1 and\n"
    "     string.sub(v, 1, #o[1]) == o[1] and o[2] and o[3] and o[4] then\n"
    "    out[4], out[5], out[6] = o[2], o[3], o[4]\n"
    "  end\n"
    "end\n"
    "if KEYS[4] then\n"
    "  for i = #out + 1, 6 do out[i] = false end\n"
    "  local nm = redis.pcall('GET', KEYS[4])\n"
    "  out[7] = type(nm) == 'string' and nm\n"
    "end\n"
    "return out\n";

/* Multi-lock (locks/multi.c), several names of one slot (or of the one
 * server) at once, all or nothing. KEYS: lock, fence of each name, in the
 * multi-lock's order (sorted by lock key). ARGV: lease ms, fence TTL ms,
 * then each name's hold identity "<token>.1" (each name's hold has a token
 * of its own, as every hold does). -> {1, fence1, fence2, ...} all taken;
 * {0, i, pttl} name i is held by someone else (nothing written); {-1, i}
 * name i's key is of another type (in use as another lock kind: nothing
 * written). Every key is read before anything is written, so a refusal
 * leaves nothing; a key already holding its identity is a retry whose
 * reply was lost (taken, with fresh fences). Each name's fence comes from
 * its own counter exactly as the plain acquire's does (wl_fence), so a
 * name's tokens increase across plain and multi holds alike. A counter that cannot count (another type, TIME
 * denied) undoes the call: every lock key of the call is deleted before the
 * error is returned. */
static const char multi_acquire_lua[] =
    WL_FENCE_LUA
    "local n = #KEYS / 2\n"
    "for i = 1, n do\n"
    "  local v = redis.pcall('GET', KEYS[2 * i - 1])\n"
    "  if type(v) == 'table' then return {-1, i} end\n"
    "  if v and v ~= ARGV[2 + i] then return {0, i, redis.call('PTTL', KEYS[2 * i - 1])} end\n"
    "end\n"
    "for i = 1, n do redis.call('SET', KEYS[2 * i - 1], ARGV[2 + i], 'PX', ARGV[1]) end\n"
    "local out = {1}\n"
    "for i = 1, n do\n"
    "  local c = wl_fence(KEYS[2 * i], true, ARGV[2])\n"
    "  if type(c) ~= 'number' then\n"
    "    for j = 1, n do redis.call('DEL', KEYS[2 * j - 1]) end\n"
    "    return c\n"
    "  end\n"
    "  out[i + 1] = c\n"
    "end\n"
    "return out\n";

/* KEYS: lock keys of one slot. ARGV: for each key its hold's "<token>."
 * (any epoch) and its channel, then the publish command (for one key, the
 * release script's own arguments). -> {r1, r2, ...}: per key as the
 * release script answers (1 released, 0 no key, -1 another owner or
 * another type). */
static const char multi_release_lua[] =
    "local out, pub = {}, ARGV[#ARGV]\n"
    "for i = 1, #KEYS do\n"
    "  local v, p = redis.pcall('GET', KEYS[i]), ARGV[2 * i - 1]\n"
    "  if not v then out[i] = 0\n"
    "  elseif type(v) ~= 'string' or string.sub(v, 1, #p) ~= p then out[i] = -1\n"
    "  else\n"
    "    redis.call('DEL', KEYS[i])\n"
    "    redis.pcall(pub, ARGV[2 * i], '')\n"
    "    out[i] = 1\n"
    "  end\n"
    "end\n"
    "return out\n";

/* The fast acquires' tokens (locks/lock.c acquire_fast, locks/multi_io.c
 * take_fast: inside their MULTI, right after the SETs that take the keys,
 * so each token is drawn while its key is the hold's). KEYS: fence
 * counters. ARGV: fence TTL ms. -> {token1, token2, ...} by wl_fence's
 * rule, or the error of the first counter that cannot count (the tokens
 * drawn before it are spent numbers: harmless). */
static const char fence_lua[] =
    WL_FENCE_LUA
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  local n = wl_fence(KEYS[i], true, ARGV[1])\n"
    "  if type(n) ~= 'number' then return n end\n"
    "  out[i] = n\n"
    "end\n"
    "return out\n";

wl_script wl_scripts[WL_SCRIPT_COUNT] = {
    [WL_SCRIPT_FENCE] = {fence_lua, ""},
    [WL_SCRIPT_MULTI_ACQUIRE] = {multi_acquire_lua, ""},
    [WL_SCRIPT_MULTI_RELEASE] = {multi_release_lua, ""},
    [WL_SCRIPT_ACQUIRE] = {acquire_lua, ""},
    [WL_SCRIPT_RELEASE] = {release_lua, ""},
    [WL_SCRIPT_RENEW] = {renew_lua, ""},
    [WL_SCRIPT_FORCE_RELEASE] = {force_release_lua, ""},
    [WL_SCRIPT_INSPECT] = {inspect_lua, ""},
    [WL_SCRIPT_INSPECT_OWNER] = {inspect_owner_lua, ""},
    [WL_SCRIPT_Q_ACQUIRE] = {wl_q_acquire_lua, ""},
    [WL_SCRIPT_Q_RELEASE] = {wl_q_release_lua, ""},
    [WL_SCRIPT_Q_SET_PERMITS] = {wl_q_set_permits_lua, ""},
    [WL_SCRIPT_Q_INFO] = {wl_q_info_lua, ""},
    [WL_SCRIPT_Q_LIVE] = {wl_q_live_lua, ""},
    [WL_SCRIPT_QRW_ACQUIRE] = {wl_qrw_acquire_lua, ""},
};

/* The scripts' SHA1s, as the server names them: learnt from SCRIPT LOAD
 * the first time a client opens (wl_scripts_learn). Until then, and if
 * SCRIPT LOAD is denied, scripts go out as EVAL with their body. */
static atomic_bool shas_ready;
static pthread_mutex_t shas_mu = PTHREAD_MUTEX_INITIALIZER;

bool wl_scripts_have_sha(void)
{
    return atomic_load_explicit(&shas_ready, memory_order_acquire);
}

void wl_scripts_set_shas(const char shas[][41])
{
    pthread_mutex_lock(&shas_mu);
    if (!wl_scripts_have_sha()) {
        for (int i = 0; i < WL_SCRIPT_COUNT; i++)
            memcpy(wl_scripts[i].sha, shas[i], 41);
        atomic_store_explicit(&shas_ready, true, memory_order_release);
    }
    pthread_mutex_unlock(&shas_mu);
}
