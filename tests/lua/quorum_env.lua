-- The 5-member quorum a Lua quorum test runs against (tests/harness/quorum.py
-- --serve starts it and exports WATCHLOCK_QUORUM_PORTS / _PIDS): the
-- members' ports, pids and URLs (short timeouts: a stopped member must cost
-- 400 ms, not the default 2 s), a redis-cli call on one member, how many
-- members hold a key, SIGSTOP/SIGCONT of members, and `paused`, which runs
-- a function with members stopped and resumes them whatever it does.
local H = require("helpers")

local Q = {}

local function list(var)
  local out = {}
  for v in assert(os.getenv(var), "run through quorum.py --serve --"):gmatch("%d+") do
    out[#out + 1] = v
  end
  return out
end
Q.ports, Q.pids = list("WATCHLOCK_QUORUM_PORTS"), list("WATCHLOCK_QUORUM_PIDS")
assert(#Q.ports == 5 and #Q.pids == 5, "expected 5 members")

Q.OPTS = "?connect_timeout=300ms&command_timeout=400ms"
Q.urls = {}
for i, p in ipairs(Q.ports) do
  Q.urls[i] = "redis://127.0.0.1:" .. p .. Q.OPTS
end

function Q.redis_at(i, ...)
  local parts = { "redis-cli", "-p", Q.ports[i] }
  for k = 1, select("#", ...) do
    parts[#parts + 1] = H.quote((select(k, ...)))
  end
  local p = assert(io.popen(table.concat(parts, " ") .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return (out:gsub("%s+$", ""))
end

-- On how many of the members `idx` (default all) the key exists.
function Q.holders(key, idx)
  local n = 0
  for _, i in ipairs(idx or { 1, 2, 3, 4, 5 }) do
    if Q.redis_at(i, "EXISTS", key) == "1" then
      n = n + 1
    end
  end
  return n
end

function Q.signal(sig, idx)
  for _, i in ipairs(idx) do
    assert(os.execute("kill -" .. sig .. " " .. Q.pids[i]))
  end
end

-- lock:acquire(wait) with members stopped: one running member slower than
-- the 400 ms command timeout (a loaded machine) leaves no majority for that
-- attempt, a connection error rather than a wait; the next attempt is
-- decided again. Up to 5 attempts; returns the last one's ok, err.
function Q.acquire_past_slow_members(lock, wait)
  local ok, err
  for _ = 1, 5 do
    ok, err = lock:acquire(wait)
    if ok or not tostring(err):find("no majority", 1, true) then break end
  end
  return ok, err
end

-- Runs fn with members idx stopped; resumes them whatever fn does.
function Q.paused(idx, fn)
  Q.signal("STOP", idx)
  local ok, err = xpcall(fn, debug.traceback)
  Q.signal("CONT", idx)
  if not ok then
    error(err, 0)
  end
end

return Q
