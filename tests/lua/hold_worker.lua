-- Child process: holds LOCKNAME until the key GO exists, then releases.
-- Sets READY to its fencing token once it holds the lock.
-- Usage: hold_worker.lua LOCKNAME READY GO
local watchlock = require("watchlock")
local H = require("helpers")
local name, ready, go = arg[1], arg[2], arg[3]
local c = assert(watchlock.connect())
local l = c:lock(name, { ttl = 10 })
assert(l:acquire(30))
H.redis("SET", ready, tostring(l:fencing_token()))
H.wait_until(function() return H.redis("EXISTS", go) == "1" end, 120, "the go key")
assert(l:release())
c:close()
io.write("holder done\n")
