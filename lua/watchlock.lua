--[[
watchlock - Redis distributed lock with a watchdog, for Lua 5.4 and LuaJIT.

    local watchlock = require("watchlock")
    local client = assert(watchlock.connect("redis://127.0.0.1:6379"))
    local lock = client:lock("orders:42", { ttl = 30 })
    local ok, err = lock:acquire(5)          -- true, or nil plus a message
    ...
    lock:release()

This file is the user-facing layer over the private SWIG module
`watchlock_core` (bindings/watchlock.i + bindings/lua.i). Conventions:

  * Expected failures return nil plus a message: "timeout", "not owner",
    "connection refused (127.0.0.1:6390)", "lost: taken", ...
  * Programming errors raise: wrong argument types, unknown options, a
    negative ttl, using a closed client. Messages start with "watchlock:".
  * Times are seconds (numbers, fractions allowed); the C library takes ms.
  * The watchdog runs on a C thread and never calls into Lua. A lost lock is
    seen from Lua through lock:lost() / lock:state(), and with_lock checks it.
]]

local core = require("watchlock_core")

local M = {}
M._core = core
M.version = core.version_string()
M.VERSION_NUMBER = core.version()

local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack
local floor, huge = math.floor, math.huge
local traceback = debug.traceback

local OK = core.WATCHLOCK_OK
local ETIMEDOUT = core.WATCHLOCK_ETIMEDOUT
local ENOTOWNER = core.WATCHLOCK_ENOTOWNER
local ECONN = core.WATCHLOCK_ECONN
local EAUTH = core.WATCHLOCK_EAUTH
local EPERM = core.WATCHLOCK_EPERM
local ESERVER = core.WATCHLOCK_ESERVER
local ECLOSED = core.WATCHLOCK_ECLOSED
local EFORKED = core.WATCHLOCK_EFORKED

local STATE_NAMES = {
  [core.WATCHLOCK_UNLOCKED] = "unlocked",
  [core.WATCHLOCK_HELD] = "held",
  [core.WATCHLOCK_LOST] = "lost",
}

-- ---------------------------------------------------------------------------
-- errors

local function raise(msg, level)
  error("watchlock: " .. msg, (level or 1) + 1)
end

-- The message for a failed C call: the library's detail when it has one
-- ("connection refused (127.0.0.1:6390)"), else the status text.
local function detail(status)
  local msg = core.last_error()
  if msg == nil or msg == "" then
    msg = core.strerror(status)
  end
  return msg
end

-- Expected failures become `nil, message`; everything else is misuse (or a
-- bug) and raises. `what` names the Lua call for the raised message.
local function fail(status, what, level)
  level = (level or 1) + 1
  if status == ETIMEDOUT then
    return nil, "timeout"
  elseif status == ENOTOWNER then
    return nil, "not owner"
  elseif status == ECONN or status == EAUTH or status == EPERM or status == ESERVER then
    return nil, detail(status)
  elseif status == ECLOSED then
    raise(what .. ": the client is closed", level)
  elseif status == EFORKED then
    raise(what .. ": this handle belongs to the parent process (used after fork)", level)
  end
  raise(what .. ": " .. detail(status), level)
end

-- ---------------------------------------------------------------------------
-- argument checking

local function is_number(x)
  return type(x) == "number" and x == x -- NaN is not a number here
end

-- Seconds -> whole milliseconds, rounded; a positive value never becomes 0.
local function to_ms(seconds)
  local ms = floor(seconds * 1000 + 0.5)
  if ms == 0 and seconds > 0 then
    ms = 1
  end
  return ms
end

local MAX_SECONDS = 30 * 24 * 3600 -- WATCHLOCK_MAX_LEASE_MS
local DEFAULT_LEASE_MS = 30000 -- the library's default lease

