-- A small test runner (Lua 5.4 and LuaJIT): runs every test of the files
-- below, prints one line per test and "N passed, N failed", and exits
-- non-zero when a test failed. Run through the harness, which starts a
-- redis-server and sets WATCHLOCK_URL:
--   python3 tests/harness/redis_server.py -- lua5.4 tests/lua/run.lua [filter]
-- with LUA_PATH covering lua/ and tests/lua/, LUA_CPATH the built module.
math.randomseed(os.time())
local files = { "test_lock", "test_helpers", "test_errors", "test_counter", "test_check", "test_on_lost", "test_docs", "test_renew_stats",
  "test_family", "test_multi" }
local filter = arg and arg[1]

print(("watchlock Lua tests on %s (%s)"):format(_VERSION, jit and jit.version or "PUC Lua"))
local passed, failed, failures = 0, 0, {}
for _, file in ipairs(files) do
  local tests = require(file)
  for _, t in ipairs(tests) do
    local name = file .. ": " .. t[1]
    if not filter or name:find(filter, 1, true) then
      local ok, err = xpcall(t[2], debug.traceback)
      if ok then
        passed = passed + 1
        print("ok   " .. name)
      else
        failed = failed + 1
        failures[#failures + 1] = name
        print("FAIL " .. name .. "\n" .. tostring(err))
      end
      collectgarbage()
    end
  end
end
print(("%d passed, %d failed"):format(passed, failed))
for _, name in ipairs(failures) do
  print("  failed: " .. name)
end
os.exit(failed == 0 and passed > 0 and 0 or 1)
