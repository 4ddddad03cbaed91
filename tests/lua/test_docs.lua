-- The Lua examples of README.md and docs/lua.md run as written (only the
-- server URL is the harness's), so a user who copies them gets working code.
local H = require("helpers")

local T, test = H.suite()

local root = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "../../"

-- The first ```lua block after the line `after` in a file of the tree.
local function example(file, after)
  local f = assert(io.open(root .. file, "r"))
  local text = f:read("*a")
  f:close()
  local from = assert(text:find(after, 1, true), file .. ": no '" .. after .. "'")
  local code = text:match("```lua\n(.-)\n```", from)
  assert(code, file .. ": no ```lua block after '" .. after .. "'")
  assert(code:find('"redis://127.0.0.1:6379"', 1, true), file .. ": the example connects elsewhere")
  return (code:gsub('"redis://127%.0%.0%.1:6379"', ('%q'):format(H.url)))
end

-- Runs `code` plus `tail` as a chunk whose print() is silent; returns its results.
local function run(code, tail, name)
  local env = setmetatable({ print = function() end }, { __index = _G })
  local chunk = code .. "\n" .. tail
  local fn
  if setfenv then -- LuaJIT / 5.1
    fn = assert(loadstring(chunk, "=" .. name))
    setfenv(fn, env)
  else
    fn = assert(load(chunk, "=" .. name, "t", env))
  end
  return fn()
end

test("README's Lua example of the queued kinds runs", function()
  local code = example("README.md", "## Fair lock, semaphore, read-write lock")
  local ok, fair, client = run(code, "return ok, fair, client", "README.md (kinds)")
  H.eq(ok, true, "with_lock over the read side")
  H.eq(fair:kind(), "fair", "the fair lock's kind")
  H.eq(client:name_info("encoders").in_use, 0, "the permits were given back")
  client:close()
end)

test("README's Lua example runs and uses the client it opened", function()
  local code = example("README.md", "## Lua")
  assert(not code:find("watchlock.wrap(", 1, true), "wrap without the opened client")
  local sum, built, watched, client = run(code, "return sum, report(7), watched, client", "README.md")
  H.eq(sum, 3, "with_lock's sum")
  H.eq(built, "built 7", "report(7)")
  H.eq(watched.name, "orders:43", "the hooked lock")
  H.eq(client:inspect("report:7").held, false, "report:7 released")
  client:close()
end)

test("docs/lua.md's quick start runs (without the <close> block on LuaJIT)", function()
  local code = example("docs/lua.md", "## Quick start")
  if not H.is_54 then
    local n
    code, n = code:gsub("\ndo\n  local l <close>.-\nend\n", "\n")
    H.eq(n, 1, "the <close> block was cut for LuaJIT")
  end
  local total, result, job = run(code, "return total, result, job", "docs/lua.md")
  H.eq(total, 3, "with_lock's total")
  H.eq(result, "done", "build_report(42)")
  H.eq(job.name, "nightly-job", "the hooked lock")
end)

test("docs/lua.md's dropped-lock example runs: the lock stays held", function()
  local code = example("docs/lua.md", "**A dropped lock is not an unlock.**")
  local client = run(code, "collectgarbage() collectgarbage() return client", "docs/lua.md (dropped)")
  H.eq(client:inspect("job").held, true, "a collected lock is not released")
  client:close()
  H.eq(run("local c = assert(require('watchlock').connect(" .. ('%q'):format(H.url) .. ")) return c", "",
           "check"):inspect("job").held, false, "close released it")
end)

return T