local function check_seconds(x, what, level, allow_zero)
  if not is_number(x) then
    raise(what .. " must be a number of seconds, got " .. (x ~= x and "nan" or type(x)),
      level + 1)
  end
  if x < 0 or (x == 0 and not allow_zero) then
    raise(what .. " must be " .. (allow_zero and ">= 0" or "> 0") .. " seconds, got "
      .. tostring(x), level + 1)
  end
  if x > MAX_SECONDS then
    raise(what .. " must be at most " .. MAX_SECONDS .. " seconds (30 days), got " .. tostring(x),
      level + 1)
  end
  return to_ms(x)
end

-- wait: nil or math.huge = forever (-1), 0 = try once, > 0 = seconds.
local function wait_ms(wait, what, level)
  if wait == nil or wait == huge then
    return -1
  end
  if not is_number(wait) then
    raise(what .. ": wait must be nil (wait forever) or a number of seconds, got "
      .. (wait ~= wait and "nan" or type(wait)), level + 1)
  end
  if wait < 0 then
    raise(what .. ": wait must be >= 0 seconds (nil waits forever), got " .. tostring(wait),
      level + 1)
  end
  return to_ms(wait)
end

local function check_name(name, what, level)
  if type(name) ~= "string" then
    raise(what .. ": the lock name must be a string, got " .. type(name), level + 1)
  end
  if #name == 0 then
    raise(what .. ": the lock name must not be empty", level + 1)
  end
  return name
end

-- ---------------------------------------------------------------------------
-- Client

local Client = {}
Client.__index = Client
Client.__name = "watchlock.Client"

local Lock = {}
Lock.__index = Lock
Lock.__name = "watchlock.Lock"

local function check_client(self, what, level)
  if getmetatable(self) ~= Client then
    raise(what .. ": expected a client as self (call it as client:" .. what:match("[%w_]+$")
      .. "(...))", level + 1)
  end
  if self._handle == nil then
    raise(what .. ": the client is closed", level + 1)
  end
  return self._handle
end

--- watchlock.connect([url]) -> client | nil, message
-- url: "redis://[[user]:password@]host[:port][/db][?connect_timeout=2s&...]"
-- or "unix:///path.sock"; default: $WATCHLOCK_URL, else redis://127.0.0.1:6379.
function M.connect(url)
  if url == nil then
    url = os.getenv("WATCHLOCK_URL")
    if url == nil or url == "" then
      url = "redis://127.0.0.1:6379"
    end
  elseif type(url) ~= "string" then
    raise("connect: url must be a string or nil, got " .. type(url), 2)
  end
  local status, handle = core.client_open(url)
  if status ~= OK then
    local code = status
    local msg = detail(code)
    if code == core.WATCHLOCK_EINVAL then
      raise("connect: " .. msg, 2)
    end
    return nil, msg
  end
  return setmetatable({ _handle = handle, url = url }, Client)
end

--- client:close(): releases the client's held locks (best effort) and closes
-- it. Later calls on the client raise; its locks answer "client is closed".
-- Closing twice is allowed.
function Client:close()
  if getmetatable(self) ~= Client then
    raise("close: expected a client as self (call it as client:close())", 2)
  end
  local handle = self._handle
  if handle ~= nil then
    self._handle = nil
    core.client_close(handle)
  end
end

function Client:closed()
  if getmetatable(self) ~= Client then
    raise("closed: expected a client as self (call it as client:closed())", 2)
  end
  return self._handle == nil
end

Client.__close = function(self) self:close() end
Client.__gc = function(self)
  -- The SWIG userdata closes the C client when it is collected; closing
  -- here first just makes it happen in a known order.
  if self._handle ~= nil then
    pcall(core.client_close, self._handle)
    self._handle = nil
  end
end
Client.__tostring = function(self)
  return ("watchlock.Client(%s%s)"):format(self.url, self._handle == nil and ", closed" or "")
end

local LOCK_OPTIONS = {
  ttl = true, auto_renew = true, max_renewals = true, max_hold = true,
  renew_interval = true, wait = true,
}

