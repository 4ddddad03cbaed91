-- Misuse raises with a message saying what was wrong; expected failures
-- (unreachable server) return nil plus a message.
local watchlock = require("watchlock")
local H = require("helpers")

local T, test = H.suite()

test("an unreachable server returns nil plus a connection message", function()
  -- Port 1 on loopback: nothing listens there, the connection is refused.
  local c, err = watchlock.connect("redis://127.0.0.1:1?connect_timeout=5s")
  H.eq(c, nil, "client")
  H.match(err, "[Cc]onnection refused", "message")
end)

test("a malformed URL or a non-string URL raises", function()
  H.match(H.raises(watchlock.connect, "http://nope"), "^watchlock: connect: ", "bad scheme")
  H.match(H.raises(watchlock.connect, 6379), "url must be a string", "number url")
end)

test("bad lock names and options raise with the core's message", function()
  local c = assert(watchlock.connect())
  H.match(H.raises(c.lock, c, 42), "lock name must be a string, got number", "number name")
  H.match(H.raises(c.lock, c, nil), "lock name must be a string, got nil", "nil name")
  H.match(H.raises(c.lock, c, ""), "^watchlock: lock: lock name is empty$", "empty name (the core's rule)")
  -- Durations go through watchlock_parse_duration: its words, not ours.
  H.match(H.raises(c.lock, c, "n", { ttl = -1 }), "^watchlock: lock: ttl: duration '%-1' is negative: it must be 0 or more", "negative ttl")
  H.match(H.raises(c.lock, c, "n", { ttl = 0 / 0 }), "^watchlock: lock: ttl: bad duration '%-?nan'", "nan ttl")
  H.match(H.raises(c.lock, c, "n", { ttl = math.huge }), "bad duration '%-?inf'", "infinite ttl")
  H.match(H.raises(c.lock, c, "n", { ttl = 1e9 }), "ttl: duration '1000000000' is too long %(at most 30 days%)", "huge ttl")
  H.match(H.raises(c.lock, c, "n", { ttl = "5x" }), "ttl: bad duration '5x': unit must be ms, s, m or h", "bad unit")
  H.match(H.raises(c.lock, c, "n", { ttl = "5s\0junk" }), "ttl: bad duration '5s\\0'", "NUL in a string")
  H.match(H.raises(c.lock, c, "n", { ttl = true }),
    "ttl must be seconds %(a number%) or a duration string such as '30s', got boolean", "boolean ttl")
  -- Values go through the setters: their rules and words.
  H.match(H.raises(c.lock, c, "n", { ttl = 0 }),
    "^watchlock: lock: ttl = 0: lock 'n': lease must be 1 ms %.%. 30 days, got 0 ms %(zero: a lock that expires at once%)$", "zero ttl")
  H.match(H.raises(c.lock, c, "n", { ttl = 0.0001 }), "lease must be 1 ms", "ttl rounded to 0 ms")
  H.match(H.raises(c.lock, c, "n", { ttl = 1, renew_interval = 2 }),
    "^watchlock: lock: renew_interval = 2: lock 'n': renew interval must be 0 %(lease/3%) or 1 %.%. 999 ms "
    .. "%(below the lease%), got 2000$", "renew_interval >= ttl")
  H.match(H.raises(c.lock, c, "n", { renew_interval = "30s" }), "or 1 %.%. 29999 ms", "the core's default ttl")
  H.match(H.raises(c.lock, c, "n", { max_renewals = -1 }),
    "^watchlock: lock: max_renewals = %-1: lock 'n': max renewals must be >= 0 %(0 = unlimited%)$", "max_renewals")
  H.match(H.raises(c.lock, c, "n", { max_renewals = 1.5 }), "max_renewals must be a whole number", "fraction")
  H.match(H.raises(c.lock, c, "n", { max_renewals = "1" }), "max_renewals must be a whole number", "string")
  H.match(H.raises(c.lock, c, "n", { max_hold = -2 }), "max_hold: duration '%-2' is negative", "max_hold")
  H.match(H.raises(c.lock, c, "n", { wait = -1 }), "^watchlock: lock: wait %(nil waits forever%): duration '%-1' is negative", "wait")
  H.match(H.raises(c.lock, c, "n", { tll = 5 }), "unknown option 'tll'", "typo option")
  H.match(H.raises(c.lock, c, "n", 5), "options must be a table", "opts type")
  H.match(H.raises(c.lock, c, "n", { auto_renew = 1 }), "auto_renew must be a boolean", "auto_renew")
  H.match(H.raises(c.lock, c, "n", { on_lost = 1 }), "on_lost must be a function", "on_lost")
  -- 0 means unlimited for both caps (the C meaning), and 0 s renew interval the default.
  local l = c:lock("n", { ttl = 1, max_renewals = 0, max_hold = 0, renew_interval = 0 })
  H.eq(l:ttl(), 1, "ttl")
  c:close()
end)

