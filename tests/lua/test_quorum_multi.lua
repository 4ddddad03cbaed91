-- The multi-lock on a Redlock quorum from Lua (issue 30.3): a script of its
-- own, run against 5 independent redis-servers by the harness (registered
-- in tests/CMakeLists.txt):
--   python3 tests/harness/quorum.py --serve --settle 3 -- lua5.4 tests/lua/test_quorum_multi.lua
-- client:multi_lock on a quorum client is held when a majority of members
-- granted every name; it excludes a multi-lock and a plain lock sharing a
-- name; a frozen minority (SIGSTOP) costs nothing; release gives back on
-- every member. Waits are on conditions with deadlines.
local watchlock = require("watchlock")
local H = require("helpers")

local Q = require("quorum_env")
local ports, pids, urls = Q.ports, Q.pids, Q.urls
local redis_at, holders, signal, paused = Q.redis_at, Q.holders, Q.signal, Q.paused

local T, test = H.suite()

test("multi_lock on a quorum: every name on a majority, exclusion, release on every member", function()
  local a = assert(watchlock.connect(urls))
  local b = assert(watchlock.connect(urls))
  local n = H.name("qmulti")
  local x, y, z = n .. ":x", n .. ":y", n .. ":z"
  local m = a:multi_lock({ x, y }, { ttl = 3 })
  assert(m:acquire(5))
  assert(holders(H.lock_key(x)) >= 3 and holders(H.lock_key(y)) >= 3, "a majority holds every name")
  local tokens = m:fencing_tokens()
  H.eq(#tokens, 2, "tokens")
  assert(tonumber(tokens[1]) > 0 and tonumber(tokens[2]) > 0)
  local other = b:multi_lock({ z, y }, { ttl = 3 })
  local ok, err = other:acquire(0)
  H.eq(ok, nil, "a multi-lock sharing y")
  H.eq(err, "timeout", "message")
  H.eq(holders(H.lock_key(z)), 0, "nothing of z kept")
  local plain = b:lock(x, { ttl = 3 })
  ok, err = plain:acquire(0)
  H.eq(ok, nil, "a plain lock on x")
  assert(m:release())
  H.wait_until(function() return holders(H.lock_key(x)) + holders(H.lock_key(y)) == 0 end, 5,
    "released on every member")
  assert(other:acquire(5))
  assert(tonumber(other:fencing_tokens()[2]) > tonumber(tokens[2]), "y's token rises")
  assert(other:release())
  a:close()
  b:close()
end)

test("two members stopped: the multi-lock is still had and released", function()
  local c = assert(watchlock.connect(urls))
  local n = H.name("qmulti-min")
  local m = c:multi_lock({ n .. ":a", n .. ":b" }, { ttl = 3 })
  signal("STOP", { 4, 5 })
  local ok, err = xpcall(function()
    assert(Q.acquire_past_slow_members(m, 5))
    H.eq(holders(H.lock_key(n .. ":a"), { 1, 2, 3 }), 3, "on the three running members")
    assert(m:release())
    H.eq(holders(H.lock_key(n .. ":b"), { 1, 2, 3 }), 0, "released on the three")
  end, debug.traceback)
  signal("CONT", { 4, 5 })
  if not ok then
    error(err, 0)
  end
  c:close()
end)

print(("watchlock Lua quorum multi-lock tests on %s (%s)"):format(_VERSION, jit and jit.version or "PUC Lua"))
local passed, failed = 0, 0
for _, t in ipairs(T) do
  local ok, err = xpcall(t[2], debug.traceback)
  if ok then
    passed = passed + 1
    print("ok   test_quorum_multi: " .. t[1])
  else
    failed = failed + 1
    print("FAIL test_quorum_multi: " .. t[1] .. "\n" .. tostring(err))
  end
  collectgarbage()
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