local function check_opts(opts, what, level, allowed)
  if opts == nil then
    return {}
  end
  if type(opts) ~= "table" then
    raise(what .. ": options must be a table, got " .. type(opts), level + 1)
  end
  for k in pairs(opts) do
    if not allowed[k] then
      raise(what .. ": unknown option '" .. tostring(k) .. "'", level + 1)
    end
  end
  return opts
end

-- Applies one option setter; EINVAL from the library (e.g. a renew
-- interval not below the ttl) is a programming error.
local function set_opt(status, what, level)
  if status ~= OK then
    fail(status, what, level + 1)
  end
end

--- client:lock(name, [opts]) -> lock
-- opts: ttl (seconds, default 30), auto_renew (default true), max_renewals
-- (count, nil = unlimited), max_hold (seconds, nil = unlimited),
-- renew_interval (seconds, default ttl/3), wait (default for acquire() and
-- with_lock: nil = forever). No network I/O.
function Client:lock(name, opts)
  local handle = check_client(self, "lock", 2)
  check_name(name, "lock", 2)
  opts = check_opts(opts, "lock", 2, LOCK_OPTIONS)
  local lease, interval, max_hold, max_renewals, default_wait
  if opts.ttl ~= nil then
    lease = check_seconds(opts.ttl, "lock: ttl", 2)
  end
  if opts.renew_interval ~= nil then
    interval = check_seconds(opts.renew_interval, "lock: renew_interval", 2)
    if interval >= (lease or DEFAULT_LEASE_MS) then
      raise(("lock: renew_interval must be shorter than the ttl (%g s), got %g s"):format(
        (lease or DEFAULT_LEASE_MS) / 1000, opts.renew_interval), 2)
    end
  end
  if opts.max_hold ~= nil then
    max_hold = check_seconds(opts.max_hold, "lock: max_hold", 2)
  end
  if opts.max_renewals ~= nil then
    local n = opts.max_renewals
    if not is_number(n) or n ~= floor(n) or n < 1 then
      raise("lock: max_renewals must be a whole number >= 1 (nil = unlimited; "
        .. "auto_renew = false for no renewals), got " .. tostring(n), 2)
    end
    max_renewals = n
  end
  if opts.auto_renew ~= nil and type(opts.auto_renew) ~= "boolean" then
    raise("lock: auto_renew must be a boolean, got " .. type(opts.auto_renew), 2)
  end
  if opts.wait ~= nil then
    wait_ms(opts.wait, "lock", 2) -- validate now, convert at acquire
    default_wait = opts.wait
  end

  local status, lh = core.lock_new(handle, name)
  if status ~= OK then
    fail(status, "lock", 2)
  end
  local lock = setmetatable({ _handle = lh, _client = self, _wait = default_wait, name = name }, Lock)
  if lease then set_opt(core.lock_set_lease(lh, lease), "lock: ttl", 2) end
  if interval then set_opt(core.lock_set_renew_interval(lh, interval), "lock: renew_interval", 2) end
  if max_hold then set_opt(core.lock_set_max_hold(lh, max_hold), "lock: max_hold", 2) end
  if max_renewals then set_opt(core.lock_set_max_renewals(lh, max_renewals), "lock: max_renewals", 2) end
  if opts.auto_renew ~= nil then
    set_opt(core.lock_set_auto_renew(lh, opts.auto_renew and 1 or 0), "lock: auto_renew", 2)
  end
  return lock
end

--- client:inspect(name) -> { held = bool, remaining = seconds|nil, fence = int } | nil, message
-- The server's view of a lock name, without taking it. remaining is nil
-- when held with no expiry.
function Client:inspect(name)
  local handle = check_client(self, "inspect", 2)
  check_name(name, "inspect", 2)
  local status, held, remaining_ms, fence = core.client_inspect(handle, name)
  if status ~= OK then
    return fail(status, "inspect", 2)
  end
  local remaining
  if remaining_ms >= 0 then
    remaining = remaining_ms / 1000
  end
  return { held = held ~= 0, remaining = remaining, fence = fence }