test("bad acquire/extend arguments and '.' calls raise", function()
  local c = assert(watchlock.connect())
  local l = c:lock(H.name())
  H.match(H.raises(l.acquire, l, -1), "acquire: wait %(nil waits forever%): duration '%-1' is negative", "negative wait")
  H.match(H.raises(l.acquire, l, "soon"), "acquire: wait %(nil waits forever%): bad duration 'soon'", "bad string wait")
  H.match(H.raises(l.acquire, l, {}), "wait %(nil waits forever%) must be seconds", "table wait")
  H.match(H.raises(l.extend, l, -3), "extend: ttl: duration '%-3' is negative", "negative extend")
  H.match(H.raises(l.acquire, 5), "expected a lock as self %(call it as lock:acquire", "dot call")
  H.match(H.raises(c.lock, "x"), "expected a client as self", "client dot call")
  H.eq(l:locked(), false, "nothing acquired by the failed calls")
  c:close()
end)

test("misuse raises at the line that made it", function()
  local c = assert(watchlock.connect())
  local line = debug.getinfo(1, "l").currentline
  local _, e1 = pcall(function() c:lock("n", { ttl = 0 }) end)
  local _, e2 = pcall(function() c:lock("n"):acquire(-1) end)
  local _, e3 = pcall(function() c:wrap("n", { renew_interval = 40 }, print) end)
  H.match(e1, ":" .. (line + 1) .. ": watchlock: lock: ttl = 0", "setter refusal")
  H.match(e2, ":" .. (line + 2) .. ": watchlock: acquire: wait", "parser refusal")
  H.match(e3, ":" .. (line + 3) .. ": watchlock: wrap: renew_interval = 40", "wrap")
  c:close()
end)

test("bad with_lock and wrap arguments raise", function()
  local c = assert(watchlock.connect())
  local l = c:lock(H.name())
  H.match(H.raises(watchlock.with_lock, nil, function() end), "first argument must be a lock", "nil lock")
  H.match(H.raises(watchlock.with_lock, l, "fn"), "second argument must be a function", "non-function")
  H.match(H.raises(watchlock.wrap, 42, {}, function() end), "key must be a lock name or a function", "wrap key")
  H.match(H.raises(watchlock.wrap, "k", {}, nil), "last argument must be the function", "wrap fn")
  H.match(H.raises(watchlock.wrap, "k", { client = 1 }, print), "option client must be a watchlock client", "wrap client")
  H.match(H.raises(watchlock.wrap, "k", { waitt = 1 }, print), "unknown option 'waitt'", "wrap option")
  -- Option values are judged at wrap() by the core's parser and, with a
  -- client, by its setters too; not at the first call.
  H.match(H.raises(watchlock.wrap, "k", { wait = "soon" }, print), "^watchlock: wrap: wait", "wrap wait")
  H.match(H.raises(watchlock.wrap, "k", { client = c, ttl = 0 }, print),
    "^watchlock: wrap: ttl = 0: lock 'k': lease must be 1 ms", "wrap ttl")
  H.match(H.raises(c.wrap, c, "k:{1}", { max_renewals = -1 }, print), "max renewals must be >= 0", "client:wrap")
  H.match(H.raises(c.wrap, c, "", {}, print), "lock name is empty", "empty fixed key")
  local empty = c:wrap(function() return "" end, print)
  H.match(H.raises(empty), "lock name is empty", "key function giving an empty name")
  c:close()
end)

test("a closed client raises, also through with_lock and wrap", function()
  local c = assert(watchlock.connect())
  local l = c:lock(H.name())
  c:close()
  H.match(H.raises(watchlock.with_lock, l, function() end), "client is closed", "with_lock")
  local guarded = watchlock.wrap("k", { client = c }, function() end)
  H.match(H.raises(guarded), "client is closed", "wrap")
  H.match(H.raises(c.force_release, c, "k"), "client is closed", "force_release")
end)

test("the private core refuses non-string names and non-integer durations", function()
  local core = watchlock._core
  local c = assert(watchlock.connect())
  local status, l = core.lock_new(c._handle, "core-name")
  H.eq(status, core.WATCHLOCK_OK, "lock_new")
  H.match(H.raises(core.lock_new, c._handle, 12), "name must be a string, got number", "core name")
  H.match(H.raises(core.lock_acquire, l, 1.5), "must be an integer", "fractional ms")
  H.eq(core.lock_name(l), "core-name", "lock_name")
  core.lock_free(l)
  core.lock_free(l) -- cleared: the second free is a no-op
  c:close()
end)

test("parse_duration", function()
  H.eq(watchlock.parse_duration("1.5s"), 1.5, "1.5s")
  H.eq(watchlock.parse_duration("250ms"), 0.25, "250ms")
  local v, err = watchlock.parse_duration("soon")
  H.eq(v, nil, "garbage")
  assert(type(err) == "string" and #err > 0, "message")
end)

return T
