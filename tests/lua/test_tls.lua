-- The Lua module over TLS (rediss://): a script of its own, run against a
-- TLS-only server by the harness (registered in tests/CMakeLists.txt):
--   python3 tests/harness/redis_server.py --tls -- lua5.4 tests/lua/test_tls.lua
-- WATCHLOCK_URL is then rediss://127.0.0.1:PORT?cacert=..., and
-- WATCHLOCK_TEST_TLS_DIR holds the certificates of tests/harness/tls.py.
local watchlock = require("watchlock")
local H = require("helpers")

local dir = assert(os.getenv("WATCHLOCK_TEST_TLS_DIR"), "run through redis_server.py --tls")
assert(H.url:find("^rediss://"), "WATCHLOCK_URL is not a rediss:// URL: " .. H.url)
local function url(query)
  return ("rediss://127.0.0.1:%s?%s"):format(H.port, query)
end

local T, test = H.suite()

test("acquire, hold against another client, release over verified TLS", function()
  local c = assert(watchlock.connect(H.url))
  local other = assert(watchlock.connect(H.url))
  local name = H.name("tls")
  local lock = c:lock(name, { ttl = 5 })
  assert(lock:acquire(0))
  assert(lock:locked() and tonumber(lock:fencing_token()) > 0)   -- a decimal string on LuaJIT
  local ok, err = other:lock(name):acquire(0)
  H.eq(ok, nil, "second owner")
  H.match(err, "timeout", "message")
  lock:release()
  assert(other:lock(name):acquire(0))
  c:close()
  other:close()
end)

test("a wrong CA returns nil and says the certificate is not trusted", function()
  local c, err = watchlock.connect(url("cacert=" .. dir .. "/wrong-ca.crt"))
  H.eq(c, nil, "client")
  H.match(err, "certificate", "message")
  assert(err:find("not trusted") or err:find("verify failed"), err)
end)

test("sni= names the certificate to check: a mismatch is an error", function()
  local c, err = watchlock.connect(url("cacert=" .. dir .. "/ca.crt&sni=other.example"))
  H.eq(c, nil, "client")
  H.match(err, "hostname mismatch", "message")
end)

test("insecure=1 skips verification", function()
  local c = assert(watchlock.connect(url("insecure=1")))
  local lock = c:lock(H.name("insecure"))
  assert(lock:acquire(0))
  lock:release()
  c:close()
end)

-- run (the other test files are run by run.lua; this one needs a TLS server)
print(("watchlock Lua TLS tests on %s (%s)"):format(_VERSION, jit and jit.version or "PUC Lua"))
local passed, failed = 0, 0
for _, t in ipairs(T) do
  local ok, err = xpcall(t[2], debug.traceback)
  if ok then
    passed = passed + 1
    print("ok   test_tls: " .. t[1])
  else
    failed = failed + 1
    print("FAIL test_tls: " .. t[1] .. "\n" .. tostring(err))
  end
  collectgarbage()
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