end

--- client:force_release(name) -> true (a key was deleted) | false (was free) | nil, message
-- Admin: deletes the lock whatever its owner and wakes its waiters.
function Client:force_release(name)
  local handle = check_client(self, "force_release", 2)
  check_name(name, "force_release", 2)
  local status, released = core.client_force_release(handle, name)
  if status ~= OK then
    return fail(status, "force_release", 2)
  end
  return released ~= 0
end

--- client:check() -> { { code = "eviction", message = "..." }, ... } | nil, message
-- The server settings and ACL permissions that break lock safety; an empty
-- table when there is nothing to warn about. Changes nothing on the server.
-- Codes are those `watchlock check` prints (docs/cli.md).
function Client:check()
  local handle = check_client(self, "check", 2)
  local status, report = core.client_check(handle)
  if status ~= OK then
    return fail(status, "check", 2)
  end
  local findings = {}
  for i = 0, core.report_count(report) - 1 do
    findings[#findings + 1] = {
      code = core.check_name(core.report_code(report, i)),
      message = core.report_message(report, i),
    }
  end
  return findings
end

-- ---------------------------------------------------------------------------
-- Lock

-- For calls that talk to Redis (acquire, release, extend) `need_open`
-- makes a closed client an error; the getters read local state only.
local function check_lock(self, what, level, need_open)
  if getmetatable(self) ~= Lock then
    raise(what .. ": expected a lock as self (call it as lock:" .. what .. "(...))", level + 1)
  end
  local handle = self._handle
  if handle == nil then
    raise(what .. ": the lock handle was freed (lock:free())", level + 1)
  end
  if need_open and self._client._handle == nil then
    raise(what .. ": the client is closed", level + 1)
  end
  return handle
end

