-- The Lua module on Redis Cluster (redis-cluster://): a script of its own,
-- run against a 3-master cluster by the harness (registered in
-- tests/CMakeLists.txt):
--   python3 tests/harness/cluster.py --serve -- lua5.4 tests/lua/test_cluster.lua
-- WATCHLOCK_URL is then redis-cluster://127.0.0.1:P1,...; the masters'
-- ports are in WATCHLOCK_CLUSTER_MASTERS ("P1,P2,P3").
local watchlock = require("watchlock")
local H = require("helpers")

assert(H.url:find("^redis%-cluster://"), "WATCHLOCK_URL is not a redis-cluster:// URL: " .. H.url)
local masters = {}
for port in assert(os.getenv("WATCHLOCK_CLUSTER_MASTERS"), "run through cluster.py --serve --"):gmatch("%d+") do
  masters[#masters + 1] = port
end
assert(#masters == 3, "expected 3 masters, got " .. #masters)

-- A command on one node, as redis-cli prints it (MOVED ... for a key of another node's slot).
local function redis_at(port, ...)
  local parts = { "redis-cli", "-p", port }
  for i = 1, select("#", ...) do
    parts[#parts + 1] = H.quote((select(i, ...)))
  end
  local p = assert(io.popen(table.concat(parts, " ") .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return (out:gsub("%s+$", ""))
end

-- The port of the master serving key: the one that answers EXISTS with a number.
local function owner_of(key)
  for _, port in ipairs(masters) do
    if redis_at(port, "EXISTS", key):match("^%d+$") then
      return port
    end
  end
  error("no master serves " .. key)
end

-- One name per master.
local function names_on_every_master(tag)
  local found, names, n = {}, {}, 0
  while #names < #masters do
    n = n + 1
    local name = H.name(tag .. n)
    local port = owner_of(H.lock_key(name))
    if not found[port] then
      found[port] = true
      names[#names + 1] = name
    end
  end
  return names
end

local T, test = H.suite()

test("acquire, hold against another client, release on every master", function()
  local c = assert(watchlock.connect(H.url))
  local other = assert(watchlock.connect(H.url))
  for _, name in ipairs(names_on_every_master("acquire")) do
    local port = owner_of(H.lock_key(name))
    local lock = c:lock(name, { ttl = 5 })
    assert(lock:acquire(0))
    assert(lock:locked() and tonumber(lock:fencing_token()) > 0)   -- a decimal string on LuaJIT
    H.eq(redis_at(port, "EXISTS", H.lock_key(name)), "1", "key on its master")
    local ok, err = other:lock(name):acquire(0)
    H.eq(ok, nil, "second owner")
    H.match(err, "timeout", "message")
    local info = assert(other:inspect(name))
    -- the counter: the holder's token, or more (the attempt above spent a number)
    local fence, token = tonumber(info.fence), tonumber(lock:fencing_token())   -- strings on LuaJIT
    assert(info.held and fence >= token and fence <= token + 1)
    assert(lock:release())
    H.eq(redis_at(port, "EXISTS", H.lock_key(name)), "0", "key after release")
    assert(other:lock(name):acquire(0))
  end
  c:close()
  other:close()
end)

test("wrap through a cluster URL, with a client and the default client", function()
  local c = assert(watchlock.connect(H.url))
  local calls = 0
  local function job(id, expect_port)
    calls = calls + 1
    local key = H.lock_key("lua-cluster-job:" .. id)
    H.eq(redis_at(expect_port, "EXISTS", key), "1", "held on its master while the function runs")
    return id * 2, "done"
  end
  local guarded = c:wrap("lua-cluster-job:{1}", { ttl = 5, wait = 5 }, job)
  local by_default = watchlock.wrap("lua-cluster-job:{1}", { ttl = 5 }, job) -- $WATCHLOCK_URL
  for id = 1, 6 do
    local port = owner_of(H.lock_key("lua-cluster-job:" .. id))
    local f = id % 2 == 0 and guarded or by_default
    local a, b = f(id, port)
    H.eq(a, id * 2, "result")
    H.eq(b, "done", "second result")
    H.eq(redis_at(port, "EXISTS", H.lock_key("lua-cluster-job:" .. id)), "0", "released after the call")
  end
  H.eq(calls, 6, "calls")
  c:close()
end)

-- run (the other test files are run by run.lua; this one needs a cluster)
print(("watchlock Lua Cluster tests on %s (%s)"):format(_VERSION, jit and jit.version or "PUC Lua"))
local passed, failed = 0, 0
for _, t in ipairs(T) do
  local ok, err = xpcall(t[2], debug.traceback)
  if ok then
    passed = passed + 1
    print("ok   test_cluster: " .. t[1])
  else
    failed = failed + 1
    print("FAIL test_cluster: " .. t[1] .. "\n" .. tostring(err))
  end
  collectgarbage()
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
