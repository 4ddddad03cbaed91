-- The Lua module on a Redlock quorum (issue 21): a script of its own, run
-- against 5 independent redis-servers by the harness (registered in
-- tests/CMakeLists.txt):
--   python3 tests/harness/quorum.py --serve --settle 3 -- lua5.4 tests/lua/test_quorum.lua
-- (--settle 3: every member up for more than the longest lease used here, 3 s,
-- so the restart rule does not keep fresh servers out.)
-- WATCHLOCK_URL then holds the 5 URLs separated by spaces;
-- WATCHLOCK_QUORUM_PORTS and WATCHLOCK_QUORUM_PIDS list the members' ports
-- and pids (members are stopped with SIGSTOP and resumed with SIGCONT).
local watchlock = require("watchlock")
local H = require("helpers")

local Q = require("quorum_env")
local ports, pids, urls = Q.ports, Q.pids, Q.urls
local redis_at, holders, signal, paused = Q.redis_at, Q.holders, Q.signal, Q.paused

-- Monotonic enough for bounds of seconds: wall clock in ms from date(1).
local function now()
  local p = assert(io.popen("date +%s%3N"))
  local ms = tonumber(p:read("*a"))
  p:close()
  return ms / 1000
end

local T, test = H.suite()

test("connect({urls}): acquire on every member, release", function()
  local c = assert(watchlock.connect(urls))
  local name = H.name("quorum")
  local lock = c:lock(name, { ttl = 3 })
  assert(lock:acquire(5))
  assert(holders(H.lock_key(name)) >= 3, "a majority holds the key")
  local granted, m = 0, lock:members()
  for _, v in ipairs(m) do
    -- "unreachable": a member slower than the 400 ms command timeout (a loaded
    -- machine); never held by another owner or kept out by the restart rule
    assert(v == "granted" or v == "unknown" or v == "unreachable", "members: " .. table.concat(m, ","))
    if v == "granted" then granted = granted + 1 end
  end
  H.eq(#m, 5, "members")
  assert(granted >= 3, "granted: " .. table.concat(m, ","))
  assert(tonumber(lock:fencing_token()) > 0)
  assert(lock:release())
  H.wait_until(function() return holders(H.lock_key(name)) == 0 end, 5, "released on every member")
  H.eq(type(c:stats().quorum.restarts), "number", "stats().quorum.restarts")
  c:close()
end)

test("two URLs raise a clear error; one is the plain client; $WATCHLOCK_URL with spaces is a quorum", function()
  local msg = H.raises(watchlock.connect, { urls[1], urls[2] })
  H.match(msg, "connect: ", "message")
  msg = H.raises(watchlock.connect, { urls[1], 42 })
  H.match(msg, "must be a string", "message")
  local one = assert(watchlock.connect({ urls[1] }))
  local lock = one:lock(H.name("one"))
  assert(lock:acquire(0))
  H.eq(#lock:members(), 1, "members of a plain client")
  lock:release()
  one:close()
  local env = assert(watchlock.connect()) -- WATCHLOCK_URL: 5 URLs separated by spaces
  local l2 = env:lock(H.name("env"), { ttl = 3 })
  assert(l2:acquire(5))
  H.eq(#l2:members(), 5, "members from $WATCHLOCK_URL")
  l2:release()
  env:close()
end)

test("a majority held by another owner: nil, \"timeout\"", function()
  local a = assert(watchlock.connect(urls))
  local b = assert(watchlock.connect(urls))
  local name = H.name("busy")
  local la = a:lock(name, { ttl = 3 })
  assert(la:acquire(5))
  local lb = b:lock(name, { ttl = 3 })
  local ok, err = lb:acquire(0.3)
  H.eq(ok, nil, "second owner")
  H.eq(err, "timeout", "message")
  local held = 0
  for _, v in ipairs(lb:members()) do
    if v == "held" then held = held + 1 end
  end
  assert(held >= 3, "held members: " .. table.concat(lb:members(), ","))
  la:release()
  assert(lb:acquire(5))
  lb:release()
  a:close()
  b:close()
end)

test("two members stopped: acquires, renews, releases", function()
  local c = assert(watchlock.connect(urls))
  local name = H.name("two-stopped")
  paused({ 1, 2 }, function()
    local lock = c:lock(name, { ttl = 1.5 })
    assert(Q.acquire_past_slow_members(lock, 5))
    H.eq(holders(H.lock_key(name), { 3, 4, 5 }), 3, "live members holding the key")
    H.wait_until(function() return lock:renewals() >= 4 end, 15, "four renewals")
    assert(not lock:lost())
    assert(lock:release())
    H.wait_until(function() return holders(H.lock_key(name), { 3, 4, 5 }) == 0 end, 5, "released on the live members")
  end)
  c:close()
end)

test("three members stopped: fails within the wait, not as \"timeout\", no key left", function()
  local c = assert(watchlock.connect(urls))
  local name = H.name("three-stopped")
  paused({ 1, 2, 3 }, function()
    local lock = c:lock(name, { ttl = 3 })
    local t0 = now()
    local ok, err = lock:acquire(1.5)
    local took = now() - t0
    H.eq(ok, nil, "acquired")
    assert(err ~= "timeout", "a stopped majority is not 'held by another owner'")
    assert(took < 1.5 + 2.0, ("the acquire took %.1f s for a 1.5 s wait"):format(took))
    local m = lock:members()
    H.eq(table.concat(m, ",", 1, 3), "unreachable,unreachable,unreachable", "members")
    H.wait_until(function() return holders(H.lock_key(name), { 4, 5 }) == 0 end, 5, "grants given back")
  end)
  c:close()
end)

test("lost is seen before a stopped majority's keys can expire", function()
  local c = assert(watchlock.connect(urls))
  local ttl = 2
  local lock = c:lock(H.name("lost"), { ttl = ttl })
  assert(lock:acquire(5))
  H.wait_until(function() return lock:renewals() >= 1 end, 10, "a renewal")
  local t_pause = now()
  paused({ 2, 3, 4 }, function()
    while not lock:lost() do
      assert(now() < t_pause + ttl, "not lost within the lease after a majority stopped")
      H.sleep(0.02)
    end
  end)
  local ok, err = lock:release()
  H.eq(ok, nil, "release after the loss")
  H.eq(err, "not owner", "message")
  c:close()
end)

test("fencing tokens increase across holders while members stop", function()
  local a = assert(watchlock.connect(urls))
  local b = assert(watchlock.connect(urls))
  local name = H.name("fence")
  local last = 0
  local stops = { { 1, 2 }, { 4, 5 }, { 2, 4 }, {}, { 3 }, { 1, 5 } }
  for round, idx in ipairs(stops) do
    local c = round % 2 == 0 and a or b
    paused(idx, function()
      local lock = c:lock(name, { ttl = 3 })
      assert(Q.acquire_past_slow_members(lock, 10))
      local t = tonumber(lock:fencing_token())
      assert(t > last, ("round %d: token %s after %s"):format(round, tostring(t), tostring(last)))
      last = t
      assert(lock:release())
    end)
  end
  a:close()
  b:close()
end)

test("read-write lock (issue 30.3): readers share, a writer excludes, downgrade", function()
  local a = assert(watchlock.connect(urls))
  local b = assert(watchlock.connect(urls))
  local name = H.name("rw")
  local r1 = a:rwlock(name):read_lock({ ttl = 3 })
  local r2 = b:rwlock(name):read_lock({ ttl = 3 })
  assert(r1:acquire(0))
  assert(r2:acquire(0), "readers share")
  local w = b:rwlock(name):write_lock({ ttl = 3 })
  local ok, err = w:acquire(0)
  H.eq(ok, nil, "writer beside readers")
  H.eq(err, "timeout", "message")
  r1:release()
  r2:release()
  assert(w:acquire(0))
  H.eq(r1:acquire(0), nil, "reader beside a writer")
  w:downgrade()
  assert(r1:acquire(0), "a reader beside the downgraded hold")
  r1:release()
  w:release()
  local called, l_or_err, err2 = pcall(function() return a:fair_lock(name) end)
  local msg = tostring(called and err2 or l_or_err)
  assert(not (called and l_or_err), "a fair lock on a quorum")
  assert(msg:find("quorum"), "fair lock refused on a quorum: " .. msg)
  a:close()
  b:close()
end)

-- run (the other test files are run by run.lua; this one needs a quorum)
print(("watchlock Lua quorum tests on %s (%s)"):format(_VERSION, jit and jit.version or "PUC Lua"))
local passed, failed = 0, 0
for _, t in ipairs(T) do
  local ok, err = xpcall(t[2], debug.traceback)
  if ok then
    passed = passed + 1
    print("ok   test_quorum: " .. t[1])
  else
    failed = failed + 1
    print("FAIL test_quorum: " .. t[1] .. "\n" .. tostring(err))
  end
  collectgarbage()
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
