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

test("with_lock reports a release that finds the lock gone as 'lost: not owner'", function()
  -- auto_renew = false: no renewal can notice the deleted key, so only the
  -- release finds out; fn's results must not come back as if protected.
  local c = client()
  local name = H.name()
  local l = c:lock(name, { ttl = 30, auto_renew = false })
  local ok, err = watchlock.with_lock(l, function()
    H.redis("DEL", H.lock_key(name))
    return "work done"
  end)
  H.eq(ok, nil, "result dropped")
  H.eq(err, "lost: not owner", "message")
  H.eq(l:state(), "unlocked", "handle reset")
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
    "key function must return a string, got number", "bad key function")
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

test("client:wrap with a key template: {1} and {2.id} from the call's arguments", function()
  local c = client()
  local tag = H.name("tpl")
  local seen = {}
  local build = c:wrap(tag .. ":report:{1}:{2.id}", { ttl = 10, wait = 0 }, function(customer, order)
    local name = tag .. ":report:" .. tostring(customer) .. ":" .. tostring(order.id)
    seen.name = name
    seen.held = c:inspect(name).held
    local _, err = c:lock(name):acquire(0)
    seen.other = err
    return "built " .. name
  end)
  H.eq(build("acme", { id = 7 }), "built " .. tag .. ":report:acme:7", "result")
  H.eq(seen.held, true, "the templated name was held during the call")
  H.eq(seen.other, "timeout", "another handle excluded during the call")
  H.eq(c:inspect(seen.name).held, false, "released after the call")

  -- numbers are named as integers: 42, never 42.0 (5.4) or 1.7954111832661e+15 (LuaJIT)
  local held = {}
  local probe = c:wrap(tag .. ":{1}", { wait = 0 }, function(_, expected)
    held[#held + 1] = c:inspect(tag .. ":" .. expected).held
  end)
  probe(42.0, "42")
  probe(1795411183266123, "1795411183266123")
  probe(-3, "-3")
  probe(true, "true")
  H.eq(table.concat({ tostring(held[1]), tostring(held[2]), tostring(held[3]), tostring(held[4]) }, ","),
    "true,true,true,true", "names held for 42.0, a 16-digit integer, -3, true")

  -- watchlock.wrap with a client option is the same thing
  local same = watchlock.wrap(tag .. ":{1}", { client = c }, function(x) return c:inspect(tag .. ":" .. x).held end)
  H.eq(same("k"), true, "watchlock.wrap(template, { client = c }, fn)")
  c:close()
end)

test("key templates: literal braces, and mistakes raise at wrap() or at the call", function()
  local c = client()
  local tag = H.name("tplerr")
  local held
  local f = c:wrap(tag .. ":{{literal}}:{1}", function(x) held = c:inspect(tag .. ":{literal}:" .. x).held end)
  f("a")
  H.eq(held, true, "{{ and }} are literal braces")
  H.match(H.raises(c.wrap, c, "a{b}", print), "key template \"a{b}\": {b} is not an argument", "named field")
  H.match(H.raises(c.wrap, c, "a{0}", print), "{0} is not an argument", "position 0")
  H.match(H.raises(c.wrap, c, "a{1", print), "{1 is not an argument", "unclosed")
  H.match(H.raises(c.wrap, c, "a}", print), "a single '}'", "single close")
  H.match(H.raises(c.wrap, c, "a{1.}", print), "{1.} is not an argument", "empty field")
  local two = c:wrap(tag .. ":{2}", function() end)
  H.match(H.raises(two, "only one"), "needs argument 2, the call has 1", "missing argument")
  local one = c:wrap(tag .. ":{1}", function() end)
  H.match(H.raises(one, {}), "{1} is a table; give a string or a number", "table argument")
  H.match(H.raises(one, nil), "{1} is nil", "nil argument")
  H.match(H.raises(c:wrap("{1}", function() end), ""), "^watchlock: lock: lock name is empty$", "empty name (the core's rule)")
  local field = c:wrap(tag .. ":{1.id}", function() end)
  H.match(H.raises(field, "str"), "{1.id}: argument 1 is not a table", "field of a string")
  H.match(H.raises(field, { id = print }), "{1.id} is a function", "function field")
  c:close()
end)

test("client:wrap uses that client; a client option must be the same client", function()
  local c = client()
  local other = client()
  local name = H.name("cwrap")
  local f = c:wrap(name, { wait = 0 }, function() return "ran" end)
  H.eq(f(), "ran", "runs")
  H.match(H.raises(c.wrap, c, name, { client = other }, print), "option client must be this client", "other client")
  H.eq(c:wrap(name, { client = c }, function() return 1 end)(), 1, "the same client is fine")
  c:close()
  -- bound to c, not to the default client (which would still work)
  H.match(H.raises(f), "client is closed", "closed client")
  H.match(H.raises(c.wrap, c, name, print), "client is closed", "wrap on a closed client")
  other:close()
end)

return T
