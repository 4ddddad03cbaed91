/*
 * qscripts.c - the scripts of the waiter queue (docs/design.md, "Waiter
 * queue and the lock family"), shared by the fair lock, the semaphore and
 * the read-write lock (locks/queue.c). scripts.c lists them with the others.
 *
 * KEYS, always in this order, all under the name's hash tag (keys.c):
 *   1 state   watchlock:{N}        a hash: kind ("fair" | "sem" | "rw"), cap
 *             (permits), used (permits held), seq (arrival counter), fixed
 *             (1: the count was set by watchlock_client_set_permits). It is
 *             the plain lock's key: a plain acquire on a queued name meets a
 *             hash and fails (WRONGTYPE), a queued kind on a plain-held name
 *             meets a string and is refused: never both at once.
 *   2 fence   watchlock:{N}:fence  the fencing counter the plain lock uses
 *   3 holders watchlock:{N}:q:h    ZSET hold id -> its lease's end (server ms:
 *             set by the grant and by every renewal and extend, up or down:
 *             the renew script, scripts.c)
 *   4 queue   watchlock:{N}:q:q    ZSET waiter id -> arrival number (FIFO)
 *   5 live    watchlock:{N}:q:l    ZSET waiter id -> liveness lease's end (ms)
 *   6 data    watchlock:{N}:q:d    hash: <id> -> permits asked for or held;
 *             "w:<id>" -> "<ident> <lease ms> <reader 0|1> <liveness ms>
 *             <enqueued ms>" for
 *             a waiter; "g:<id>" -> the fencing token of its current hold;
 *             "o:<id>" -> the owner record "<host>\n<pid>\n<label>" of a
 *             labelled waiter or hold (written at enqueue or grant, dropped
 *             with the hold or the waiter)
 * plus, built inside the scripts from ARGV prefixes (same tag, same slot):
 *   watchlock:{N}:q:h:<id>  a hold's own key: "<token>.<epoch>" with PX lease,
 *             renewed and extended by the plain renew script (scripts.c), so
 *             queued holds ride in the watchdog's batched rounds unchanged;
 *   watchlock:{N}:q:c:<id>  the waiter's own wake-up channel.
 * A grant sets the waiter's hold key for the waiter's liveness lease only
 * (so a waiter that died before it learnt of its grant costs at most that);
 * the waiter's next call, which learns of the grant, sets the full lease,
 * or the grant's wake-up message "g1 <ident> <fence> <ttl ms> <server µs>"
 * lets the waiter hold without that call (locks/waiter.c take_grant; the
 * queued answer of the acquire script carries the server's µs for it).
 * A holder is live while its own key exists: a holders entry whose score has
 * passed is re-read (PTTL of its key) and moved, or dropped with its permits;
 * each script looks at most 16 such entries. A waiter is live while its
 * liveness lease has not passed: each script drops up to 1000 dead waiters
 * in a few variadic commands (O(M log N), microseconds each), so dead
 * waiters by the hundreds are gone in the call that meets them and never
 * delay a hand-off; and grant_head never grants a head whose liveness has
 * passed (it drops it and looks at the next one). A head whose k exceeds
 * the count (set_permits lowered it) is dropped and woken: its next call
 * is refused (k > cap, EINVAL), and the waiters behind it are served.
 * Server time only.
 * The structure keys carry a TTL of at least twice the longest lease or
 * liveness that touched them (never shortened: finish sets it to that
 * + 1 s when it has fallen below that, so a busy name's keys are not
 * re-expired on every call; the renew script extends it with every renewal
 * of a queued hold), so a name whose users all died disappears.
 * While every permit is in use grant_head looks at no head (nothing can be
 * granted): a head whose k exceeds the count is told by the first call
 * after a permit frees.
 */
#include "proto/proto.h"
#include "proto/qscripts.h"

/* The uncontended acquire (issue 22.7): a name not in use is taken before
 * the common part's functions are even made, in as few calls as the hold
 * needs. Nobody holds or waits (the state outlives every live holder and
 * waiter: they keep it alive), so whatever keys are left are a dead
 * state's: dropped; the hold is granted at once and the keys get their TTL.
 * Another type in the state key goes on to the full script (its errors). */
