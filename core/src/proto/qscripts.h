/*
 * proto/qscripts.h - the Lua common to the waiter queue's scripts
 * (qscripts.c, which says what each key holds) and to the read-write lock's
 * scripts on a quorum (qrw_scripts.c): the state, the holders, the fence
 * and the grant, written once.
 */
#ifndef WATCHLOCK_QSCRIPTS_H
#define WATCHLOCK_QSCRIPTS_H

#define Q_COMMON                                                                                               \
    "local K = KEYS\n"                                                                                      \
    "local now, now_us\n"                                                                                     \
    "local function tick()\n"                                                                                 \
    "  if now then return end\n"                                                                              \
    "  local t = redis.call('TIME')\n"                                                                         \
    "  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                                     \
    "  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                                  \
    "end\n"                                                                                                   \
    "local cap, used, used0 = 0, 0, nil\n"                                                                      \
    "local granted, removed = {}, 0\n"                                                                          \
    "local HP, CP, PUB, FTTL\n"                                                                                \
    "local function fence(incr)\n"                                                                             \
    "  tick()\n"                                                                                              \
    "  local n = wl_fence(K[2], incr, FTTL, now_us)\n"                                                         \
    "  if type(n) ~= 'number' then error(n) end\n"                                                             \
    "  return n\n"                                                                                             \
    "end\n"                                                                                                    \
    "local function drop_holder(h)\n"                                                                          \
    "  if redis.call('ZREM', K[3], h) == 1 then\n"                                                          \
    "    used = used - tonumber(redis.call('HGET', K[6], h) or '0')\n"                                      \
    "  end\n"                                                                                                  \
    "  redis.call('HDEL', K[6], h, 'g:' .. h, 'o:' .. h)\n"                                                        \
    "end\n"                                                                                                    \
    "local function drop_waiter(h)\n"                                                                          \
    "  redis.call('ZREM', K[4], h)\n"                                                                       \
    "  redis.call('ZREM', K[5], h)\n"                                                                       \
    "  redis.call('HDEL', K[6], 'w:' .. h)\n"                                                               \
    "  if not redis.call('ZSCORE', K[3], h) then redis.call('HDEL', K[6], h, 'o:' .. h) end\n"                      \
    "end\n"                                                                                                    \
    "local function purge()\n"                                                                                 \
    "  tick()\n"                                                                                              \
    "  for _, h in ipairs(redis.call('ZRANGEBYSCORE', K[3], '-inf', now, 'LIMIT', 0, 16)) do\n"             \
    "    local p = redis.call('PTTL', HP .. h)\n"                                                              \
    "    if p > 0 then redis.call('ZADD', K[3], now + p, h)\n"                                              \
    "    elseif p == -1 then redis.call('ZADD', K[3], now + 1000, h)\n"                                     \
    "    else drop_holder(h) end\n"                                                                            \
    "  end\n"                                                                                                  \
    "  local dead = redis.call('ZRANGEBYSCORE', K[5], '-inf', now, 'LIMIT', 0, 1000)\n"                     \
    "  if #dead == 0 then return end\n"                                                                        \
    "  local ws, ds = {}, {}\n"                                                                                \
    "  for i, h in ipairs(dead) do\n"                                                                          \
    "    ws[i] = 'w:' .. h\n"                                                                                  \
    "    if not redis.call('ZSCORE', K[3], h) then ds[#ds + 1] = h; ds[#ds + 1] = 'o:' .. h end\n"            \
    "  end\n"                                                                                                  \
    "  redis.call('ZREM', K[4], unpack(dead))\n"                                                              \
    "  redis.call('ZREM', K[5], unpack(dead))\n"                                                              \
    "  redis.call('HDEL', K[6], unpack(ws))\n"                                                                \
    "  if #ds > 0 then redis.call('HDEL', K[6], unpack(ds)) end\n"                                            \
    "end\n"                                                                                                    \
    "local function grant(h, k, ident, lease, rd, o)\n"                                                         \
    "  tick()\n"                                                                                                \
    "  local f = fence(rd ~= '1')\n"                                                                            \
    "  redis.call('SET', HP .. h, ident, 'PX', lease)\n"                                                        \
    "  redis.call('ZADD', K[3], now + tonumber(lease), h)\n"                                                    \
    "  if o and o ~= '' then\n"                                                                                 \
    "    redis.call('HSET', K[6], h, k, 'g:' .. h, string.format('%.0f', f), 'o:' .. h, o)\n"                   \
    "  else\n"                                                                                                  \
    "    redis.call('HSET', K[6], h, k, 'g:' .. h, string.format('%.0f', f))\n"                                 \
    "  end\n"                                                                                                   \
    "  used = used + k\n"                                                                                       \
    "  granted[h] = f\n"                                                                                        \
    "  return f\n"                                                                                              \
    "end\n"                                                                                                     \
    "local function grant_head()\n"                                                                             \
    "  tick()\n"                                                                                                \
    "  for i = 1, 128 do\n"                                                                                     \
    "    if cap > 0 and used >= cap then return end\n"                                                          \
    "    local h = redis.call('ZRANGE', K[4], 0, 0)[1]\n"                                                       \
    "    if not h then return end\n"                                                                            \
    "    local d = redis.call('HMGET', K[6], h, 'w:' .. h, 'o:' .. h)\n"                                        \
    "    local k = tonumber(d[1] or '1')\n"                                                                     \
    "    local alive = tonumber(redis.call('ZSCORE', K[5], h) or '0') > now\n"                                  \
    "    if alive and k <= cap and used + k > cap then return end\n"                                            \
    "    removed = removed + 1\n"                                                                               \
    "    if alive and k <= cap and d[2] then\n"                                                                 \
    "      redis.call('ZREM', K[4], h)\n"                                                                       \
    "      redis.call('ZREM', K[5], h)\n"                                                                       \
    "      redis.call('HDEL', K[6], 'w:' .. h)\n"                                                               \
    "      local ident, lease, rd, live = string.match(d[2], '^(%S+) (%d+) (%d) (%d+)')\n"                      \
    "      local ttl = math.min(tonumber(lease), tonumber(live))\n"                                             \
    "      local f = grant(h, k, ident, ttl, rd, d[3])\n"                                                       \
    "      redis.pcall(PUB, CP .. h, string.format('g1 %s %.0f %.0f %.0f', ident, f, ttl, now_us))\n"           \
    "    else\n"                                                                                                \
    "      drop_waiter(h)\n"                                                                                    \
    "      if alive and k > cap then redis.pcall(PUB, CP .. h, '') end\n"                                       \
    "    end\n"                                                                                                 \
    "  end\n"                                                                                                   \
    "  return true\n" /* its budget ran out: the caller calls again at once (queue.c, live_round.c) */          \
    "end\n"                                                                                                     \
    "local function finish(want)\n"                                                                             \
    "  if redis.call('ZCARD', K[3]) == 0 then used = 0 end\n"                                                   \
    "  if used == 0 and redis.call('ZCARD', K[4]) == 0 and redis.call('HGET', K[1], 'fixed') ~= '1' then\n"     \
    "    redis.call('DEL', K[1], K[5], K[6])\n"                                                                 \
    "    return\n"                                                                                              \
    "  end\n"                                                                                                   \
    "  if used ~= used0 then redis.call('HSET', K[1], 'used', string.format('%.0f', used)) end\n"               \
    "  for i = 1, 6 do\n"                                                                                       \
    "    if i ~= 2 then\n"                                                                                      \
    "      local p = redis.call('PTTL', K[i])\n"                                                                \
    "      if p == -1 or (p >= 0 and p < want - 1000) then redis.call('PEXPIRE', K[i], want) end\n"             \
    "    end\n"                                                                                                 \
    "  end\n"                                                                                                   \
    "end\n"                                                                                                     \
    "local function load_state()\n"                                                                             \
    "  local st = redis.call('HMGET', K[1], 'cap', 'used')\n"                                                   \
    "  cap, used = tonumber(st[1] or '0'), tonumber(st[2] or '0')\n"                                            \
    "  used0 = used\n"                                                                                          \
    "end\n"

#endif
