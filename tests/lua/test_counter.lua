-- Two processes x 300 increments of a GET/SET counter guarded by the lock:
-- every increment is a read and a separate write (two redis-cli runs), so
-- any overlap of critical sections would lose updates.
local watchlock = require("watchlock")
local H = require("helpers")

local T = {}
local N = 300

T[1] = { "two processes x " .. N .. " guarded increments -> exact count", function()
  local name, key = H.name("counter"), H.name("counter-value")
  local cmd = ("%s %s %s %s %d 2>&1"):format(H.quote(H.lua), H.quote(
    (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "counter_worker.lua"),
    H.quote(name), H.quote(key), N)
  local child = assert(io.popen(cmd))
  local c = assert(watchlock.connect())
  local lock = c:lock(name, { ttl = 10 })
  for _ = 1, N do
    assert(watchlock.with_lock(lock, function()
      local v = tonumber(H.redis("GET", key)) or 0
      H.redis("SET", key, tostring(v + 1))
      return true
    end))
  end
  local out = child:read("*a")
  local ok, how, code = child:close()
  H.match(out, "worker done", "worker output")
  if _VERSION ~= "Lua 5.1" then
    assert(ok and code == 0, ("worker exited %s %s: %s"):format(how, code, out))
  end
  H.eq(H.redis("GET", key), tostring(2 * N), "counter")
  c:close()
end }

return T