#define Q_FAST_ACQUIRE                                                                                          \
    "local ty = redis.call('TYPE', KEYS[1])['ok']\n"                                                            \
    "if ty == 'none' then\n"                                                                                    \
    "  if ARGV[2] == '0' then return {-4} end\n"                                                                \
    "  local h, lease = ARGV[3], tonumber(ARGV[6])\n"                                                           \
    "  if tonumber(ARGV[4]) > tonumber(ARGV[2]) then return {-5, tonumber(ARGV[2])} end\n"                      \
    "  local want = string.format('%d', 2 * math.max(lease, tonumber(ARGV[7])) + 1000)\n"                       \
    "  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])\n"                                                 \
    "  local t = redis.call('TIME')\n"                                                                          \
    "  local f = wl_fence(KEYS[2], ARGV[12] ~= '1', ARGV[11], tonumber(t[1]) * 1000000 + tonumber(t[2]))\n"    \
    "  if type(f) ~= 'number' then error(f) end\n"                                                              \
    "  redis.call('SET', ARGV[8] .. h, ARGV[5], 'PX', ARGV[6])\n"                                               \
    "  redis.call('ZADD', KEYS[3], string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease), h)\n" \
    "  redis.call('HSET', KEYS[6], h, ARGV[4], 'g:' .. h, string.format('%.0f', f))\n"                          \
    "  if ARGV[13] ~= '' then redis.call('HSET', KEYS[6], 'o:' .. h, ARGV[13]) end\n"                          \
    "  redis.call('HSET', KEYS[1], 'kind', ARGV[1], 'cap', ARGV[2], 'used', ARGV[4], 'seq', '0')\n"             \
    "  redis.call('PEXPIRE', KEYS[1], want)\n"                                                                  \
    "  redis.call('PEXPIRE', KEYS[3], want)\n"                                                                  \
    "  redis.call('PEXPIRE', KEYS[6], want)\n"                                                                  \
    "  return {1, f}\n"                                                                                         \
    "end\n"

/* The uncontended release (issue 22.7): the only holder of a name nobody
 * waits for (and whose count was not fixed) releases: its key and the
 * name's structure go in one DEL, with no purge or hand-off to look for.
 * Its key holding its identity means it is that one holder: a holders
 * entry is dropped only once its key is gone. */
#define Q_FAST_RELEASE                                                                                          \
    "local v\n"                                                                                                 \
    "if ARGV[1] ~= 'purge' then\n"                                                                              \
    "  v = redis.call('GET', ARGV[4] .. ARGV[2])\n"                                                             \
    "  if ARGV[1] == 'release' and v and string.sub(v, 1, #ARGV[3]) == ARGV[3]\n"                              \
    "     and redis.call('ZCARD', KEYS[4]) == 0 and redis.call('ZCARD', KEYS[3]) == 1 then\n"                  \
    "    local st = redis.pcall('HMGET', KEYS[1], 'kind', 'fixed')\n"                                           \
    "    if type(st) == 'table' and not st.err and st[1] and st[2] ~= '1' then\n"                               \
    "      redis.call('DEL', ARGV[4] .. ARGV[2], KEYS[1], KEYS[3], KEYS[5], KEYS[6])\n"                        \
    "      return 1\n"                                                                                          \
    "    end\n"                                                                                                 \
    "  end\n"                                                                                                   \
    "end\n"

/* Acquire, and a waiter's liveness renewal (the same call: it enqueues once).
 * ARGV: 1 kind, 2 cap (0: the name's), 3 id, 4 k, 5 ident "<token>.1",
 * 6 lease ms, 7 liveness ms (0: try once, never queue), 8 hold key prefix,
 * 9 channel prefix, 10 publish command, 11 fence TTL ms, 12 reader (0|1),
 * 13 owner record "<host>\n<pid>\n<label>" ("" none: no label), written to
 * data "o:<id>" at a direct grant or at enqueue (grant_head keeps it for the
 * hold it grants; it goes with the hold or the waiter).
 * -> {1, fence} held (the hold's key holds ident with the full lease, set or
 * refreshed by this call); {0, position} queued (position 0: not queued, a
 * try); {-3, kind, cap} the name is another kind / another count;
 * {-4} a semaphore with count 0 on a name that has none; {-5, cap} k > cap. */
