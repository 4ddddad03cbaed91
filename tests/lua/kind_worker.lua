-- Child process for test_family.lua: takes NAME as KIND (fair | sem:N:K |
-- read | write), waiting as long as it takes, sets the key GOT to its
-- fencing token once it holds it, and releases when the key GO exists.
-- Usage: kind_worker.lua KIND NAME GOT GO
local watchlock = require("watchlock")
local H = require("helpers")
local kind, name, got, go = arg[1], arg[2], arg[3], arg[4]
local c = assert(watchlock.connect())
local l, k
if kind == "fair" then
  l = c:fair_lock(name, { ttl = 10 })
elseif kind:find("^sem:") then
  local n, kk = kind:match("^sem:(%d+):(%d+)$")
  l, k = c:semaphore(name, { permits = tonumber(n), ttl = 10 }), tonumber(kk)
else
  local rw = c:rwlock(name)
  l = kind == "read" and rw:read_lock({ ttl = 10 }) or rw:write_lock({ ttl = 10 })
end
assert(l:acquire(120, k))
H.redis("SET", got, tostring(l:fencing_token()))
H.wait_until(function() return H.redis("EXISTS", go) == "1" end, 120, "the go key")
assert(l:release())
c:close()
io.write("worker done\n")
