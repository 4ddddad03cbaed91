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
    value the core refuses (a negative ttl), using a closed client.
    Messages start with "watchlock:".
  * Durations are seconds (numbers, fractions allowed) or strings such as
    "500ms", "30s", "2m", read by the core's parser; the C library takes ms.
  * Every rule about values (ranges, defaults, the renew-interval rule) is
    the C core's: this layer checks Lua types only and raises the core's
    message when a setter refuses a value.
  * Fencing tokens are integers on Lua 5.3+ and exact decimal strings on
    LuaJIT (whose numbers are doubles and print 1.8e15 as 1.7954111832661e+15);
    tostring(t) and tonumber(t) give the same answer on both.
  * The watchdog runs on a C thread and never calls into Lua. A lost lock is
    seen from Lua through lock:lost() / lock:state(), and with_lock checks it.
    A lock's on_lost hook runs in the caller's thread at the next call into
    this module (see run_hooks below).
  * A dropped lock is not an unlock: a lock collected while held stays held,
    no longer renewed, until its lease ends or its client closes
    (watchlock_lock_abandon); client:on_dropped(fn) hears of it.
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
local EREPLICAS = core.WATCHLOCK_EREPLICAS
local ESERVER = core.WATCHLOCK_ESERVER
local ECLOSED = core.WATCHLOCK_ECLOSED
local EFORKED = core.WATCHLOCK_EFORKED
local EWRONGTYPE = core.WATCHLOCK_EWRONGTYPE or 13

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
  elseif status == ECONN or status == EAUTH or status == EPERM or status == ESERVER or status == EREPLICAS then
    return nil, detail(status)
  elseif status == EWRONGTYPE then
    return nil, "wrong type: " .. detail(status)
  elseif status == ECLOSED then
    raise(what .. ": the client is closed", level)
  elseif status == EFORKED then
    raise(what .. ": this handle belongs to the parent process (used after fork)", level)
  end
  raise(what .. ": " .. detail(status), level)
end

-- ---------------------------------------------------------------------------
-- arguments
--
-- Only Lua types are checked here. Every rule about values (name length,
-- duration ranges and forms, the renew-interval rule, caps, defaults) is
-- the C core's: durations are read by watchlock_parse_duration and option
-- values by the watchlock_lock_set_* setters, whose messages are raised as
-- they are (docs/design.md, "The same option everywhere").

-- A duration in ms, read by the core's one parser: a number is seconds,
-- given to it as decimal text (rounded to ms; NaN, infinities and negatives
-- are refused there), a string is taken as it is ("500ms", "30s", "2m").
local function duration_ms(value, what, level)
  local text
  if type(value) == "number" then
    text = ("%.3f"):format(value):gsub("(%.%d-)0+$", "%1"):gsub("%.$", "")
  elseif type(value) == "string" then
    text = value
    local nul = text:find("\0", 1, true)
    if nul then -- the C string would end there: show the parser "\0", which it refuses
      text = text:sub(1, nul - 1) .. "\\0"
    end
  else
    raise(what .. " must be seconds (a number) or a duration string such as '30s', got "
      .. type(value), level + 1)
  end
  local status, ms = core.parse_duration(text)
  if status ~= OK then
    raise(what .. ": " .. detail(status), level + 1)
  end
  return ms
end

-- renew_interval given as a string, read by the core's one parser
-- (watchlock_parse_renew_interval): a duration ("500ms") gives ms, a
-- fraction of the ttl ("1/3", "25%") gives nil and { num, den }.
local function renew_interval_option(text, what, level)
  local nul = text:find("\0", 1, true)
  if nul then
    text = text:sub(1, nul - 1) .. "\\0"
  end
  local status, ms, num, den = core.parse_renew_interval(text)
  if status ~= OK then
    raise(what .. ": renew_interval: " .. detail(status), level + 1)
  end
  if den ~= 0 then
    return nil, { num, den }
  end
  return ms, nil
end

-- wait: nil or math.huge = forever (-1), else a duration (0 = try once).
local function wait_ms(wait, what, level)
  if wait == nil or wait == huge then
    return -1
  end
  local ms = duration_ms(wait, what .. ": wait (nil waits forever)", level + 1)
  return ms -- not a tail call: `level` counts this frame
end

-- Names are any bytes; the core refuses empty and overlong ones.
local function check_name(name, what, level)
  if type(name) ~= "string" then
    raise(what .. ": the lock name must be a string, got " .. type(name), level + 1)
  end
  return name
end

-- ---------------------------------------------------------------------------
-- on_lost hooks
--
-- The watchdog is a C thread and must never call into a lua_State. A lock
-- created with an on_lost hook registers with its client (client._watched:
-- lock id -> lock, weak), and the client asks the core to queue its loss
-- events (watchlock_client_enable_lost_events). Every call into this module
-- first drains those queues without waiting (watchlock_client_next_lost_event
-- with timeout 0) and runs the hooks in the caller's thread, before doing its
-- own work; watchlock.poll() does only that. So a hook runs at the next call
-- into the module after the loss, never in the middle of Lua code.