const char wl_q_acquire_lua[] =
    WL_FENCE_LUA /* the fence rule (proto.h), before everything that uses it */
    Q_FAST_ACQUIRE
    Q_COMMON
    "HP, CP, PUB, FTTL = ARGV[8], ARGV[9], ARGV[10], ARGV[11]\n"
    "tick()\n"
    /* the fast part returned on a name not in use (ty 'none') */
    "if ty == 'string' then return {-3, 'plain', '1'} end\n"
    "if ty ~= 'hash' then return {-3, ty, '0'} end\n"
    "local st = redis.call('HMGET', KEYS[1], 'kind', 'cap', 'used')\n"
    "if st[1] ~= ARGV[1] or (ARGV[2] ~= '0' and st[2] ~= ARGV[2]) then return {-3, st[1] or '?', st[2] or '0'} end\n"
    "cap, used = tonumber(st[2] or '0'), tonumber(st[3] or '0')\n"
    "used0 = used\n"
    "local h, k, ident, lease, live = ARGV[3], tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])\n"
    "if k > cap then return {-5, cap} end\n"
    "local want = 2 * math.max(lease, live) + 1000\n"
    "purge()\n"
    "local mine = redis.call('GET', HP .. h)\n"
    "local held = redis.call('ZSCORE', KEYS[3], h)\n"
    "if mine == ident and held then\n"
    "  redis.call('PEXPIRE', HP .. h, lease)\n"
    "  redis.call('ZADD', KEYS[3], now + lease, h)\n"
    "  drop_waiter(h)\n"
    "  local f = redis.call('HGET', KEYS[6], 'g:' .. h)\n"
    "  finish(want)\n"
    "  return {1, tonumber(f)}\n"
    "end\n"
    "if held then drop_holder(h) end\n"
    "if mine then redis.call('DEL', HP .. h) end\n"
    "local pos = redis.call('ZRANK', KEYS[4], h)\n"
    "if not pos then\n"
    "  pos = redis.call('ZCARD', KEYS[4])\n"
    "  if pos == 0 and used + k <= cap then\n"
    "    local f = grant(h, k, ident, ARGV[6], ARGV[12], ARGV[13])\n"
    "    finish(want)\n"
    "    return {1, f}\n"
    "  end\n"
    "  if live == 0 then\n"
    "    grant_head()\n"
    "    finish(want)\n"
    "    return {0, 0}\n"
    "  end\n"
    "  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)\n"
    "  redis.call('ZADD', KEYS[4], seq, h)\n"
    "  redis.call('HSET', KEYS[6], h, k, 'w:' .. h, ident .. ' ' .. ARGV[6] .. ' ' .. ARGV[12] .. ' ' .. ARGV[7] .. ' ' .. now)\n"
    "  if ARGV[13] ~= '' then redis.call('HSET', KEYS[6], 'o:' .. h, ARGV[13]) end\n"
    "end\n"
    "redis.call('ZADD', KEYS[5], now + live, h)\n"
    "grant_head()\n"
    "finish(want)\n"
    /* granted by this very call (grant_head took it off the head): its key
     * holds its identity for the grant's TTL; the full lease now */
    "if granted[h] then\n"
    "  redis.call('PEXPIRE', HP .. h, lease)\n"
    "  redis.call('ZADD', KEYS[3], now + lease, h)\n"
    "  return {1, granted[h]}\n"
    "end\n"
    /* still queued: behind the heads this call took off the queue fewer */
    "return {0, math.max(pos - removed, 0) + 1, now_us}\n";

/* Release of a hold, a waiter giving up, or a downgrade (write -> read).
 * ARGV: 1 op ("release" | "leave" | "downgrade"), 2 id, 3 the hold's
 * prefix "<token>." (release, downgrade) or ident (leave), 4 hold key
 * prefix, 5 channel prefix, 6 publish command, 7 fence TTL ms, 8 TTL to
 * keep the structure for (ms).
 * -> release: 1 released, 0 no hold (expired), -1 another hold's key;
 *    leave: 1 left the queue, 2 it had been granted meanwhile and was given
 *    back, 0 not queued; downgrade: 1 done, 0 not a held write side;
 *    "purge": 0, touches no hold or waiter of its own, only what follows.
 * Then grants to the head of the queue what is free now. When that ran out
 * of its budget (128 heads looked at: dead heads dropped, or waiters
 * granted) the answer is {result, 1}: the caller calls again with op
 * "purge" at once (queue.c), so the hand-off never waits a round for it. */
