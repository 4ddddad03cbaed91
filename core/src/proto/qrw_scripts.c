/*
 * qrw_scripts.c - the read-write lock on a quorum (locks/quorum_rw.c):
 * one member's try at a read share or a write hold.
 *
 * Each member keeps the name's state in the one-server read-write lock's
 * layout (qscripts.c: the state hash of kind "rw", the holders ZSET, each
 * hold's own key watchlock:{N}:q:h:<id> holding "<token>.<epoch>" with its
 * lease, the data hash with each hold's permits and token), without its
 * queue: on a quorum nobody is queued (a fair queue across independent
 * members is not something a majority can keep: docs/design.md, "The
 * read-write lock on a quorum"). A reader takes 1 of the capacity, a
 * writer all of it, so on one member a writer excludes every other hold
 * and a reader excludes writers. So the one-server scripts that act on
 * that layout act on these holds unchanged: the renew script (renewals,
 * extend: the hold's key, its holders entry and the state's TTL), the
 * release script (release, give-back, close: the key and its entry,
 * scripts.c), the queue's downgrade (a write hold's permits become 1 for
 * the same identity), force-release and inspect.
 *
 * A member's answer is the plain acquire's shape (replies.c
 * wl_reply_acquire), so the quorum's attempt counts it as it counts the
 * plain lock's (locks/quorum_lock.c): a majority of members that count
 * grants the hold.
 */
#include "proto/proto.h"
#include "proto/qscripts.h"

/* KEYS: the queue's 6 (keys.c wl_qkeys_make). ARGV: 1 id, 2 k (1 a read
 * share, the capacity a write hold), 3 ident "<token>.1", 4 lease ms,
 * 5 hold key prefix, 6 fence TTL ms, 7 reader (0|1), 8 owner record
 * ("" none), 9 capacity.
 * -> {1, fence} granted (the hold's key holds ident with the full lease);
 * {0, pttl} not now: pttl (>= 1) the longest lease left among the holds in
 * the way (the member is free for us when they end, or are released:
 * the release publishes on the name's channel); an error for a name in use
 * as another kind (WRONGTYPE) or a fence that cannot count.
 * The key already holding this very identity is a retry of an attempt
 * whose reply was lost: granted again with the token it had. A hold of
 * this handle under another identity (an earlier attempt not given back
 * yet: the handle makes one attempt at a time) is dropped. Every holder
 * whose key is gone (expired, or released by a script that could not
 * reach its entry) is dropped and the permits in use are counted from
 * the live holders: O(holders). Writes come after the checks that can
 * refuse, and a new state gets its kind only after its grant. */
const char wl_qrw_acquire_lua[] =
    WL_FENCE_LUA
    Q_COMMON
    "HP, FTTL, CP, PUB = ARGV[5], ARGV[6], '', 'PUBLISH'\n"
    "local h, k, ident, lease = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])\n"
    "local want = 2 * lease + 1000\n"
    "local ty = redis.call('TYPE', K[1])['ok']\n"
    "if ty == 'string' then\n"
    "  return redis.error_reply('WRONGTYPE the name is held as a plain lock, not a read-write lock')\n"
    "elseif ty == 'hash' then\n"
    "  local st = redis.call('HMGET', K[1], 'kind', 'cap')\n"
    "  if st[1] ~= 'rw' or st[2] ~= ARGV[9] then\n"
    "    return redis.error_reply('WRONGTYPE the name is in use as another lock kind (' .. (st[1] or '?') .. ')')\n"
    "  end\n"
    "  if redis.call('GET', HP .. h) == ident and redis.call('ZSCORE', K[3], h) then\n"
    "    tick()\n"
    "    redis.call('PEXPIRE', HP .. h, lease)\n"
    "    redis.call('ZADD', K[3], now + lease, h)\n"
    "    return {1, tonumber(redis.call('HGET', K[6], 'g:' .. h))}\n"
    "  end\n"
    "elseif ty ~= 'none' then\n"
    "  return redis.error_reply('WRONGTYPE the name\\'s key is a ' .. ty .. ', not a read-write lock')\n"
    "end\n"
    "cap = tonumber(ARGV[9])\n"
    "local rem, live = 0, {}\n"
    "if ty == 'none' then\n"
    "  redis.call('DEL', K[3], K[4], K[5], K[6])\n"
    "else\n"
    "  for _, x in ipairs(redis.call('ZRANGE', K[3], 0, -1)) do\n"
    "    local p = redis.call('PTTL', HP .. x)\n"
    "    if p == -2 or x == h then\n"
    "      if x == h then redis.call('DEL', HP .. h) end\n"
    "      drop_holder(x)\n"
    "    else\n"
    "      live[#live + 1] = x\n"
    "      if p < 0 then p = 1000 end\n"
    "      if p > rem then rem = p end\n"
    "    end\n"
    "  end\n"
    "  redis.call('DEL', HP .. h)\n"
    "end\n"
    "used = 0\n"
    "for _, x in ipairs(live) do used = used + tonumber(redis.call('HGET', K[6], x) or '0') end\n"
    "if used + k > cap or redis.call('ZCARD', K[4]) > 0 then\n"
    "  if ty == 'hash' then finish(want) end\n"
    "  return {0, math.max(rem, 1)}\n"
    "end\n"
    "local f = grant(h, k, ident, ARGV[4], ARGV[7], ARGV[8])\n"
    "if ty == 'none' then redis.call('HSET', K[1], 'kind', 'rw', 'cap', ARGV[9], 'seq', 0) end\n"
    "finish(want)\n"
    "return {1, f}\n";
