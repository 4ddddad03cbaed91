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

return T
