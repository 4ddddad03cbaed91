-- client:check(): the harness's server keeps no data on disk (--save ""
-- --appendonly no), which the check must report; with AOF and fsync always
-- set it reports nothing.
local watchlock = require("watchlock")
local H = require("helpers")

local T, test = H.suite()

test("check reports the test server's missing persistence, then nothing once it is set", function()
  local c = H.client()
  local findings = assert(c:check())
  H.eq(#findings, 1, "findings")
  H.eq(findings[1].code, "no_persistence", "code")
  H.match(findings[1].message, "appendonly no", "message")
  H.eq(H.redis("CONFIG", "SET", "appendonly", "yes"), "OK", "appendonly")
  H.eq(H.redis("CONFIG", "SET", "appendfsync", "always"), "OK", "appendfsync")
  local ok, err = pcall(function()
    H.eq(#assert(c:check()), 0, "findings with AOF")
  end)
  H.redis("CONFIG", "SET", "appendonly", "no")
  assert(ok, err)
  c:close()
  H.match(H.raises(c.check, c), "the client is closed", "closed client")
end)

return T
