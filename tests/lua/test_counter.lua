-- Two processes x 300 increments of a GET/SET counter guarded by the lock:
-- every increment is a read and a separate write (two redis-cli runs), so
-- any overlap of critical sections would lose updates.
local watchlock = require("watchlock")
local H = require("helpers")

local T = {}
local N = 300
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

T[1] = { "two processes x " .. N .. " guarded increments -> exact count", function()
  local name, key = H.name("counter"), H.name("counter-value")
  local cmd = ("%s %s %s %s %d 2>&1"):format(H.quote(H.lua), H.quote(
    dir .. "counter_worker.lua"),
    H.quote(name), H.quote(key), N)
  local child = assert(io.popen(cmd))
  local c = assert(watchlock.connect())
  local lock = c:lock(name, { ttl = 10 })
  H.guarded_increments(watchlock, lock, key, N)
  local out = child:read("*a")
  local ok, how, code = child:close()
  H.match(out, "worker done", "worker output")
  if _VERSION ~= "Lua 5.1" then
    assert(ok and code == 0, ("worker exited %s %s: %s"):format(how, code, out))
  end
  H.eq(H.redis("GET", key), tostring(2 * N), "counter")
  c:close()
end }

T[2] = { "a waiter in another process is handed the lock on release", function()
  local name, ready, go = H.name("handoff"), H.name("ready"), H.name("go")
  local child = assert(io.popen(("%s %s %s %s %s 2>&1"):format(H.quote(H.lua),
    H.quote(dir .. "hold_worker.lua"), H.quote(name), H.quote(ready), H.quote(go))))
  H.wait_until(function() return H.redis("EXISTS", ready) == "1" end, 60, "the child to hold the lock")
  local c = assert(watchlock.connect())
  local l = c:lock(name)
  local ok, err = l:acquire(0)
  H.eq(err, "timeout", "held by the child")
  H.redis("SET", go, "1")
  H.eq(l:acquire(120), true, "acquired after the child released")
  -- The child wrote tostring(token): exact on LuaJIT too (a decimal string).
  H.match(H.redis("GET", ready), "^%d+$", "the child's token as it printed it")
  assert(tonumber(l:fencing_token()) > tonumber(H.redis("GET", ready)), "token above the child's")
  assert(l:release())
  H.match(child:read("*a"), "holder done", "child output")
  child:close()
  c:close()
end }

return T
