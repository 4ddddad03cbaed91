-- on_lost hooks: the watchdog (a C thread) never calls into Lua; a hook
-- runs in the caller's thread at the next call into the module after the
-- loss (or at watchlock.poll()), once per loss.
local watchlock = require("watchlock")
local H = require("helpers")

local T, test = H.suite()

local client = H.client
local core = watchlock._core

-- Waits until the watchdog has marked `lock` lost, through the private core
-- only: no call into the module, so no hook can run meanwhile.
local function wait_lost_quietly(lock)
  H.wait_until(function() return core.lock_state(lock._handle) == core.WATCHLOCK_LOST end, 30,
    "the watchdog to find the lock lost")
end

-- A lock on `c` with a hook that records its calls, held, with its key
-- deleted (unless `keep`: the caller deletes it, e.g. after other calls into
-- the module, which would run the hook of a loss already found).
local function lose(c, opts, keep)
  local name = H.name("lost")
  local calls = {}
  opts = opts or {}
  opts.ttl = opts.ttl or 1
  opts.on_lost = opts.on_lost or function(lock, reason)
    calls[#calls + 1] = { lock = lock, reason = reason, state = lock:state() }
  end
  local l = c:lock(name, opts)
  assert(l:acquire(0))
  if not keep then
    H.redis("DEL", H.lock_key(name))
  end
  return l, calls, name
end

test("on_lost runs at the next call into the module, not from the watchdog, once", function()
  local c = client()
  local l, calls = lose(c)
  wait_lost_quietly(l)
  H.eq(#calls, 0, "not run by the watchdog thread")
  H.eq(watchlock.poll(), 1, "poll ran one hook")
  H.eq(#calls, 1, "ran once")
  H.eq(calls[1].lock, l, "the lock")
  H.eq(calls[1].reason, "taken", "the reason, as lock:lost() gives it")
  H.eq(calls[1].state, "lost", "the lock is lost inside the hook")
  H.eq(watchlock.poll(), 0, "not again")
  local ok, err = l:release()
  H.eq(ok, nil, "release after the loss")
  H.eq(err, "not owner", "release message")
  H.eq(#calls, 1, "still once")
  c:close()
end)

test("on_lost runs before the call that would see the loss: lost(), release(), any other", function()
  local c = client()
  -- lock:lost()
  local l, calls = lose(c)
  wait_lost_quietly(l)
  local lost, reason = l:lost()
  H.eq(#calls, 1, "hook ran before lost() returned")
  H.eq(lost, true, "lost()")
  H.eq(reason, "taken", "reason")
  assert(not l:release())
  -- release() of the lost lock
  local l2, calls2 = lose(c)
  wait_lost_quietly(l2)
  H.eq(select(2, l2:release()), "not owner", "release")
  H.eq(#calls2, 1, "hook ran before release()")
  -- any call into the module, here one on another client
  local l3, calls3 = lose(c)
  wait_lost_quietly(l3)
  local other = client()
  H.eq(#calls3, 1, "hook ran at connect()")
  other:close()
  assert(not l3:release())
  c:close()
end)

test("a hook may call into the module (no re-entry), e.g. release the lost lock", function()
  local c = client()
  local inside = {}
  local l = lose(c, { on_lost = function(lock, reason)
    inside.nested = watchlock.poll() -- no nested dispatch
    inside.released = { lock:release() }
    inside.state = lock:state()
    inside.reason = reason
  end })
  wait_lost_quietly(l)
  H.eq(watchlock.poll(), 1, "one hook")
  H.eq(inside.nested, 0, "poll inside a hook runs nothing")
  H.eq(inside.released[2], "not owner", "release inside the hook")
  H.eq(inside.state, "unlocked", "unlocked after that release")
  H.eq(inside.reason, "taken", "reason")
  H.eq(l:state(), "unlocked", "still unlocked")
  c:close()
end)

test("only hooked locks report; each hook gets its own lock, across clients", function()
  local c1, c2 = client(), client()
  -- every lock held before any key goes: an acquire after a loss was found
  -- would run that loss's hook itself (a loaded machine: the watchdog finds
  -- a's key gone while b is still being acquired)
  local a, calls_a, name_a = lose(c1, nil, true)
  local b, calls_b, name_b = lose(c2, nil, true)
  local plain_name = H.name("plain")
  local plain = c1:lock(plain_name, { ttl = 1 })
  assert(plain:acquire(0))
  H.redis("DEL", H.lock_key(name_a), H.lock_key(name_b), H.lock_key(plain_name))
  wait_lost_quietly(a)
  wait_lost_quietly(b)
  wait_lost_quietly(plain)
  H.eq(watchlock.poll(), 2, "two hooks, none for the lock without one")
  H.eq(calls_a[1].lock, a, "a's hook got a")
  H.eq(calls_b[1].lock, b, "b's hook got b")
  H.eq(#calls_a + #calls_b, 2, "once each")
  c1:close()
  c2:close()
end)

test("wrap with on_lost: the hook runs and the guarded call answers 'lost: ...'", function()
  local c = client()
  local name = H.name("wraplost")
  local calls = {}
  local guarded = c:wrap(name, { ttl = 1, on_lost = function(_, reason) calls[#calls + 1] = reason end },
    function()
      H.redis("DEL", H.lock_key(name))
      -- a long critical section that makes no other watchlock call polls
      H.wait_until(function() watchlock.poll() return #calls > 0 end, 30, "the hook")
      return "work"
    end)
  local ok, err = guarded()
  H.eq(ok, nil, "result dropped")
  H.eq(err, "lost: taken", "message")
  H.eq(#calls, 1, "hook ran once")
  c:close()
end)

test("an error in a hook is reported on stderr and does not break the call that ran it", function()
  -- In a child process, to see its stderr.
  local script = [[
    local watchlock = require("watchlock")
    local H = require("helpers")
    local c = assert(watchlock.connect())
    local name = H.name("hookerr")
    local l = c:lock(name, { ttl = 1, on_lost = function() error("boom in the hook") end })
    assert(l:acquire(0))
    H.redis("DEL", H.lock_key(name))
    H.wait_until(function()
      return watchlock._core.lock_state(l._handle) == watchlock._core.WATCHLOCK_LOST
    end, 30, "loss")
    local ok, err = l:release()
    io.write("release: ", tostring(ok), " ", tostring(err), "\n")
    c:close()
  ]]
  local p = assert(io.popen(("%s -e %s 2>&1"):format(H.quote(H.lua), H.quote(script))))
  local out = p:read("*a")
  p:close()
  H.match(out, "release: nil not owner", "the call still answered")
  H.match(out, "watchlock: the on_lost hook of lock \"lua%-test:hookerr:[^\"]*\" raised: [^\n]*boom in the hook",
    "reported")
  H.match(out, "stack traceback:", "with its traceback")
end)

test("on_lost must be callable", function()
  local c = client()
  H.match(H.raises(c.lock, c, "n", { on_lost = 5 }), "on_lost must be a function%(lock, reason%), got number",
    "number")
  H.match(H.raises(c.wrap, c, "n", { on_lost = "x" }, print), "on_lost must be a function", "wrap")
  local callable = setmetatable({}, { __call = function() end })
  assert(c:lock("n", { on_lost = callable }), "a callable table is fine")
  c:close()
end)

return T
