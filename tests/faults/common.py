"""Shared by the Python pieces of the fault-injection suite: a minimal RESP
client for the resource server, the fenced-write script, and the history
writer (one JSON line per event, appended with one write() to the worker's
history file and echoed on stdout for the runner).

Times are time.monotonic_ns(), which is CLOCK_MONOTONIC: the same clock as
the C worker's clock_gettime(CLOCK_MONOTONIC) on this machine.
"""
from __future__ import annotations

import bisect
import json
import os
import socket
import threading
import time
from typing import Any, List, Optional, Tuple

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


class LagProbe:
    """How late this machine runs a thread that asks to wake up, measured all
    through a run: a daemon thread sleeps PERIOD_MS at a time and records each
    wake-up's delay past its due time, with when it happened.

    Every time bound of the suite (a takeover after a SIGKILL, a loss told at
    its deadline, a hand-off) is a fixed part that the design promises (a
    lease, a deadline) plus slack for what the machine does in between: the
    waiter's thread waking, a process being scheduled, a reply read. On a
    loaded machine that slack is not a constant (a CPU-heavy neighbour made a
    takeover after a SIGKILL 1,618 ms against lease + 200 ms): slack_ms()
    derives it from the scheduling delay measured over the bounded interval
    itself, and never lets it reach `cap_ms`, which each caller chooses below
    the defect it must still catch (a takeover that waits a whole extra lease,
    a loss told after a slow callback instead of at its deadline)."""

    PERIOD_MS = 5.0
    # the wake-ups on the path of one bounded event (the waiter's timer or
    # subscriber thread, the worker's main thread, the redis-server, the
    # runner's reader): each may be as late as the worst seen around it
    HOPS = 4

    def __init__(self) -> None:
        self.samples: List[Tuple[int, int]] = []  # (t_ns when woken, lag_ns)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "LagProbe":
        self._thread = threading.Thread(target=self._run, name="lag-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        period = int(self.PERIOD_MS * 1_000_000)
        while not self._stop.is_set():
            due = time.monotonic_ns() + period
            time.sleep(period / 1e9)
            t = time.monotonic_ns()
            self.samples.append((t, max(0, t - due)))

    def worst_ms(self, t0: int, t1: int) -> float:
        """The worst wake-up delay (ms) of the probe in [t0, t1] (monotonic ns),
        and of the first wake-up after t1 (its delay may have covered t1)."""
        i = bisect.bisect_left(self.samples, (t0, 0))
        worst = 0
        for t, lag in self.samples[i:]:
            worst = max(worst, lag)
            if t > t1:
                break
        return worst / 1e6

    def slack_ms(self, t0: int, t1: int, base_ms: float, cap_ms: float) -> float:
        """The allowance for scheduling in a bound over [t0, t1]: base_ms (what
        an idle machine needs) plus HOPS times the worst delay measured in that
        interval, at most cap_ms."""
        return min(cap_ms, base_ms + self.HOPS * self.worst_ms(t0, t1))

    def summary(self) -> str:
        lags = sorted(lag for _, lag in self.samples)
        if not lags:
            return "no samples"
        return (f"{len(lags)} samples, median {lags[len(lags) // 2] / 1e6:.1f} ms, "
                f"p99 {lags[min(len(lags) - 1, len(lags) * 99 // 100)] / 1e6:.1f} ms, max {lags[-1] / 1e6:.1f} ms")


def bound_check(what: str, samples: List[Tuple[float, float]], derived: str) -> Tuple[str, bool]:
    """A per-trial time bound as a check of the runner: samples are
    (measured ms, its bound ms) per trial, the bound derived in the same run
    (derived: how, in words). -> (description, every sample within its bound)."""
    if not samples:
        return f"{what}: nothing measured", False
    over = [(v, b) for v, b in samples if v > b]
    worst = max(samples, key=lambda s: s[0] - s[1])
    return (f"{what} ({derived}; max {max(v for v, _ in samples):.1f} ms, closest to its bound "
            f"{worst[0]:.1f} of {worst[1]:.1f} ms{f'; {len(over)} over' if over else ''})", not over)