const char wl_q_release_lua[] =
    WL_FENCE_LUA /* the fence rule (proto.h), before everything that uses it */
    Q_FAST_RELEASE
    Q_COMMON
    "HP, CP, PUB, FTTL = ARGV[4], ARGV[5], ARGV[6], ARGV[7]\n"
    "local st = redis.pcall('HMGET', KEYS[1], 'kind', 'cap', 'used', 'fixed')\n"
    "if type(st) ~= 'table' or st.err or not st[1] then\n" /* no queue state (or another type) */
    "  if v and string.sub(v, 1, #ARGV[3]) == ARGV[3] then redis.call('DEL', ARGV[4] .. ARGV[2]) end\n"
    "  return 0\n"
    "end\n"
    "cap, used = tonumber(st[2] or '0'), tonumber(st[3] or '0')\n"
    "used0 = used\n"
    "local op, h, p = ARGV[1], ARGV[2], ARGV[3]\n"
    "local ours = v and string.sub(v, 1, #p) == p\n"
    "local r = 0\n"
    "if op == 'leave' then\n"
    "  if redis.call('ZSCORE', KEYS[4], h) then r = 1 end\n"
    "  drop_waiter(h)\n"
    "  if ours then r = 2; redis.call('DEL', HP .. h); drop_holder(h) end\n"
    "elseif op == 'release' then\n"
    "  if ours then r = 1; redis.call('DEL', HP .. h) elseif v then r = -1 end\n"
    "  if r ~= -1 then drop_holder(h) end\n"
    /* the last holder leaves a name nobody waits for: the state goes (as
     * finish would do) without looking for expired entries (there are none:
     * no holder, no waiter) */
    "  if used <= 0 and st[4] ~= '1' and redis.call('ZCARD', KEYS[4]) == 0 and redis.call('ZCARD', KEYS[3]) == 0 then\n"
    "    redis.call('DEL', KEYS[1], KEYS[5], KEYS[6])\n"
    "    return r\n"
    "  end\n"
    "elseif op == 'downgrade' then\n"
    "  local k = tonumber(redis.call('HGET', KEYS[6], h) or '0')\n"
    "  if ours and k > 1 and redis.call('ZSCORE', KEYS[3], h) then\n"
    "    redis.call('HSET', KEYS[6], h, 1)\n"
    "    used = used - k + 1\n"
    "    r = 1\n"
    "  end\n"
    "end\n"
    "purge()\n"
    "local more = grant_head()\n"
    "finish(tonumber(ARGV[8]))\n"
    "if more then return {r, 1} end\n"
    "return r\n";

/* Admin: sets a semaphore's count. ARGV: 1 count, 2 hold key prefix,
 * 3 channel prefix, 4 publish command, 5 fence TTL ms, 6 TTL of a name not
 * in use (ms). -> {1} done, {-3, kind} another kind. A larger count wakes
 * the waiters it can satisfy. */
const char wl_q_set_permits_lua[] =
    WL_FENCE_LUA /* the fence rule (proto.h), before everything that uses it */
    Q_COMMON
    "HP, CP, PUB, FTTL = ARGV[2], ARGV[3], ARGV[4], ARGV[5]\n"
    "local ty = redis.call('TYPE', KEYS[1])['ok']\n"
    "if ty == 'string' then return {-3, 'plain'} end\n"
    "if ty == 'hash' then\n"
    "  local kind = redis.call('HGET', KEYS[1], 'kind')\n"
    "  if kind ~= 'sem' then return {-3, kind or '?'} end\n"
    "elseif ty == 'none' then\n"
    "  redis.call('HSET', KEYS[1], 'kind', 'sem', 'used', 0, 'seq', 0)\n"
    "else return {-3, ty} end\n"
    "redis.call('HSET', KEYS[1], 'cap', ARGV[1], 'fixed', 1)\n"
    "load_state()\n"
    "purge()\n"
    "grant_head()\n"
    "finish(tonumber(ARGV[6]))\n"
    "return {1}\n";

/* A client's waiters' liveness renewal, batched (the watchdog's rounds,
 * hold/live_round.c): KEYS are 6 per waiter (its name's keys as above),
 * ARGV 1 publish command, 2 fence TTL ms, then 6 per waiter: id, ident
 * "<token>.1", liveness ms, lease ms, hold key prefix, channel prefix.
 * For each name once: the liveness of its waiters that are still queued
 * is set to now + liveness, expired holders and waiters are purged and
 * what is free granted to the head (as the acquire script does, so a
 * holder's expiry is handed on within one round). -> one integer per
 * waiter: 2 granted (its hold key holds its ident: its thread's next
 * acquire call takes it), 1 queued, 0 not queued (dropped: it enqueues
 * again), then one more: 1 when the hand-off of a name ran out of its
 * budget (live_round.c sends the call again at once), else 0. O(log N)
 * per waiter, O(PURGE log N) per name. */
