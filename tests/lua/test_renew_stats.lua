-- issue 25: renew_interval as a fraction of the ttl (item 4) and
-- client:stats() (item 5).
local watchlock = require("watchlock")
local H = require("helpers")

local T, test = H.suite()

local client = H.client

test("renew_interval as a fraction or a percentage of the ttl", function()
  local c = client()
  for _, form in ipairs({ "1/20", "5%" }) do
    -- 1/20 of 20 s: every second; the default ttl/3 (6.7 s) would not renew
    -- within the 6 s allowed here
    local l = c:lock(H.name(), { ttl = 20, renew_interval = form })
    assert(l:acquire(0))
    local deadline = os.time() + 6
    while l:renewals() < 2 and os.time() <= deadline do H.sleep(0.05) end
    assert(l:renewals() >= 2, form .. ": renewals " .. l:renewals())
    assert(l:release())
  end
  c:close()
end)

test("renew_interval: bad fractions and intervals not below the ttl are refused", function()
  local c = client()
  H.match(H.raises(c.lock, c, "n", { ttl = 2, renew_interval = "3/3" }),
    "^watchlock: lock: renew_interval: bad renew interval '3/3': the fraction must be above 0 and below 1", "3/3")
  H.match(H.raises(c.lock, c, "n", { ttl = 2, renew_interval = "100%" }), "below 100%%", "100%")
  H.match(H.raises(c.lock, c, "n", { ttl = 2, renew_interval = "2s" }), "below the lease", "2s")
  H.match(H.raises(c.lock, c, "n", { ttl = 2, renew_interval = "x/3" }), "whole numbers", "x/3")
  local l = c:lock("n", { ttl = 2, renew_interval = "1500ms" })
  assert(l)
  c:close()
end)

test("client:stats() counts acquires, waits, holds and losses exactly", function()
  local c = client()
  local s = c:stats()
  H.eq(s.acquires, 0, "acquires at start")
  H.eq(#s.wait_time.buckets, 14, "buckets")
  H.eq(s.wait_time.buckets[1].le, 64e-6, "first bound")
  H.eq(s.wait_time.buckets[14].le, math.huge, "last bound")
  local name = H.name()
  local a, b = c:lock(name), c:lock(name)
  assert(a:acquire(0))
  assert(a:acquire(0)) -- reentrant: no new hold
  local ok, err = b:acquire(0)
  H.eq(err, "timeout", "b try-once")
  assert(a:release())
  assert(a:release())
  s = c:stats()
  H.eq(s.acquires, 1, "acquires")
  H.eq(s.contended_acquires, 0, "contended")
  H.eq(s.acquire_timeouts, 1, "timeouts")
  H.eq(s.wait_time.count, 1, "wait count")
  H.eq(s.hold_time.count, 1, "hold count")
  assert(s.hold_time.sum > 0, "hold sum")
  -- b waits for a holder whose 1 s lease runs out unrenewed: contended, one expiry
  local holder = c:lock(name, { ttl = 1, auto_renew = false })
  assert(holder:acquire(0))
  assert(b:acquire(10))
  H.wait_until(function() return holder:state() == "lost" end, 10, "the holder to be lost")
  assert(b:release())
  local tname = H.name()
  local t = c:lock(tname, { ttl = 1 })
  assert(t:acquire(0))
  H.redis("DEL", H.lock_key(tname))
  H.wait_until(function() return t:state() == "lost" end, 10, "the taken lock to be lost")
  s = c:stats()
  H.eq(s.acquires, 4, "acquires")
  H.eq(s.contended_acquires, 1, "contended")
  H.eq(s.lost.expired, 1, "lost by expiry")
  H.eq(s.lost.taken, 1, "lost taken")
  H.eq(s.lost.max_renewals + s.lost.max_hold + s.lost.connection, 0, "other losses")
  H.eq(s.release_retries, 0, "release retries")
  H.eq(s.wait_time.count, 4, "wait count")
  assert(s.wait_time.sum >= 0.26, "the long wait: " .. s.wait_time.sum)
  H.eq(s.renew_rtt.count, s.renew_rounds, "one rtt per round")
  assert(s.renew_rounds >= 1, "t was renewed before the DEL was found")
  local total = 0
  for _, bkt in ipairs(s.wait_time.buckets) do total = total + bkt.count end
  H.eq(total, 4, "bucket counts add up")
  c:close()
end)

return T
