-- Child process of test_counter: increments a GET/SET counter `n` times,
-- each increment under the lock. Usage: counter_worker.lua LOCKNAME KEY N
local watchlock = require("watchlock")
local H = require("helpers")
local name, key, n = arg[1], arg[2], tonumber(arg[3])
local c = assert(watchlock.connect())
local lock = c:lock(name, { ttl = 10 })
H.guarded_increments(watchlock, lock, key, n)
c:close()
io.write("worker done\n")