const char wl_q_live_lua[] =
    WL_FENCE_LUA /* the fence rule (proto.h), before everything that uses it */
    Q_COMMON
    "PUB, FTTL = ARGV[1], ARGV[2]\n"
    "local n = #KEYS / 6\n"
    "local res, names, order, more = {}, {}, {}, 0\n"
    "for i = 1, n do\n"
    "  local g = names[KEYS[6 * i - 5]]\n"
    "  if not g then g = {}; names[KEYS[6 * i - 5]] = g; order[#order + 1] = i end\n"
    "  g[#g + 1] = i\n"
    "end\n"
    "for _, first in ipairs(order) do\n"
    "  local b0 = 6 * (first - 1)\n"
    "  K = {KEYS[b0 + 1], KEYS[b0 + 2], KEYS[b0 + 3], KEYS[b0 + 4], KEYS[b0 + 5], KEYS[b0 + 6]}\n"
    "  HP, CP = ARGV[2 + b0 + 5], ARGV[2 + b0 + 6]\n"
    "  local g = names[K[1]]\n"
    "  if redis.call('TYPE', K[1])['ok'] == 'hash' then\n"
    "    tick()\n"
    "    load_state()\n"
    "    local want = 0\n"
    "    for _, i in ipairs(g) do\n"
    "      local b = 2 + 6 * (i - 1)\n"
    "      local live = tonumber(ARGV[b + 3])\n"
    "      if redis.call('ZSCORE', K[4], ARGV[b + 1]) then redis.call('ZADD', K[5], now + live, ARGV[b + 1]) end\n"
    "      want = math.max(want, 2 * math.max(tonumber(ARGV[b + 4]), live) + 1000)\n"
    "    end\n"
    "    purge()\n"
    "    if grant_head() then more = 1 end\n"
    "    finish(want)\n"
    "  end\n"
    "  for _, i in ipairs(g) do\n"
    "    local b = 2 + 6 * (i - 1)\n"
    "    if redis.call('GET', HP .. ARGV[b + 1]) == ARGV[b + 2] then res[i] = 2\n"
    "    elseif redis.call('ZSCORE', K[4], ARGV[b + 1]) then res[i] = 1\n"
    "    else res[i] = 0 end\n"
    "  end\n"
    "end\n"
    "res[n + 1] = more\n"
    "return res\n";

/* Admin: what a name is used as. KEYS 1..6 as above; ARGV 1 the hold key
 * prefix (optional: without it no holders are listed).
 * -> {type, kind, cap, used, holders, queue length, oldest wait ms, fence,
 *    remaining ms[, holders listed]}: type "none" | "string" (a plain lock:
 *    remaining is its PTTL) | "hash" (a queued kind) | another type; the
 *    holders listed are the first 100 by lease end (O(100 log N)), each
 *    {PTTL of its key, permits, owner record or ""}, those whose key is gone
 *    (not purged yet) left out. Reads only. */
const char wl_q_info_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local ty = redis.call('TYPE', KEYS[1])['ok']\n"
    "local f = redis.pcall('GET', KEYS[2])\n"
    "if type(f) ~= 'string' then f = '0' end\n"
    "if ty ~= 'hash' then\n"
    "  return {ty, '', 0, 0, 0, 0, 0, f, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "local st = redis.call('HMGET', KEYS[1], 'kind', 'cap', 'used')\n"
    "local nq = redis.call('ZCARD', KEYS[4])\n"
    "local oldest = 0\n"
    "local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]\n"
    "if head then\n"
    "  local w = redis.call('HGET', KEYS[6], 'w:' .. head)\n"
    "  local at = w and tonumber(string.match(w, '(%d+)$'))\n"
    "  if at then oldest = math.max(0, now - at) end\n"
    "end\n"
    "local rem = 0\n"
    "local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')\n"
    "if last[2] then rem = math.max(0, tonumber(last[2]) - now) end\n"
    "local hl = {}\n"
    "if ARGV[1] then\n"
    "  for _, h in ipairs(redis.call('ZRANGE', KEYS[3], 0, 99)) do\n"
    "    local p = redis.call('PTTL', ARGV[1] .. h)\n"
    "    if p ~= -2 then\n"
    "      local d = redis.call('HMGET', KEYS[6], h, 'o:' .. h)\n"
    "      hl[#hl + 1] = {p, tonumber(d[1] or '0'), d[2] or ''}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return {ty, st[1] or '', tonumber(st[2] or '0'), tonumber(st[3] or '0'), redis.call('ZCARD', KEYS[3]), nq,\n"
    "        oldest, f, rem, hl}\n";