--- lock:acquire([wait]) -> true | nil, message
-- wait: nil waits forever (or the lock's `wait` option), 0 tries once, > 0
-- waits up to that many seconds. Reentrant: acquiring a held lock counts
-- one more hold (release once per acquire). Errors: "timeout", connection
-- messages.
function Lock:acquire(wait)
  local handle = check_lock(self, "acquire", 2, true)
  if wait == nil then
    wait = self._wait
  end
  local ms = wait_ms(wait, "acquire", 2)
  local status = core.lock_acquire(handle, ms)
  if status ~= OK then
    return fail(status, "acquire", 2)
  end
  return true
end

--- lock:release() -> true | nil, message
-- Releases one hold. "not owner" when this handle does not hold the lock
-- (never acquired, already released, or lost).
function Lock:release()
  local handle = check_lock(self, "release", 2, true)
  local status = core.lock_release(handle)
  if status ~= OK then
    return fail(status, "release", 2)
  end
  return true
end

--- lock:extend([ttl]) -> true | nil, message
-- Sets the lease to ttl seconds from now (default: the lock's ttl); a
-- given ttl also becomes the lease for later renewals.
function Lock:extend(ttl)
  local handle = check_lock(self, "extend", 2, true)
  local ms = 0
  if ttl ~= nil then
    ms = check_seconds(ttl, "extend: ttl", 2)
  end
  local status = core.lock_extend(handle, ms)
  if status ~= OK then
    return fail(status, "extend", 2)
  end
  return true
end

local function state_of(self, what)
  if getmetatable(self) ~= Lock then
    raise(what .. ": expected a lock as self (call it as lock:" .. what .. "())", 3)
  end
  if self._handle == nil then
    return core.WATCHLOCK_UNLOCKED
  end
  return core.lock_state(self._handle)
end

--- lock:state() -> "unlocked" | "held" | "lost"
function Lock:state()
  return STATE_NAMES[state_of(self, "state")] or "unlocked"
end

--- lock:locked() -> boolean: held by this handle and not lost.
function Lock:locked()
  return state_of(self, "locked") == core.WATCHLOCK_HELD
end

--- lock:lost() -> false | true, reason
-- reason: "taken", "expired", "max renewals reached", "max hold reached",
-- "connection lost". A lost lock stays lost until released or re-acquired.
function Lock:lost()
  if state_of(self, "lost") ~= core.WATCHLOCK_LOST then
    return false
  end
  return true, core.lost_reason_str(core.lock_lost_reason(self._handle))
end

--- lock:fencing_token() -> integer (0 before the first acquire)
function Lock:fencing_token()
  local handle = check_lock(self, "fencing_token", 2)
  return core.lock_fencing_token(handle)
end

--- lock:remaining() -> seconds of validity left by the local deadline (0 when not held)
function Lock:remaining()
  local handle = check_lock(self, "remaining", 2)
  return core.lock_remaining_ms(handle) / 1000
end

--- lock:hold_count() -> integer
function Lock:hold_count()
  local handle = check_lock(self, "hold_count", 2)
  return core.lock_hold_count(handle)
end

--- lock:renewals() -> successful watchdog renewals in the current hold
function Lock:renewals()
  local handle = check_lock(self, "renewals", 2)
  return core.lock_renewals(handle)
end

--- lock:free(): releases the lock if held (best effort) and frees the C
-- handle now instead of at garbage collection. The lock is unusable after.
function Lock:free()
  if getmetatable(self) ~= Lock then
    raise("free: expected a lock as self (call it as lock:free())", 2)
  end
  local handle = self._handle
  if handle ~= nil then
    self._handle = nil
    core.lock_free(handle)
  end
end

-- `local l <close> = client:lock(...)` (Lua 5.4): releases every hold when
-- the variable goes out of scope, even on error. The handle stays usable.
Lock.__close = function(self)
  local handle = self._handle
  if handle ~= nil and self._client._handle ~= nil then
    while core.lock_hold_count(handle) > 0 do
      if core.lock_release(handle) ~= OK then
        break
      end
    end
    -- A lost lock needs a release to return to "unlocked"; nothing to report.
    if core.lock_state(handle) == core.WATCHLOCK_LOST then
      core.lock_release(handle)
    end
  end
end

-- Safety net: the C handle is released and freed when the lock is collected
-- (also done by the SWIG userdata itself, which is what LuaJIT relies on).
Lock.__gc = function(self)
  local handle = self._handle
  if handle ~= nil then
    self._handle = nil
    pcall(core.lock_free, handle)
  end
end

Lock.__tostring = function(self)
  local state = self._handle and STATE_NAMES[core.lock_state(self._handle)] or "freed"
  return ("watchlock.Lock(%q, %s)"):format(self.name, state)
end

-- ---------------------------------------------------------------------------
-- with_lock and wrap

-- xpcall handler: keep the traceback of where fn failed. Non-string error
-- values (tables, ...) are passed through unchanged.
local function add_traceback(err)
  if type(err) == "string" then
    return traceback(err, 2)
  end
  return err
end

-- Runs fn(...) holding `lock`; shared by with_lock and wrap.
local function run_locked(lock, wait, fn, ...)
  local ok, err = lock:acquire(wait)
  if not ok then
    return nil, err
  end
  local res = pack(xpcall(fn, add_traceback, ...))
  local lost, reason = lock:lost()
  -- Always give the hold back: a lost lock answers "not owner" and becomes
  -- unlocked; a connection failure drops the hold locally and the key runs
  -- out by its lease. Only misuse raises here (fn closed the client), and
  -- fn's own error takes precedence over that.
  local rok, rerr = pcall(lock.release, lock)
  if not res[1] then
    local e = res[2]
    if lost and type(e) == "string" then
      e = e .. "\n(the lock was also lost while the function ran: " .. reason .. ")"
    end
    error(e, 0)
  end
  if not rok then
    error(rerr, 0)
  end
  if lost then
    return nil, "lost: " .. reason
  end
  return unpack(res, 2, res.n)
end

--- watchlock.with_lock(lock, fn, ...) -> fn's results | nil, message
-- Acquires `lock` (waiting as its `wait` option says: forever by default),
-- calls fn(...), and releases even if fn raises. fn's error is re-raised
-- with its traceback. nil plus "timeout" (or a connection message) when the
-- lock could not be had; nil plus "lost: <reason>" when it was lost while
-- fn ran (fn's results are dropped then: its work was not protected).
function M.with_lock(lock, fn, ...)
  if getmetatable(lock) ~= Lock then
    raise("with_lock: the first argument must be a lock (client:lock(...)), got " .. type(lock), 2)
  end
  if type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    raise("with_lock: the second argument must be a function, got " .. type(fn), 2)
  end
  check_lock(lock, "with_lock", 2, true)
  return run_locked(lock, nil, fn, ...)
end

local default_client

--- watchlock.default_client() -> client | nil, message
-- The client used by wrap() without a `client` option: connected on first
-- use to $WATCHLOCK_URL (else redis://127.0.0.1:6379), reconnected if closed.
function M.default_client()
  if default_client == nil or default_client._handle == nil then
    local c, err = M.connect()
    if not c then
      return nil, err
    end
    default_client = c
  end
  return default_client
end

local WRAP_OPTIONS = {}
for k in pairs(LOCK_OPTIONS) do WRAP_OPTIONS[k] = true end
WRAP_OPTIONS.client = true

--- watchlock.wrap(name_or_keyfn, [opts], fn) -> guarded function
-- Each call of the guarded function takes a fresh lock on the key (a fixed
-- string, or keyfn(...) computed from the call's arguments), runs fn(...)
-- under it like with_lock, and frees the handle. opts: the lock options,
-- `wait` (seconds, nil = forever) and `client` (default: default_client()).
-- The guarded function returns fn's results, or nil plus a message.
function M.wrap(key, opts, fn)
  if fn == nil and type(opts) == "function" then
    opts, fn = nil, opts
  end
  if type(key) ~= "string" and type(key) ~= "function" then
    raise("wrap: the key must be a lock name or a function computing it, got " .. type(key), 2)
  end
  if type(key) == "string" then
    check_name(key, "wrap", 2)
  end
  if type(fn) ~= "function" then
    raise("wrap: the last argument must be the function to guard, got " .. type(fn), 2)
  end
  opts = check_opts(opts, "wrap", 2, WRAP_OPTIONS)
  local client = opts.client
  if client ~= nil and getmetatable(client) ~= Client then
    raise("wrap: option client must be a watchlock client, got " .. type(client), 2)
  end
  local lock_opts = {}
  for k, v in pairs(opts) do
    if k ~= "client" then lock_opts[k] = v end
  end
  if lock_opts.wait ~= nil then
    wait_ms(lock_opts.wait, "wrap", 2)
  end

  return function(...)
    local name = key
    if type(key) == "function" then
      name = key(...)
      if type(name) ~= "string" or #name == 0 then
        raise("wrap: the key function must return a non-empty string, got "
          .. (type(name) == "string" and "an empty string" or type(name)), 2)
      end
    end
    local c = client
    if c == nil then
      local err
      c, err = M.default_client()
      if not c then
        return nil, err
      end
    end
    local lock = c:lock(name, lock_opts)
    local res = pack(pcall(run_locked, lock, nil, fn, ...))
    lock:free()
    if not res[1] then
      error(res[2], 0)
    end
    return unpack(res, 2, res.n)
  end
end

--- watchlock.parse_duration("1.5s") -> seconds | nil, message
function M.parse_duration(text)
  if type(text) ~= "string" then
    raise("parse_duration: expected a string, got " .. type(text), 2)
  end
  local status, ms = core.parse_duration(text)
  if status ~= OK then
    return nil, detail(status)
  end
  return ms / 1000
end

M.Client = Client
M.Lock = Lock

return M
