"""Shared by the Python pieces of the fault-injection suite: a minimal RESP
client for the resource server, the fenced-write script, and the history
writer (one JSON line per event, appended with one write() to the worker's
history file and echoed on stdout for the runner).

Times are time.monotonic_ns(), which is CLOCK_MONOTONIC: the same clock as
the C worker's clock_gettime(CLOCK_MONOTONIC) on this machine.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Optional

# The resource's scripts. Every access to the resource also takes the next
# number of a per-name sequence (seq:<name>), so the checker knows the order
# in which the resource saw them, whatever the clients' timing.
# GET: KEYS ctr, seq -> {value or nil, seq}
RGET_LUA = """
local v = redis.call('GET', KEYS[1])
return {v, redis.call('INCR', KEYS[2])}
"""
# SET: KEYS ctr, seq; ARGV value -> seq
RSET_LUA = """
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('INCR', KEYS[2])
"""
# The fenced write: accepted only when the token is >= the highest token the
# resource has seen; every attempt is logged in order ("<token> <1|0> <w:hold>
# <highest before> <seq>"), so the checker can recompute what should have
# been accepted. KEYS: highest, log, data, seq. ARGV: token, writer tag.
# -> {1 accepted | 0 refused, seq}
FENCE_LUA = """
local seq = redis.call('INCR', KEYS[4])
local max = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
local ok = 0
if tok >= max then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[3], ARGV[2])
  ok = 1
end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ok .. ' ' .. ARGV[2] .. ' ' .. string.format('%.0f', max) .. ' ' .. seq)
return {ok, seq}
"""
SCRIPTS = (RGET_LUA, RSET_LUA, FENCE_LUA)


class RedisError(Exception):
    pass


class Redis:
    """One blocking connection to a redis-server on 127.0.0.1."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0):
        self.addr = (host, port)
        self.timeout = timeout
        self.sock: Optional[socket.socket] = None
        self.rfile: Any = None

    def connect(self) -> None:
        self.close()
        self.sock = socket.create_connection(self.addr, timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.rfile.close()
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.rfile = None

    def call(self, *args: Any) -> Any:
        """Sends one command; returns the decoded reply (RedisError replies are
        raised). A connection error closes the connection and propagates:
        the caller decides whether the command may have run."""
        if self.sock is None:
            self.connect()
        try:
            self.sock.sendall(encode(args))
            reply = read_reply(self.rfile)
        except (OSError, ConnectionError):
            self.close()
            raise
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def pipeline(self, commands) -> list:
        """Sends many commands at once; returns their replies (errors as RedisError objects)."""
        if self.sock is None:
            self.connect()
        try:
            self.sock.sendall(b"".join(encode(c) for c in commands))
            return [read_reply(self.rfile) for _ in commands]
        except (OSError, ConnectionError):
            self.close()
            raise


def encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def read_reply(f) -> Any:
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        return f.read(n + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise ConnectionError(f"bad reply {line!r}")


class History:
    """Appends events to a history file (and echoes them on stdout)."""

    def __init__(self, path: str, worker: str, echo: bool = True):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.worker = worker
        self.echo = echo
        # Reentrant: a signal handler in the main thread may emit while the
        # main thread is inside emit().
        self.lock = threading.RLock()

    def emit(self, ev: str, t: Optional[int] = None, **fields: Any) -> int:
        if t is None:
            t = time.monotonic_ns()
        rec = {"ev": ev, "w": self.worker, "t": t}
        rec.update(fields)
        line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
        with self.lock:
            os.write(self.fd, line)
            if self.echo:
                try:
                    os.write(1, line)
                except OSError:
                    pass
        return t


def start_fields(lang: str) -> dict:
    rt, mono = time.time_ns(), time.monotonic_ns()
    return {"lang": lang, "pid": os.getpid(), "rt_off": rt - mono}


def die_with_parent() -> None:
    """SIGKILL when the parent dies (PR_SET_PDEATHSIG); exit now if it already has."""
    import ctypes
    import signal
    import sys
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(0)


class Work:
    """The resource work of one iteration, shared by the Python worker and
    the CLI job: check -> GET -> check -> SET+1 -> check -> [window] ->
    fenced write -> idle. scripts: "GETSHA,SETSHA,FENCESHA" (SCRIPTS loaded). check() returns False once the holder knows it
    does not hold the lock any more (it then writes nothing)."""

    def __init__(self, hist: History, res: Redis, scripts: str, lock_name: str):
        self.hist = hist
        self.res = res
        self.get_sha, self.set_sha, self.fence_sha = scripts.split(",")
        self.name = lock_name

    def once(self, hold: int, fence: int, check, idle_ms: float, window_ms: float = 0,
             left: int = 0) -> bool:
        h, n = self.hist, self.name
        if not check():
            return False
        t0 = time.monotonic_ns()
        try:
            v, seq = self.res.call("EVALSHA", self.get_sha, 2, f"ctr:{n}", f"seq:{n}")
            v = int(v or 0)
        except (OSError, ConnectionError, RedisError) as e:
            h.emit("op_error", hold=hold, lock=n, op="get", t0=t0, error=str(e))
            return False
        t1 = time.monotonic_ns()
        h.emit("op", t=t1, hold=hold, lock=n, op="get", t0=t0, t1=t1, read=v, seq=seq)
        if not check():
            return False
        t0 = time.monotonic_ns()
        h.emit("op_begin", t=t0, hold=hold, lock=n, op="set", t0=t0, wrote=v + 1)
        try:
            seq = self.res.call("EVALSHA", self.set_sha, 2, f"ctr:{n}", f"seq:{n}", v + 1)
        except (OSError, ConnectionError, RedisError) as e:
            h.emit("op_error", hold=hold, lock=n, op="set", t0=t0, error=str(e))
            return False
        t1 = time.monotonic_ns()
        h.emit("op_end", t=t1, hold=hold, lock=n, op="set", t0=t0, t1=t1, wrote=v + 1, read=v, seq=seq)
        if not check():
            return False
        if window_ms > 0:
            h.emit("window", hold=hold, lock=n, ms=window_ms)
            time.sleep(window_ms / 1000.0)  # no check after this on purpose
        t0 = time.monotonic_ns()
        h.emit("op_begin", t=t0, hold=hold, lock=n, op="fence", t0=t0, token=fence)
        try:
            acc, seq = self.res.call("EVALSHA", self.fence_sha, 4, f"fence:{n}:max", f"fence:{n}:log",
                                     f"fence:{n}:data", f"seq:{n}", fence, f"{h.worker}:{hold}")
        except (OSError, ConnectionError, RedisError) as e:
            h.emit("op_error", hold=hold, lock=n, op="fence", t0=t0, error=str(e))
            return False
        t1 = time.monotonic_ns()
        h.emit("op_end", t=t1, hold=hold, lock=n, op="fence", t0=t0, t1=t1, token=fence,
               accepted=acc == 1, window=window_ms > 0, seq=seq)
        h.emit("idle", hold=hold, lock=n, ms=idle_ms, left=left)
        time.sleep(idle_ms / 1000.0)
        return True


def iterations(rng, iters_max: int, long_pct: int, long_iters: int) -> int:
    """Short holds, and long ones (several leases: the watchdog's job)."""
    if rng.randint(1, 100) <= long_pct:
        return rng.randint(long_iters // 2, long_iters)
    return rng.randint(1, iters_max)
