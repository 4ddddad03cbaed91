-- watchlock.with_lock and watchlock.wrap.
local watchlock = require("watchlock")
local H = require("helpers")

local T, test = H.suite()

local client = H.client

test("with_lock returns fn's results and holds the lock while fn runs", function()
  local c = client()
  local name = H.name()
  local l = c:lock(name)
  local seen_locked, seen_key
  local r = table.pack and table.pack or function(...) return { n = select("#", ...), ... } end
  local res = r(watchlock.with_lock(l, function(a, b)
    seen_locked = l:locked()
    seen_key = H.redis("EXISTS", H.lock_key(name))
    return a + b, nil, "three"
  end, 1, 2))
  H.eq(res.n, 3, "number of results")
  H.eq(res[1], 3, "first result")
  H.eq(res[2], nil, "second result")
  H.eq(res[3], "three", "third result")
  H.eq(seen_locked, true, "locked inside")
  H.eq(seen_key, "1", "key inside")
  H.eq(l:locked(), false, "released after")
  H.eq(H.redis("EXISTS", H.lock_key(name)), "0", "key gone after")
  c:close()
end)

test("with_lock releases and re-raises fn's error with its traceback", function()
  local c = client()
  local name = H.name()
  local l = c:lock(name)
  local function explode_here()
    error("boom in the critical section")
  end
  local ok, err = pcall(watchlock.with_lock, l, function() explode_here() end)
  H.eq(ok, false, "with_lock raised")
  H.match(err, "boom in the critical section", "message kept")
  H.match(err, "test_helpers%.lua:%d+: boom", "position of the original error kept")
  H.match(err, "stack traceback:", "traceback attached")
  H.match(err, "explode_here", "traceback names the failing function")
  H.eq(l:locked(), false, "released after the error")
  H.eq(l:hold_count(), 0, "no hold left")
  H.eq(H.redis("EXISTS", H.lock_key(name)), "0", "key gone")
  c:close()
end)

test("with_lock re-raises non-string error values unchanged", function()
  local c = client()
  local l = c:lock(H.name())
  local obj = { code = 42 }
  local ok, err = pcall(watchlock.with_lock, l, function() error(obj) end)
  H.eq(ok, false, "raised")
  H.eq(err, obj, "same error object")
  H.eq(l:locked(), false, "released")
  c:close()
end)

test("with_lock returns nil, 'timeout' without calling fn", function()
  local c = client()
  local name = H.name()
  local holder = c:lock(name)
  assert(holder:acquire(0))
  local called = false
  local ok, err = watchlock.with_lock(c:lock(name, { wait = 0 }), function() called = true end)
  H.eq(ok, nil, "result")
  H.eq(err, "timeout", "message")
  H.eq(called, false, "fn not called")
  assert(holder:release())
  c:close()
end)

test("with_lock on a held handle is reentrant", function()
  local c = client()
  local l = c:lock(H.name())
  assert(l:acquire(0))
  local n = watchlock.with_lock(l, function() return l:hold_count() end)
  H.eq(n, 2, "hold count inside")
  H.eq(l:hold_count(), 1, "outer hold kept")
  assert(l:release())
  c:close()
end)

test("with_lock reports a loss while fn ran as nil, 'lost: ...'", function()
  local c = client()
  local name = H.name()
  local l = c:lock(name, { ttl = 1 })
  local ok, err = watchlock.with_lock(l, function()
    H.redis("DEL", H.lock_key(name))
    H.wait_until(function() return l:lost() end, 30, "loss detection")
    return "work done"
  end)
  H.eq(ok, nil, "result dropped")
  H.eq(err, "lost: taken", "message")
  H.eq(l:state(), "unlocked", "handle reset after with_lock")
  c:close()
end)

test("with_lock raises fn's error when the lock was also lost", function()
  local c = client()
  local name = H.name()
  local l = c:lock(name, { ttl = 1 })
  local ok, err = pcall(watchlock.with_lock, l, function()
    H.redis("DEL", H.lock_key(name))
    H.wait_until(function() return l:lost() end, 30, "loss detection")
    error("failed too")
  end)
  H.eq(ok, false, "raised")
  H.match(err, "failed too", "fn's error")
  H.match(err, "lost while the function ran: taken", "loss noted")
  c:close()
end)

test("wrap with a key function: one lock per computed key", function()
  local c = client()
  local tag = H.name("report")
  local inside = {}
  local build = watchlock.wrap(function(customer) return tag .. ":" .. customer end,
    { ttl = 10, wait = 0, client = c },
    function(customer, extra)
      local key = tag .. ":" .. customer
      inside.key = H.redis("EXISTS", H.lock_key(key))
      inside.other = H.redis("EXISTS", H.lock_key(tag .. ":other"))
      local ok, err = c:lock(key):acquire(0)
      inside.second = err
      return "report for " .. customer, extra
    end)
  local a, b = build("acme", 7)
  H.eq(a, "report for acme", "result")
  H.eq(b, 7, "second result")
  H.eq(inside.key, "1", "computed key held during the call")
  H.eq(inside.other, "0", "other keys untouched")
  H.eq(inside.second, "timeout", "another handle excluded during the call")
  H.eq(H.redis("EXISTS", H.lock_key(tag .. ":acme")), "0", "released after the call")

  -- while a key is held elsewhere, the guarded call times out; other keys run
  local holder = c:lock(tag .. ":busy")
  assert(holder:acquire(0))
  local r, err = build("busy")
  H.eq(r, nil, "busy key")
  H.eq(err, "timeout", "busy message")
  H.eq(build("free"), "report for free", "another key")
  assert(holder:release())

  H.match(H.raises(watchlock.wrap(function() return 42 end, { client = c }, function() end)),
    "key function must return a non%-empty string", "bad key function")
  c:close()
end)

test("wrap with a fixed name and the default client", function()
  local name = H.name("fixed")
  local count = 0
  local guarded = watchlock.wrap(name, { ttl = 5 }, function(x)
    count = count + 1
    return H.redis("EXISTS", H.lock_key(name)), x * 2
  end)
  local held, doubled = guarded(21)
  H.eq(held, "1", "held during the call")
  H.eq(doubled, 42, "result")
  guarded(1)
  H.eq(count, 2, "calls")
  H.eq(H.redis("EXISTS", H.lock_key(name)), "0", "released")
  -- errors propagate with their traceback and release the lock
  local boom = watchlock.wrap(name, function() error("wrapped boom") end)
  local ok, err = pcall(boom)
  H.eq(ok, false, "raised")
  H.match(err, "wrapped boom", "message")
  H.match(err, "stack traceback:", "traceback")
  H.eq(H.redis("EXISTS", H.lock_key(name)), "0", "released after error")
end)

return T