local hooked = setmetatable({}, { __mode = "k" }) -- clients with hooked locks
local dispatching = false -- no nested dispatch from inside a hook
-- Locks collected while held, for their clients' on_dropped hooks: { fn, name }
-- pairs appended by the collector (drop_lock), run by run_hooks.
local dropped_queue = {}

local function report_hook_error(lock, err)
  -- A hook's error must not break the unrelated call that ran it (a release,
  -- with_lock's clean-up): it is reported, not raised, as Python logs it.
  io.stderr:write(("watchlock: the on_lost hook of lock %q raised: %s\n"):format(
    tostring(lock.name), tostring(err)))
end

local function run_dropped_hooks()
  -- The collector may append while this runs: take the queue as it is now
  -- (the new one is made first, so nothing appended meanwhile is missed).
  local fresh = {}
  local list = dropped_queue
  dropped_queue = fresh
  for _, d in ipairs(list) do
    local ok, err = xpcall(d[1], traceback, d[2])
    if not ok then
      io.stderr:write(("watchlock: the on_dropped hook for lock %q raised: %s\n"):format(
        tostring(d[2]), tostring(err)))
    end
  end
  return #list
end

local function drain_lost_events()
  local ran = 0
  if dropped_queue[1] ~= nil then
    ran = run_dropped_hooks()
  end
  local clients = {}
  for c in pairs(hooked) do clients[#clients + 1] = c end
  for _, c in ipairs(clients) do
    while c._handle ~= nil do
      local status, id, reason = core.client_next_lost_event(c._handle, 0)
      if status ~= OK then
        break -- ETIMEDOUT: nothing queued (or the client is closed/forked)
      end
      local lock = c._watched[id]
      if lock ~= nil and lock._on_lost ~= nil then
        ran = ran + 1
        local ok, err = xpcall(lock._on_lost, traceback, lock, core.lost_reason_str(reason))
        if not ok then
          report_hook_error(lock, err)
        end
      end
    end
    if c._handle == nil then
      hooked[c] = nil
    end
  end
  return ran
end

local function run_hooks()
  if dispatching or (next(hooked) == nil and dropped_queue[1] == nil) then
    return 0
  end
  dispatching = true
  local ok, ran = pcall(drain_lost_events) -- hooks are protected; this is for the flag
  dispatching = false
  if not ok then
    error(ran, 0)
  end
  return ran
end

--- watchlock.poll() -> number of on_lost and on_dropped hooks run
-- Runs the hooks of locks lost (or dropped while held) since the last call
-- into the module. Every other function of the module does this first;
-- poll() is for a loop that otherwise makes no watchlock calls.
function M.poll()
  return run_hooks()
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
-- "rediss://...?cacert=FILE" (TLS), "redis-sentinel://h1:26379,h2:26379/MASTER",
-- "redis-cluster://h1:7000,h2:7001"
-- or "unix:///path.sock"; default: $WATCHLOCK_URL, else redis://127.0.0.1:6379.
-- A table of URLs ({ "redis://a", "redis://b", "redis://c" }) opens a Redlock
-- quorum of independent masters (each any single-master URL); one URL is the
-- plain client, two are refused. $WATCHLOCK_URL may hold several URLs
-- separated by spaces.
function M.connect(url)
  run_hooks()
  if url == nil then
    url = os.getenv("WATCHLOCK_URL")
    if url == nil or url:find("^%s*$") then
      url = "redis://127.0.0.1:6379"
    elseif url:find("%S%s+%S") then
      local urls = {}
      for u in url:gmatch("%S+") do
        urls[#urls + 1] = u
      end
      url = urls
    else
      url = url:match("^%s*(.-)%s*$")
    end
  elseif type(url) ~= "string" and type(url) ~= "table" then
    raise("connect: url must be a string, a table of strings or nil, got " .. type(url), 2)
  end
  local status, handle
  if type(url) == "table" then
    local urls = {}
    for i = 1, #url do
      if type(url[i]) ~= "string" then
        raise(("connect: url[%d] must be a string, got %s"):format(i, type(url[i])), 2)
      end
      urls[i] = url[i]
    end
    if #urls == 0 then
      raise("connect: the table of URLs is empty", 2)
    end
    url = urls
    status, handle = core.client_open_quorum(urls)
  else
    status, handle = core.client_open(url)
  end
  if status ~= OK then
    local code = status
    local msg = detail(code)
    if code == core.WATCHLOCK_EINVAL then
      raise("connect: " .. msg, 2)
    end
    return nil, msg
  end
  local urls = type(url) == "table" and url or { url }
  url = table.concat(urls, " ")
  return setmetatable({ _handle = handle, url = url, urls = urls, _watched = setmetatable({}, { __mode = "v" }) }, Client)
end

--- client:close(): releases the client's held locks (best effort) and closes
-- it. Later calls on the client raise; its locks answer "client is closed".
-- Closing twice is allowed.
function Client:close()
  if getmetatable(self) ~= Client then
    raise("close: expected a client as self (call it as client:close())", 2)
  end
  run_hooks() -- losses seen before the close still reach their hooks
  local handle = self._handle
  if handle ~= nil then
    self._handle = nil
    hooked[self] = nil
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
  renew_interval = true, wait = true, on_lost = true, label = true,
}

local function is_callable(f)
  if type(f) == "function" then
    return true
  end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

--- client:on_dropped(fn) -> client
-- fn(name) runs, in the caller's thread at the next call into the module
-- (as on_lost hooks do, never inside the garbage collector), for every lock
-- of this client that was garbage-collected while it held its lock. Such a
-- lock is not released: it stays held, no longer renewed, until its lease
-- ends or the client closes. nil removes the hook; there is none by default
-- (nothing is printed).
function Client:on_dropped(fn)
  run_hooks()
  check_client(self, "on_dropped", 2)
  if fn ~= nil and not is_callable(fn) then
    raise("on_dropped: expected a function or nil, got " .. type(fn), 2)
  end
  self._on_dropped = fn
  return self
end

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

-- The options that are durations, in the order their setters run: the
-- lease first, since the core checks a renew interval against the lease
-- set at the time.
local DURATION_SETTERS = {
  { "ttl", "lock_set_lease" },
  { "renew_interval", "lock_set_renew_interval" },
  { "max_hold", "lock_set_max_hold" },
}

-- Applies the options to a new handle with the core's setters. Their
-- status is the rule: EINVAL (a renew interval not below the ttl, a
-- negative max_renewals, ...) raises with the core's message. Raises
-- after freeing the handle.
local function apply_lock_options(lh, opts, ms, caller, level)
  local function check(status, what, value)
    if status ~= OK then
      local msg = detail(status)
      core.lock_free(lh)
      raise(("%s: %s = %s: %s"):format(caller, what, tostring(value), msg), level + 2)
    end
  end
  for _, d in ipairs(DURATION_SETTERS) do
    local what, setter = d[1], d[2]
    if ms[what] ~= nil then
      check(core[setter](lh, ms[what]), what, opts[what])
    end
  end
  if ms.renew_fraction ~= nil then -- "1/3", "25%": a fraction of the ttl
    check(core.lock_set_renew_fraction(lh, ms.renew_fraction[1], ms.renew_fraction[2]), "renew_interval",
      opts.renew_interval)
  end
  if opts.max_renewals ~= nil then
    check(core.lock_set_max_renewals(lh, opts.max_renewals), "max_renewals", opts.max_renewals)
  end
  if opts.auto_renew ~= nil then
    check(core.lock_set_auto_renew(lh, opts.auto_renew and 1 or 0), "auto_renew", opts.auto_renew)
  end
  if opts.label ~= nil then
    check(core.lock_set_owner_label(lh, opts.label), "label", #opts.label .. " bytes")
  end
end

-- The options' Lua types, and their durations in ms (read by the core's
-- parser), before a handle exists.
local function read_lock_options(opts, what, level)
  local ms = {}
  for _, d in ipairs(DURATION_SETTERS) do
    if opts[d[1]] ~= nil and not (d[1] == "renew_interval" and type(opts[d[1]]) == "string") then
      ms[d[1]] = duration_ms(opts[d[1]], what .. ": " .. d[1], level + 1)
    end
  end
  if type(opts.renew_interval) == "string" then
    ms.renew_interval, ms.renew_fraction = renew_interval_option(opts.renew_interval, what, level + 1)
  end
  local n = opts.max_renewals
  if n ~= nil and (type(n) ~= "number" or n ~= floor(n)) then
    raise(what .. ": max_renewals must be a whole number (0 = unlimited), got " .. tostring(n), level + 1)
  end
  if opts.auto_renew ~= nil and type(opts.auto_renew) ~= "boolean" then
    raise(what .. ": auto_renew must be a boolean, got " .. type(opts.auto_renew), level + 1)
  end
  if opts.wait ~= nil then
    ms.wait = wait_ms(opts.wait, what, level + 1)
  end
  if opts.on_lost ~= nil and not is_callable(opts.on_lost) then
    raise(what .. ": on_lost must be a function(lock, reason), got " .. type(opts.on_lost), level + 1)
  end
  if opts.label ~= nil then
    if type(opts.label) ~= "string" then
      raise(what .. ": label must be a string, got " .. type(opts.label), level + 1)
    end
    if opts.label:find("\0", 1, true) then -- the C string would end there
      raise(what .. ": label must not contain a NUL byte", level + 1)
    end
  end
  return ms
end

-- The collector's end of a lock (Lock.__gc, or its sentinel on LuaJIT): a
-- dropped lock is not an unlock. The core keeps a held lock, no longer
-- renewed, until its lease ends or the client closes (watchlock_lock_abandon:
-- no I/O, nothing runs in the collector) and answers 1 for a lock that was
-- held; its client's on_dropped hook hears of it at the next call into the
-- module.
local function drop_lock(lock)
  local handle = lock._handle
  if handle == nil then
    return
  end
  lock._handle = nil
  local ok, dropped = pcall(core.lock_abandon, handle)
  local fn = ok and dropped == 1 and lock._client and lock._client._on_dropped
  if fn then
    dropped_queue[#dropped_queue + 1] = { fn, lock.name }
  end
end

-- Lua 5.1 and LuaJIT call no __gc of tables: a userdata sentinel held by the
-- lock stands in (made after the lock's C handle, so it is finalized first:
-- finalizers run in the reverse order of creation).
local newproxy = rawget(_G, "newproxy")
local function watch_collection(lock)
  if newproxy ~= nil then
    local sentinel = newproxy(true)
    getmetatable(sentinel).__gc = function() drop_lock(lock) end
    lock._sentinel = sentinel
  end
end

-- client:lock's work; `level` counts from the caller of new_lock, so that
-- a guarded function of wrap() raises at its own caller's line as well.
-- names: a table of names for a multi-lock (client:multi_lock), else nil;
-- `make(client_handle, name)` -> status, handle: the core's constructor of
-- another lock kind (fair, semaphore, read or write side); nil: a plain lock.
local function new_lock(self, name, opts, level, make, allowed, names)
  local what = names and "multi_lock" or "lock"
  local handle = check_client(self, what, level)
  if names then
    for i = 1, #names do
      check_name(names[i], what, level)
    end
  else
    check_name(name, what, level)
  end
  opts = check_opts(opts, what, level, allowed or LOCK_OPTIONS)
  local ms = read_lock_options(opts, what, level)

  local status, lh
  if names then
    status, lh = core.multi_lock_new(handle, names)
  else
    status, lh = (make or core.lock_new)(handle, name)
  end
  if status ~= OK then
    fail(status, what, level)
  end
  apply_lock_options(lh, opts, ms, what, level)
  local lock = setmetatable({ _handle = lh, _client = self, _wait_ms = ms.wait, name = name, names = names }, Lock)
  watch_collection(lock)
  if opts.on_lost ~= nil then
    if not hooked[self] then
      local st = core.client_enable_lost_events(handle, 1)
      if st ~= OK then
        core.lock_free(lh)
        fail(st, "lock: on_lost", level)
      end
      hooked[self] = true
    end
    lock._on_lost = opts.on_lost
    self._watched[core.lock_id(lh)] = lock
  end
  return lock
end

--- client:lock(name, [opts]) -> lock
-- opts (nil or absent = the core's default): ttl (seconds or a duration
-- string; default 30 s), auto_renew (default true), max_renewals (count,
-- 0 = unlimited, the default), max_hold (duration, 0 = unlimited, the
-- default), renew_interval (duration, default ttl/3), wait (default for
-- acquire() and with_lock: nil = forever), on_lost (function(lock,
-- reason), run at the next call into the module after the watchdog found
-- the lock lost), label (who holds it: recorded with this host's name and
-- pid at each acquire, for `watchlock status` and `watchlock list`).
-- Values are checked by the core. No network I/O.
function Client:lock(name, opts)
  run_hooks()
  local lock = new_lock(self, name, opts, 3)
  return lock -- not a tail call: errors name the caller's line
end

--- client:multi_lock({names...}, [opts]) -> lock
-- One lock over several names, all or nothing, with one lease (issue 23):
-- acquire takes every name or none (one script when the names share a
-- server or a Cluster slot, else one global order with rollback, so two
-- multi-locks over overlapping names never deadlock and a wait that runs
-- out leaves nothing taken); release gives back all. The loss of any name
-- is the loss of the whole hold, reported once; lock:lost_name() says
-- which. lock:fencing_tokens() has one token per name; lock.name is the
-- first name, lock.names all of them. Options as client:lock's.
function Client:multi_lock(names, opts)
  run_hooks()
  if type(names) ~= "table" then
    raise("multi_lock: names must be a table of strings, got " .. type(names), 2)
  end
  local copy = {}
  for i = 1, #names do
    copy[i] = names[i]
  end
  local lock = new_lock(self, copy[1], opts, 3, nil, nil, copy)
  return lock -- not a tail call: errors name the caller's line
end

-- The core's function `fn`, or an error naming it when this build lacks it.
local function core_fn(fn, level)
  local f = core[fn]
  if f == nil then
    raise("this build of the watchlock core has no " .. fn .. "()", level + 1)
  end
  return f
end

--- client:fair_lock(name, [opts]) -> lock
-- A fair lock: FIFO by arrival with direct hand-off (a release, or the
-- holder's expiry, grants it to the oldest live waiter; nobody barges in).
-- The options and methods of client:lock(); a name in use as another kind
-- gives nil, "wrong type: ..." at acquire.
function Client:fair_lock(name, opts)
  run_hooks()
  local make = core_fn("fair_lock_new", 2)
  local lock = new_lock(self, name, opts, 3, make)
  lock._kind = "fair"
  return lock
end

local SEMAPHORE_OPTIONS = { permits = true }
for k in pairs(LOCK_OPTIONS) do SEMAPHORE_OPTIONS[k] = true end

--- client:semaphore(name, [opts]) -> lock
-- A semaphore with leased permits: opts.permits = N (set by the first user
-- of the name; nil or 0: the name's existing count; another count than the
-- name's gives nil, "wrong type: ..." at acquire), and the options of
-- client:lock(). sem:acquire([wait], [k]) takes k permits (default 1) as
-- one hold; sem:release() gives them back.
function Client:semaphore(name, opts)
  run_hooks()
  local permits = type(opts) == "table" and opts.permits or 0
  if type(permits) ~= "number" or permits ~= floor(permits) or permits < 0 then
    raise("semaphore: permits must be a whole number >= 1 (0 = the name's count), got " .. tostring(permits), 2)
  end
  local sem_new = core_fn("semaphore_new", 2)
  local lock = new_lock(self, name, opts, 3, function(h, n) return sem_new(h, n, permits) end,
                        SEMAPHORE_OPTIONS)
  lock._kind, lock._permits = "semaphore", permits
  return lock
end

local RWLock = {}
RWLock.__index = RWLock

--- client:rwlock(name) -> rw
-- A read-write lock: rw:read_lock([opts]) and rw:write_lock([opts]) make
-- locks of its two sides (many readers or one writer, phase-fair: a
-- waiting writer blocks readers that come after it). write:downgrade()
-- turns a held write lock into a read share without a gap.
function Client:rwlock(name)
  run_hooks()
  check_client(self, "rwlock", 2)
  check_name(name, "rwlock", 2)
  return setmetatable({ _client = self, name = name }, RWLock)
end

local function rw_side(self, opts, write, level)
  if getmetatable(self) ~= RWLock then
    raise("expected a read-write lock as self (rw:" .. (write == 1 and "write_lock" or "read_lock") .. "(...))",
          level)
  end
  local rw_new = core_fn("rwlock_new", level)
  local lock = new_lock(self._client, self.name, opts, level + 1, function(h, n) return rw_new(h, n, write) end)
  lock._kind = write == 1 and "write" or "read"
  return lock
end

function RWLock:read_lock(opts)
  local lock = rw_side(self, opts, 0, 2)
  return lock
end

function RWLock:write_lock(opts)
  local lock = rw_side(self, opts, 1, 2)
  return lock
end

RWLock.__tostring = function(self)
  return ("watchlock.RWLock(%q)"):format(self.name)
end

local NAME_KINDS = {
  [core.WATCHLOCK_KIND_PLAIN or 0] = "lock", [core.WATCHLOCK_KIND_FAIR or 1] = "fair",
  [core.WATCHLOCK_KIND_SEMAPHORE or 2] = "semaphore", [core.WATCHLOCK_KIND_RWLOCK or 6] = "rwlock",
}

--- client:name_info(name) -> table | nil, message
-- What the server knows of a name whatever its kind (one round trip):
-- { kind = nil (not in use) | "lock" | "fair" | "semaphore" | "rwlock",
--   permits, in_use (permits in use, holders, or readers), holders,
--   writer (boolean), queue_length, oldest_wait (seconds), fence,
--   remaining (seconds, nil = no expiry) }.
function Client:name_info(name)
  local handle = check_client(self, "name_info", 2)
  check_name(name, "name_info", 2)
  local status, info = core_fn("client_name_info", 2)(handle, name)
  if status ~= OK then
    return fail(status, "name_info", 2)
  end
  local remaining = core.name_info_remaining_ms(info)
  return {
    kind = NAME_KINDS[core.name_info_kind(info)],
    permits = core.name_info_permits(info),
    in_use = core.name_info_in_use(info),
    holders = core.name_info_holders(info),
    writer = core.name_info_writer(info) ~= 0,
    queue_length = core.name_info_queue_length(info),
    oldest_wait = core.name_info_oldest_wait_ms(info) / 1000,
    fence = core.name_info_fence(info),
    remaining = remaining >= 0 and remaining / 1000 or nil,
  }
end

--- client:set_permits(name, n) -> true | nil, message
-- Admin: changes the permit count of semaphore `name`.
function Client:set_permits(name, n)
  local handle = check_client(self, "set_permits", 2)
  check_name(name, "set_permits", 2)
  if type(n) ~= "number" or n ~= floor(n) or n < 1 then
    raise("set_permits: n must be a whole number >= 1, got " .. tostring(n), 2)
  end
  local status = core_fn("client_set_permits", 2)(handle, name, n)
  if status ~= OK then
    return fail(status, "set_permits", 2)
  end
  return true
end

--- client:inspect(name) -> { held = bool, remaining = seconds|nil, fence = token } | nil, message
-- The server's view of a lock name, without taking it. remaining is nil
-- when held with no expiry; fence is a fencing token (as lock:fencing_token()).
function Client:inspect(name)
  run_hooks()
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
  run_hooks()
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
  run_hooks()
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

--- client:stats() -> table
-- The C core's counters and histograms for monitoring, since the client
-- opened (lock-free, no round trip): held_locks, renew_rounds,
-- renew_roundtrips, renewals, watchdog_cpu_us, subscribe_denied, acquires,
-- contended_acquires, acquire_timeouts, release_retries (numbers); lost
-- (losses by reason: taken, expired, max_renewals, max_hold, connection);
-- quorum (quorum clients: restarts, kept_out, unreached, late_grants,
-- fence_unavailable, split_votes; 0 on a plain client);
-- wait_time, hold_time, renew_rtt: histograms { count = n, sum = seconds,
-- buckets = { { le = seconds, count = n }, ... } } with fixed log-scale
-- bounds (64 us * 4^i, the last math.huge) and counts not cumulative.
local STAT_COUNTERS = {
  "held_locks", "renew_rounds", "renew_roundtrips", "renewals", "watchdog_cpu_us", "subscribe_denied",
  "acquires", "contended_acquires", "acquire_timeouts", "release_retries",
}
local STAT_LOST = { "taken", "expired", "max_renewals", "max_hold", "connection" }
-- quorum clients (issue 21; 0 on a plain client): docs/lua.md
local STAT_QUORUM = { "restarts", "kept_out", "unreached", "late_grants", "fence_unavailable", "split_votes" }
local STAT_HISTOGRAMS = {
  { "wait_time", "WATCHLOCK_HIST_WAIT", "WATCHLOCK_STAT_WAIT_US_SUM" },
  { "hold_time", "WATCHLOCK_HIST_HOLD", "WATCHLOCK_STAT_HOLD_US_SUM" },
  { "renew_rtt", "WATCHLOCK_HIST_RENEW_RTT", "WATCHLOCK_STAT_RENEW_RTT_US_SUM" },
}
function Client:stats()
  run_hooks()
  local handle = check_client(self, "stats", 2)
  local stats, lost = {}, {}
  for _, key in ipairs(STAT_COUNTERS) do
    stats[key] = core.client_stat(handle, core["WATCHLOCK_STAT_" .. key:upper()])
  end
  for _, key in ipairs(STAT_LOST) do
    lost[key] = core.client_stat(handle, core["WATCHLOCK_STAT_LOST_" .. key:upper()])
  end
  stats.lost = lost
  local quorum = {}
  for _, key in ipairs(STAT_QUORUM) do
    quorum[key] = core.client_stat(handle, core["WATCHLOCK_STAT_QUORUM_" .. key:upper()])
  end
  stats.quorum = quorum
  for _, h in ipairs(STAT_HISTOGRAMS) do
    local buckets, count = {}, 0
    for i = 0, core.WATCHLOCK_HIST_BUCKETS - 1 do
      local status, upper, n = core.client_histogram(handle, core[h[2]], i)
      if status ~= OK then
        return fail(status, "stats", 2)
      end
      buckets[#buckets + 1] = { le = i == core.WATCHLOCK_HIST_BUCKETS - 1 and huge or upper / 1e6, count = n }
      count = count + n
    end
    stats[h[1]] = { buckets = buckets, count = count, sum = core.client_stat(handle, core[h[3]]) / 1e6 }
  end
  return stats
end

-- ---------------------------------------------------------------------------
-- Lock

-- For calls that talk to Redis (acquire, release, extend) `need_open`
-- makes a closed client an error; the getters read local state only.
local function check_lock(self, what, level, need_open)
  run_hooks()
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
-- A semaphore's acquire takes k (default 1): the permits to take.
function Lock:acquire(wait, k)
  local handle = check_lock(self, "acquire", 2, true)
  local ms = self._wait_ms or -1
  if wait ~= nil then
    ms = wait_ms(wait, "acquire", 2)
  end
  local status
  if k ~= nil or self._kind == "semaphore" then
    if self._kind ~= "semaphore" then
      raise("acquire: k (a number of permits) is for semaphores (client:semaphore)", 2)
    end
    k = k or 1
    if type(k) ~= "number" or k ~= floor(k) or k < 1 then
      raise("acquire: k must be a whole number >= 1, got " .. tostring(k), 2)
    end
    status = core.semaphore_acquire(handle, k, ms)
  else
    status = core.lock_acquire(handle, ms)
  end
  if status ~= OK then
    return fail(status, "acquire", 2)
  end
  return true
end

--- write:downgrade() -> true | nil, message
-- The write side of a read-write lock only: turns the held write lock into a
-- read share without a gap (no writer gets in between); release() then
-- releases the read share. There is no upgrade (two readers upgrading at
-- once would each wait for the other).
function Lock:downgrade()
  local handle = check_lock(self, "downgrade", 2, true)
  if self._kind ~= "write" then
    raise("downgrade: only the write side of a read-write lock (rw:write_lock()) downgrades", 2)
  end
  local status = core_fn("rwlock_downgrade", 2)(handle)
  if status ~= OK then
    return fail(status, "downgrade", 2)
  end
  self._kind = "read"
  return true
end

--- lock:kind() -> "lock" | "fair" | "semaphore" | "read" | "write"
function Lock:kind()
  check_lock(self, "kind", 2, false)
  return self._kind or "lock"
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
-- Sets the lease to ttl (seconds or a duration string) from now; nil (or
-- 0) uses the lock's ttl. A given ttl also becomes the lease for later
-- renewals.
function Lock:extend(ttl)
  local handle = check_lock(self, "extend", 2, true)
  local ms = 0
  if ttl ~= nil then
    ms = duration_ms(ttl, "extend: ttl", 2)
  end
  local status = core.lock_extend(handle, ms)
  if status ~= OK then
    return fail(status, "extend", 2)
  end
  return true
end

--- lock:ttl() -> seconds: the lease the next acquire or renewal sets (the
-- core's default, 30, unless the ttl option or extend(ttl) changed it).
function Lock:ttl()
  local handle = check_lock(self, "ttl", 2)
  return core.lock_lease(handle) / 1000
end

local function state_of(self, what)
  run_hooks()
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

--- lock:fencing_token() -> token (0 before the first acquire)
-- An integer on Lua 5.3+; on LuaJIT (doubles only) the exact decimal
-- string, so that it prints, concatenates and travels as the integer it is.
-- tonumber(token) is exact on both (tokens are far below 2^53).
-- On a quorum client the first call of a hold raises the token on the
-- members that granted it (one round trip); nil, message when that could
-- not be confirmed within the hold's validity (no token may be used).
function Lock:fencing_token()
  local handle = check_lock(self, "fencing_token", 2)
  local token = core.lock_fencing_token(handle)
  if tonumber(token) < 0 then
    return nil, "fencing token unavailable: " .. core.strerror(-tonumber(token))
  end
  return token
end

--- lock:members() -> { "granted" | "held" | "unreachable" | "restarted" | "unknown", ... }
-- On a quorum client (connect({...})): what each member answered to this
-- lock's last acquire, in the order of the URLs ("held": by another
-- owner; "restarted": counted out by the restart rule). One entry
-- ("granted", ...) on a plain client. After a failed acquire it says why:
-- "timeout" only when a majority is held by others, else unreachable.
local MEMBER_VERDICTS = { [0] = "unknown", "granted", "held", "unreachable", "restarted" }
function Lock:members()
  local handle = check_lock(self, "members", 2, true)
  local out = {}
  for i = 0, core.client_member_count(self._client._handle) - 1 do
    out[#out + 1] = MEMBER_VERDICTS[core.lock_member_status(handle, i)] or "unknown"
  end
  return out
end

--- lock:fencing_tokens() -> { token, ... }: one per name, in the order
-- given (a plain lock: its one token).
function Lock:fencing_tokens()
  local handle = check_lock(self, "fencing_tokens", 2)
  local out = {}
  for i = 1, core.lock_name_count(handle) do
    out[i] = core.lock_fencing_token_at(handle, i - 1)
  end
  return out
end

--- lock:lost_name() -> name | nil: the name whose loss lost the current
-- or last hold (nil when it was not lost).
function Lock:lost_name()
  local handle = check_lock(self, "lost_name", 2)
  return core.lock_lost_name(handle)
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
  run_hooks() -- a loss already queued still reaches the hook
  local handle = self._handle
  if handle ~= nil then
    self._handle = nil
    if self._on_lost ~= nil then
      self._client._watched[core.lock_id(handle)] = nil
    end
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

-- A lock collected while held is not released: drop_lock (above) leaves
-- it to its lease. (The SWIG userdata does the same if it is collected on
-- its own.)
Lock.__gc = drop_lock

Lock.__tostring = function(self)
  local state = self._handle and STATE_NAMES[core.lock_state(self._handle)] or "freed"
  return ("watchlock.Lock(%q, %s%s)"):format(self.name, state, self._kind and ", " .. self._kind or "")
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
  local rok, released, rerr = pcall(lock.release, lock)
  if rok and not released and rerr == "not owner" and not lost then
    -- Lost between the check above and the release: fn's work was not
    -- protected to its end either.
    lost, reason = true, "not owner"
  end
  if not res[1] then
    local e = res[2]
    if lost and type(e) == "string" then
      e = e .. "\n(the lock was also lost while the function ran: " .. reason .. ")"
    end
    error(e, 0)
  end
  if not rok then
    error(released, 0)
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
  run_hooks()
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

-- Key templates: "report:{1}" names the lock from the guarded call's first
-- argument, "invoice:{2.id}" from a field of the second; "{{" and "}}" are
-- literal braces. compile_template returns nil for a plain name (no braces)
-- and otherwise a function(...) -> name. Malformed templates raise at wrap().

local function key_piece(v, tpl, pos)
  local t = type(v)
  if t == "string" then
    return v
  elseif t == "number" then
    if v == floor(v) and v > -2^63 and v < 2^63 then
      return ("%d"):format(v) -- 42, never 42.0 (5.4) or 1.7954111832661e+15 (LuaJIT)
    end
    return tostring(v)
  elseif t == "boolean" then
    return tostring(v)
  end
  raise(("wrap: key template %q: {%s} is %s; give a string or a number, or use a key function"):format(
    tpl, pos, t == "nil" and "nil" or "a " .. t), 4)
end

local function compile_template(tpl)
  if not tpl:find("[{}]") then
    return nil
  end
  local parts = {} -- strings and { index, fields, source }
  local i, n = 1, #tpl
  while i <= n do
    local c = tpl:sub(i, i)
    local c2 = tpl:sub(i + 1, i + 1)
    if (c == "{" and c2 == "{") or (c == "}" and c2 == "}") then
      parts[#parts + 1] = c
      i = i + 2
    elseif c == "{" then
      local close = tpl:find("}", i + 1, true)
      local field = close and tpl:sub(i + 1, close - 1) or tpl:sub(i + 1)
      local index, rest = field:match("^(%d+)(.*)$")
      local fields = {}
      while close and index and rest ~= "" do -- ".id.name" -> { "id", "name" }
        local f, tail = rest:match("^%.([%a_][%w_]*)(.*)$")
        if not f then break end
        fields[#fields + 1], rest = f, tail
      end
      if not close or not index or tonumber(index) < 1 or rest ~= "" then
        raise(("wrap: key template %q: {%s is not an argument ({1}, {2}, {1.id}, ...); "
          .. "write {{ and }} for literal braces"):format(tpl, field .. (close and "}" or "")), 3)
      end
      parts[#parts + 1] = { tonumber(index), fields, field }
      i = close + 1
    elseif c == "}" then
      raise(("wrap: key template %q: a single '}'; write }} for a literal brace"):format(tpl), 3)
    else
      local j = tpl:find("[{}]", i) or n + 1
      parts[#parts + 1] = tpl:sub(i, j - 1)
      i = j
    end
  end
  return function(...)
    local nargs = select("#", ...)
    local out = {}
    for k, part in ipairs(parts) do
      if type(part) == "string" then
        out[k] = part
      else
        local index, fields, source = part[1], part[2], part[3]
        if index > nargs then
          raise(("wrap: key template %q needs argument %d, the call has %d"):format(tpl, index, nargs), 3)
        end
        local v = (select(index, ...))
        for _, f in ipairs(fields) do
          if type(v) ~= "table" then
            raise(("wrap: key template %q: {%s}: argument %d%s is not a table"):format(
              tpl, source, index, v == nil and " (nil)" or ""), 3)
          end
          v = v[f]
        end
        out[k] = key_piece(v, tpl, source)
      end
    end
    return table.concat(out)
  end
end

--- watchlock.wrap(key, [opts], fn) -> guarded function
-- Each call of the guarded function takes a fresh lock on the key, runs
-- fn(...) under it like with_lock, and frees the handle. key: a lock name;
-- a template naming it from the call's arguments ("report:{1}",
-- "invoice:{1.id}"); or a function(...) returning the name. opts: the lock
-- options (ttl, wait = seconds or nil for forever, on_lost, ...) and
-- `client` (default: default_client()); client:wrap(key, [opts], fn) is the
-- same with that client. The guarded function returns fn's results, or nil
-- plus a message.
function M.wrap(key, opts, fn)
  run_hooks()
  if fn == nil and type(opts) == "function" then
    opts, fn = nil, opts
  end
  if type(key) ~= "string" and type(key) ~= "function" then
    raise("wrap: the key must be a lock name or a function computing it, got " .. type(key), 2)
  end
  local keyfn = key
  if type(key) == "string" then
    check_name(key, "wrap", 2)
    keyfn = compile_template(key)
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
  local ms = read_lock_options(lock_opts, "wrap", 2)
  if client ~= nil and client._handle ~= nil then
    -- Misuse raises here, not at the first call: a handle that is never
    -- acquired (no network I/O) lets the core's setters judge the options.
    local status, probe = core.lock_new(client._handle, type(key) == "string" and key or "wrap")
    if status ~= OK then
      fail(status, "wrap", 2)
    end
    apply_lock_options(probe, lock_opts, ms, "wrap", 2)
    core.lock_free(probe)
  end

  return function(...)
    local name = key
    if keyfn ~= nil then
      name = keyfn(...)
      if type(name) ~= "string" then
        raise("wrap: the key " .. (type(key) == "function" and "function must return" or "template must give")
          .. " a string, got " .. type(name), 2)
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
    run_hooks()
    local lock = new_lock(c, name, lock_opts, 3)
    local res = pack(pcall(run_locked, lock, nil, fn, ...))
    lock:free()
    if not res[1] then
      error(res[2], 0)
    end
    return unpack(res, 2, res.n)
  end
end

--- client:wrap(key, [opts], fn) -> guarded function: watchlock.wrap with
-- this client (opts.client, if given, must be this client).
function Client:wrap(key, opts, fn)
  check_client(self, "wrap", 2)
  if fn == nil and type(opts) == "function" then
    opts, fn = nil, opts
  end
  if opts ~= nil and type(opts) ~= "table" then
    raise("wrap: options must be a table, got " .. type(opts), 2)
  end
  if opts ~= nil and opts.client ~= nil and opts.client ~= self then
    raise("wrap: option client must be this client (or omitted) in client:wrap()", 2)
  end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.client = self
  return M.wrap(key, o, fn)
end

--- watchlock.parse_duration("1.5s") -> seconds | nil, message
function M.parse_duration(text)
  run_hooks()
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
