-- client:multi_lock({names}, opts): several names, all or nothing (issue 23).
local watchlock = require("watchlock")
local H = require("helpers")

local T, test = H.suite()

local client = H.client

local function count_keys(names)
  local n = 0
  for _, name in ipairs(names) do
    n = n + tonumber(H.redis("EXISTS", H.lock_key(name)))
  end
  return n
end

test("all or nothing, one token per name, release gives back all", function()
  local c = client()
  local a, b, x = H.name("ma"), H.name("mb"), H.name("mx")
  local m = c:multi_lock({ b, a }, { ttl = 10 })
  H.eq(m.name, b, "name: the first")
  H.eq(#m.names, 2, "names")
  H.eq(m:acquire(0), true, "acquire")
  H.eq(m:locked(), true, "locked")
  H.eq(count_keys({ a, b }), 2, "both keys")
  local tokens = m:fencing_tokens()
  H.eq(#tokens, 2, "two tokens")
  H.eq(tokens[1], c:inspect(b).fence, "b's token")
  H.eq(tokens[2], c:inspect(a).fence, "a's token")
  H.eq(m:fencing_token(), tokens[1], "fencing_token: the first name's")
  local other = c:multi_lock({ x, a })
  local ok, err = other:acquire(0)
  H.eq(ok, nil, "overlapping multi-lock")
  H.eq(err, "timeout", "its message")
  H.eq(count_keys({ x }), 0, "nothing taken")
  ok, err = other:acquire(0.3)
  H.eq(err, "timeout", "with a wait that runs out")
  H.eq(count_keys({ x }), 0, "still nothing taken")
  H.eq(m:release(), true, "release")
  H.eq(count_keys({ a, b }), 0, "both gone")
  H.eq(watchlock.with_lock(other, function() return count_keys({ x, a }) end), 2, "with_lock")
  H.eq(count_keys({ x, a }), 0, "with_lock released")
  H.eq(m:lost_name(), nil, "not lost")
  H.match(H.raises(function() c:multi_lock("a") end), "table", "one name is refused")
  H.match(H.raises(function() c:multi_lock({ a, 3 }) end), "string", "names are strings")
  c:close()
end)

test("the loss of one name loses all, told once with the name", function()
  local c = client()
  local a, b, cc = H.name("la"), H.name("lb"), H.name("lc")
  local calls = {}
  local m = c:multi_lock({ a, b, cc }, { ttl = 1, on_lost = function(lock, reason)
    calls[#calls + 1] = { lock = lock, reason = reason }
  end })
  assert(m:acquire(0))
  H.redis("DEL", H.lock_key(b))
  H.wait_until(function() return m:state() == "lost" end, 30, "the loss")
  H.eq(m:lost_name(), b, "lost_name")
  H.sleep(1.2)
  watchlock.poll()
  H.eq(#calls, 1, "told once")
  H.eq(calls[1].lock, m, "the lock")
  H.eq(calls[1].reason, "taken", "the reason")
  local ok, err = m:release()
  H.eq(ok, nil, "release after the loss")
  H.eq(err, "not owner", "release message")
  H.eq(count_keys({ a, b, cc }), 0, "the other names are deleted")
  c:close()
end)

return T
