-- Shared helpers for the Lua tests: the server the harness started, redis
-- commands from outside the library (redis-cli), polling, unique names.
local H = {}

H.url = os.getenv("WATCHLOCK_URL")
H.port = os.getenv("WATCHLOCK_TEST_PORT")
if not H.url or not H.port then
  error("run the Lua tests through tests/harness/redis_server.py (WATCHLOCK_URL and "
    .. "WATCHLOCK_TEST_PORT are not set)", 0)
end
-- The interpreter running the tests, for child processes.
H.lua = os.getenv("WATCHLOCK_LUA") or arg and arg[-1] or "lua5.4"
H.is_54 = _VERSION == "Lua 5.4"

-- A test file's list and the function that appends to it:
--   local T, test = H.suite()   ...   return T
function H.suite()
  local T = {}
  return T, function(name, fn) T[#T + 1] = { name, fn } end
end

-- A client on the harness's server (WATCHLOCK_URL).
function H.client()
  return assert(require("watchlock").connect())
end

function H.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- H.redis("GET", "k") -> the reply as redis-cli prints it, trailing newline cut.
function H.redis(...)
  local parts = { "redis-cli", "-p", H.port }
  for i = 1, select("#", ...) do
    parts[#parts + 1] = H.quote((select(i, ...)))
  end
  local p = assert(io.popen(table.concat(parts, " ") .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return (out:gsub("\n$", ""))
end

-- The Redis key of a lock name (no braces or '%' in test names: see core/src/proto/keys.c).
function H.lock_key(name)
  assert(not name:find("[{}%%]"), "lock_key: name needs escaping")
  return "watchlock:{" .. name .. "}"
end

function H.sleep(seconds)
  os.execute("sleep " .. tostring(seconds))
end

-- Polls pred() until it returns true; fails after `timeout` seconds (generous:
-- the machine is shared). Returns the number of polls.
function H.wait_until(pred, timeout, what)
  local deadline = os.time() + (timeout or 20)
  local n = 0
  while true do
    n = n + 1
    if pred() then return n end
    if os.time() > deadline then
      error("timed out waiting for " .. (what or "a condition"), 2)
    end
    H.sleep(0.05)
  end
end

local counter = 0
local salt = tostring(os.time()) .. "-" .. tostring(math.random(1, 1e6))
function H.name(tag)
  counter = counter + 1
  return ("lua-test:%s:%s:%d"):format(tag or "lock", salt, counter)
end

-- Runs fn and returns its error message; fails if it did not raise.
function H.raises(fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then
    error("expected an error, but the call succeeded", 2)
  end
  return tostring(err)
end

-- Increments the plain GET/SET counter `key` n times, each time under
-- `lock` (through watchlock.with_lock). Used by both counter processes.
function H.guarded_increments(watchlock, lock, key, n)
  for _ = 1, n do
    assert(watchlock.with_lock(lock, function()
      local v = tonumber(H.redis("GET", key)) or 0
      H.redis("SET", key, tostring(v + 1))
      return true
    end))
  end
end

function H.eq(actual, expected, what)
  if actual ~= expected then
    error(("%s: expected %s, got %s"):format(what or "value", tostring(expected), tostring(actual)), 2)
  end
end

function H.match(s, pattern, what)
  if type(s) ~= "string" or not s:find(pattern) then
    error(("%s: %q does not match %q"):format(what or "message", tostring(s), pattern), 2)
  end
end

return H
