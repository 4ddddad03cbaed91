"""Server-side audit of the lock's redis-server: its MONITOR stream (who sent
what) aligned with its replication stream (what took effect).

MONITOR shows every command as the server executes it, with the client that
sent it, and (Redis 7) every command a Lua script runs right after the
script's own line ("[0 lua]"); it does not show whether a command changed
anything: a fast acquire (``SET key <identity> NX PX``, lock.c acquire_fast)
that found the key held looks like one that got it, and expiry and eviction
do not show at all. The replication stream (this module attaches as a
replica: ``SYNC``) has exactly the writes that took effect, in the same
order, as the server rewrites them (``PEXPIRE`` becomes ``PEXPIREAT``,
``SET ... PX`` becomes ``SET ... PXAT``, a failed ``SET NX`` is absent), and
the deletions done by expiry and eviction as plain ``DEL``. Both streams
follow the server's single execution order, so walking MONITOR's commands
and matching each to the next replicated write tells which commands took
effect (``align``); a ``DEL`` in the replication stream that no command
explains is an expiry (or an eviction). That gives the exact value of every
lock key at every step, so the audit follows each key's owner without
trusting any client:

* an acquire is a write that made a lock key hold a new hold's identity
  ("<token>.<epoch>"), by the fast path's top-level ``SET NX`` or the
  acquire script's; its fencing token is the counter's value after the INCR
  that follows it (the same client's next ``INCR`` for the fast path, the
  script's own INCR or seeding ``SET`` otherwise);
* a renewal (``PEXPIRE`` or ``SET ... PX`` inside a renewal script), or a
  release (``DEL`` inside a release script), must only ever act on a key
  that holds the writer's own hold ("<token>.").

A *touch* is a renewal or release that acted on a key held by another hold
(or by none): the late-renewal bug the hold identity exists to prevent. A
*late write* is a renewal or release of a hold that reached the server after
another hold acquired the same key (harmless when it did nothing). An
*overwrite* is an acquire whose ``SET NX`` took effect on a key that existed:
Redis cannot do that, so it means the audit lost track. *Errors* are the
audit's own failures: replicated writes that no command explains, or a
model that disagrees with the server's snapshot at a marker.

Markers: whenever either connection (re)connects (the server restarted,
say), the auditor runs a marker script that writes ``MARKER_KEY`` and
returns every string key of db 0 with its value, atomically. The marker's
write shows in both streams, so it cuts both logs into segments that start
at the same point of the execution order, and the snapshot is the state
there: the model starts from it after a gap, and must agree with it
otherwise. A final marker at ``stop`` closes the last segment cleanly.
Segments present in only one log (a connection was down) are not audited and
are counted as such.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from common import Redis, RedisError, encode

MARKER_KEY = "watchlock-audit:marker"
# writes the marker, then returns {key, value, ...} of every string key: the
# state at the marker (KEYS skips keys already expired, and a script sees one
# time throughout, so no expiry happens inside it)
MARKER_LUA = """
redis.call('SET', KEYS[1], ARGV[1])
local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  if k ~= KEYS[1] and redis.call('TYPE', k).ok == 'string' then
    out[#out + 1] = k
    out[#out + 1] = redis.call('GET', k)
  end
end
return out
"""

IDENT = re.compile(r"^(.+\.)(\d+)$")
# commands of the replication stream that are no write of db 0's keys
_REPL_SKIP = {"MULTI", "EXEC", "PING", "REPLCONF"}
_EXPIRES = {"PEXPIRE", "EXPIRE", "EXPIREAT", "PEXPIREAT"}
_DELS = ("DEL", "UNLINK")


def hold_of(value: Optional[str]) -> Optional[str]:
    """'<token>.<epoch>' -> '<token>.' (the hold); None for anything else."""
    if not isinstance(value, str):
        return None
    m = IDENT.match(value)
    return m.group(1) if m else None


# ---- the two streams, written to files while the scenario runs

def parse_line(line: str) -> Optional[Tuple[float, int, str, List[str]]]:
    """'1700000000.123456 [0 127.0.0.1:5000] "get" "k"' -> (ts, db, source, args)."""
    try:
        ts_s, rest = line.split(" ", 1)
        ts = float(ts_s.lstrip("+"))
        lb = rest.index("[")
        rb = rest.index("]", lb)
        db_s, source = rest[lb + 1:rb].split(" ", 1)
        return ts, int(db_s), source, _split_quoted(rest[rb + 1:])
    except (ValueError, IndexError):
        return None


def _split_quoted(s: str) -> List[str]:
    out: List[str] = []
    i, n = 0, len(s)
    while i < n:
        if s[i] != '"':
            i += 1
            continue
        i += 1
        buf = []
        while i < n and s[i] != '"':
            c = s[i]
            if c == "\\" and i + 1 < n:
                nxt = s[i + 1]
                if nxt == "x" and i + 3 < n:
                    buf.append(chr(int(s[i + 2:i + 4], 16)))
                    i += 4
                    continue
                buf.append({"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}.get(nxt, nxt))
                i += 2
                continue
            buf.append(c)
            i += 1
        out.append("".join(buf))
        i += 1
    return out


class _Stream:
    """A thread that keeps one connection to 127.0.0.1:port and appends what
    it reads to a file, writing "# connect" whenever it (re)connects: what
    came before and after it are separate segments."""

    def __init__(self, port: int, path: str):
        self.port = port
        self.path = path
        self.stopping = False
        self.gen = 0          # connections made so far
        self.up = False
        self.markers_seen: set = set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.sock: Optional[socket.socket] = None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        s = self.sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.thread.is_alive():
            self.thread.join(10)

    def _run(self) -> None:
        with open(self.path, "a", encoding="latin-1") as out:
            while not self.stopping:
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                except OSError:
                    time.sleep(0.02)
                    continue
                self.sock = s
                try:
                    f = s.makefile("rb")
                    self._open(s, f)
                    out.write("# connect\n")
                    out.flush()
                    self.gen += 1
                    self.up = True
                    self._follow(f, out)
                except (OSError, ConnectionError, ValueError, RedisError):
                    pass
                finally:
                    self.up = False
                    self.sock = None
                    try:
                        s.close()
                    except OSError:
                        pass
                    out.flush()
                if not self.stopping:
                    time.sleep(0.02)

    def _open(self, s: socket.socket, f) -> None:
        raise NotImplementedError

    def _follow(self, f, out) -> None:
        raise NotImplementedError


class _Monitor(_Stream):
    def _open(self, s, f) -> None:
        s.settimeout(None)
        s.sendall(b"MONITOR\r\n")
        ok = f.readline()
        if not ok.startswith(b"+OK"):
            raise ConnectionError(ok)

    def _follow(self, f, out) -> None:
        for raw in f:
            line = raw.decode("latin-1").rstrip("\r\n")
            if line.startswith("+"):
                line = line[1:]
            out.write(line + "\n")
            if f'"SET" "{MARKER_KEY}" "' in line:
                out.flush()
                p = parse_line(line)
                if p is not None and len(p[3]) == 3:
                    self.markers_seen.add(p[3][2])


def _read_bulk_raw(f) -> bytes:
    line = f.readline()
    if not line.startswith(b"$"):
        raise ConnectionError(f"bad bulk {line!r}")
    n = int(line[1:-2])
    return f.read(n + 2)[:-2]


_ACK = encode(("REPLCONF", "ACK", "0"))


class _Replica(_Stream):
    """Attaches as a replica (diskless SYNC); writes each replicated command as
    a JSON list of strings (latin-1, as MONITOR's escapes decode)."""

    def _open(self, s, f) -> None:
        s.settimeout(10)

        def call(*args: str) -> None:
            s.sendall(encode(args))
            line = f.readline()
            if not line.startswith(b"+"):
                raise ConnectionError(line)
        # the snapshot goes over the socket at once (nothing written to the server's dir)
        call("CONFIG", "SET", "repl-diskless-sync", "yes")
        call("CONFIG", "SET", "repl-diskless-sync-delay", "0")
        call("REPLCONF", "capa", "eof")
        s.sendall(b"SYNC\r\n")
        line = f.readline()
        while line in (b"\n", b"\r\n"):  # keepalives while the snapshot is being made
            line = f.readline()
        if line.startswith(b"$EOF:"):
            mark = line[5:45]
            buf = b""
            while not buf.endswith(mark):
                chunk = f.read1(65536)
                if not chunk:
                    raise ConnectionError("snapshot cut")
                buf = buf[-64:] + chunk
        elif line.startswith(b"$"):
            f.read(int(line[1:-2]))
        else:
            raise ConnectionError(f"SYNC: {line!r}")
        # the server streams the commands once the replica acknowledges the snapshot after it
        # has marked the transfer done (an ACK before that is ignored): ACK every 200 ms, as
        # replicas do every second
        s.settimeout(None)
        threading.Thread(target=self._ack, args=(s,), daemon=True).start()

    def _ack(self, s: socket.socket) -> None:
        while True:
            try:
                s.sendall(_ACK)
            except OSError:
                return
            time.sleep(0.2)

    def _follow(self, f, out) -> None:
        while True:
            line = f.readline()
            if not line:
                raise ConnectionError("closed")
            if line in (b"\n", b"\r\n"):
                continue
            if not line.startswith(b"*"):
                raise ConnectionError(f"bad command {line!r}")
            args = [_read_bulk_raw(f).decode("latin-1") for _ in range(int(line[1:-2]))]
            out.write(json.dumps(args) + "\n")
            if len(args) == 3 and args[0].upper() == "SET" and args[1] == MARKER_KEY:
                out.flush()
                self.markers_seen.add(args[2])


class Auditor:
    """Follows the lock's redis-server on port: monitor.log, replica.log and
    markers.jsonl in dir (read them with audit(dir)). start() returns once
    both streams run and the first marker is in; stop() places a last marker,
    waits until both streams have it, and stops."""

    def __init__(self, port: int, dir: str):
        self.port = port
        self.mon = _Monitor(port, os.path.join(dir, "monitor.log"))
        self.rep = _Replica(port, os.path.join(dir, "replica.log"))
        self.markers_path = os.path.join(dir, "markers.jsonl")
        self.n = 0          # markers placed
        self.attempts = 0
        self.marked_gens: Tuple[int, int] = (0, 0)
        self.stopping = False
        self.mu = threading.Lock()
        self.thread = threading.Thread(target=self._coordinate, daemon=True)

    def start(self, timeout: float = 15.0) -> "Auditor":
        self.mon.start()
        self.rep.start()
        self.thread.start()
        end = time.monotonic() + timeout
        while self.n == 0:
            if time.monotonic() > end:
                raise RuntimeError("the audit's MONITOR and replica connections did not start")
            time.sleep(0.01)
        return self

    def mark(self) -> Optional[str]:
        """Places a marker (if both streams are up); returns its value."""
        with self.mu:
            gens = (self.mon.gen, self.rep.gen)
            if not (self.mon.up and self.rep.up):
                return None
            # a value per attempt: one that timed out may still run later (a stopped
            # server); without its snapshot it is no segment boundary (audit())
            self.attempts += 1
            value = str(self.attempts)
            r = Redis(self.port, timeout=5)
            try:
                flat = r.call("EVAL", MARKER_LUA, 1, MARKER_KEY, value)
            finally:
                r.close()
            with open(self.markers_path, "a") as fh:
                fh.write(json.dumps({"n": value, "keys": dict(zip(flat[0::2], flat[1::2]))}) + "\n")
            self.n += 1
            self.marked_gens = gens
            return value

    def _coordinate(self) -> None:
        while not self.stopping:
            if (self.mon.gen, self.rep.gen) != self.marked_gens:
                try:
                    self.mark()
                except (OSError, ConnectionError, RedisError):
                    pass
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                v = self.mark()
            except (OSError, ConnectionError, RedisError):
                v = None
            if v is not None:
                while time.monotonic() < end and not (v in self.mon.markers_seen and v in self.rep.markers_seen):
                    time.sleep(0.01)
                break
            time.sleep(0.05)
        self.close()

    def close(self) -> None:
        """Stops without a last marker (the last segment stays cut)."""
        self.stopping = True
        if self.thread.is_alive():
            self.thread.join(10)
        self.mon.stop()
        self.rep.stop()


# ---- reading the logs

class _Exec:
    """One command MONITOR showed, with the commands its script ran."""
    __slots__ = ("ts", "db", "source", "args", "inner", "inner_ts", "kind", "keys", "argv", "ident", "writer",
                 "effective")

    def __init__(self, ts: float, db: int, source: str, args: List[str]):
        self.ts, self.db, self.source, self.args = ts, db, source, args
        self.inner: List[List[str]] = []
        self.inner_ts: List[float] = []
        self.effective: List[List[str]] = []
        # set by _classify: what the command is, its KEYS and ARGV (scripts), the
        # acquiring identity, and a renewal's hold per key
        self.kind = "cmd"
        self.keys: List[str] = []
        self.argv: List[str] = []
        self.ident: Optional[str] = None
        self.writer: Dict[str, Optional[str]] = {}

    def candidates(self) -> List[List[str]]:
        return self.inner if self.args and self.args[0].upper() in ("EVAL", "EVALSHA") else [self.args]


class _Segment:
    def __init__(self, n: str):
        self.n = n
        self.items: list = []
        self.cut = False  # ended by a reconnect (or the log's end) rather than the next marker


def _monitor_segments(lines: List[str], markers: set) -> Tuple[Dict[str, _Segment], int]:
    """MONITOR log -> ({marker: segment of execs}, execs outside any segment).
    markers: the markers placed (with a snapshot); others are plain commands."""
    segs: Dict[str, _Segment] = {}
    cur: Optional[_Segment] = None
    outside = 0
    ex: Optional[_Exec] = None

    def close_exec() -> None:
        nonlocal cur, ex, outside
        if ex is None:
            return
        marker = next((x[2] for x in ex.inner if len(x) == 3 and x[0].upper() == "SET" and x[1] == MARKER_KEY),
                      None)
        if marker is not None and marker in markers:
            cur = segs.setdefault(marker, _Segment(marker))
        elif cur is not None:
            cur.items.append(ex)
        else:
            outside += 1
        ex = None

    for line in lines:
        if line.startswith("# connect"):
            close_exec()
            if cur is not None:
                cur.cut = True
            cur = None
            continue
        p = parse_line(line)
        if p is None:
            continue
        ts, db, source, args = p
        if source == "lua":
            if ex is not None:
                ex.inner.append(args)
                ex.inner_ts.append(ts)
            continue
        close_exec()
        ex = _Exec(ts, db, source, args)
    close_exec()
    if cur is not None:
        cur.cut = True
    return segs, outside


def _replica_segments(lines: List[str], markers: set) -> Tuple[Dict[str, _Segment], int]:
    """Replica log -> ({marker: segment of db 0's writes}, writes outside any segment)."""
    segs: Dict[str, _Segment] = {}
    cur: Optional[_Segment] = None
    outside = 0
    db = 0
    for line in lines:
        if line.startswith("# connect"):
            if cur is not None:
                cur.cut = True
            cur, db = None, 0
            continue
        try:
            args = json.loads(line)
        except ValueError:
            continue
        if not args:
            continue
        name = args[0].upper()
        if name == "SELECT":
            db = int(args[1])
            continue
        if name in _REPL_SKIP or db != 0:
            continue
        if name == "SET" and len(args) >= 3 and args[1] == MARKER_KEY and args[2] in markers:
            cur = segs.setdefault(args[2], _Segment(args[2]))
            continue
        if cur is None:
            outside += 1
        else:
            cur.items.append(args)
    if cur is not None:
        cur.cut = True
    return segs, outside


def _norm(args: List[str]) -> tuple:
    """What a command's replicated form keeps: name, key, and a SET's value."""
    name = args[0].upper()
    if name in _EXPIRES:
        name = "PEXPIREAT"
    if name == "SET" and len(args) >= 3:
        return (name, args[1], args[2])
    return (name, args[1] if len(args) > 1 else "")


def _px(args: List[str], opt: str) -> Optional[int]:
    up = [x.upper() for x in args]
    if opt in up and up.index(opt) + 1 < len(args):
        try:
            return int(args[up.index(opt) + 1])
        except ValueError:
            return None
    return None


def _same_time(c: List[str], ts: float, w: List[str]) -> bool:
    """A command with a relative expiry (SET ... PX, PEXPIRE) is replicated
    with the absolute one (PXAT, PEXPIREAT): the server's clock in ms when
    it ran plus the lease, which cannot be later than MONITOR's time of the
    command (taken after it ran; 2 ms for rounding). So an attempt that found
    the key held is never matched to the effect of a later retry with the
    very same arguments (a waiter's next attempt with the same identity),
    unless they ran within 2 ms of each other. (No lower bound: a server
    descheduled between running a command and showing it in MONITOR would
    break one, and the order of the candidates makes it unnecessary.)"""
    name = c[0].upper()
    if name == "SET":
        px, at = _px(c[3:], "PX"), _px(w[3:], "PXAT")
    elif name == "PEXPIRE" and len(c) > 2 and len(w) > 2:
        try:
            px, at = int(c[2]), int(w[2])
        except ValueError:
            return True
    else:
        return True
    if px is None or at is None:
        return True
    return at - (ts * 1000 + px) <= 2


def align(execs: List[_Exec], writes: List[List[str]]) -> Tuple[List[tuple], List[List[str]]]:
    """Walks MONITOR's commands in order against the replicated writes: a
    command took effect when the next write (after deletions no command
    explains: expiry, eviction) is its replicated form, with an absolute
    expiry that matches the command's time (_same_time). Returns the ops in
    order, ("expire", write) | ("exec", exec) with exec.effective filled,
    and the writes left over at the end."""
    ops: List[tuple] = []
    i, n = 0, len(writes)
    norms = [_norm(w) for w in writes]
    for ex in execs:
        if ex.db != 0:
            continue
        scripted = ex.candidates() is ex.inner
        for k_c, c in enumerate(ex.candidates()):
            if not c:
                continue
            c_ts = ex.inner_ts[k_c] if scripted else ex.ts
            nc = _norm(c)
            j = i
            while j < n and norms[j][0] in _DELS and norms[j] != nc:
                j += 1
            if j < n and norms[j] == nc and _same_time(c, c_ts, writes[j]):
                ops.extend(("expire", writes[k]) for k in range(i, j))
                ex.effective.append(c)
                i = j + 1
        ops.append(("exec", ex))
    return ops, writes[i:]


def _classify(ex: _Exec) -> None:
    a = ex.args
    name = a[0].upper() if a else ""
    if name in ("EVAL", "EVALSHA"):
        try:
            nk = int(a[2])
        except (IndexError, ValueError):
            return
        ex.keys, ex.argv = a[3:3 + nk], a[3 + nk:]
        first = ex.inner[0] if ex.inner else []
        f = first[0].upper() if first else ""
        if f == "SET" and "NX" in [x.upper() for x in first[3:]] and ex.argv:
            ex.kind, ex.ident = "acquire", ex.argv[0]
        elif f == "MGET" and len(ex.argv) == 3 * nk:
            ex.kind = "renew"
            ex.writer = {k: hold_of(ex.argv[3 * i]) for i, k in enumerate(ex.keys)}
        elif f == "GET" and len(ex.argv) == 3 and ex.argv[0].endswith("."):
            ex.kind = "release"
        elif f == "GET" and nk >= 2 and nk % 2 == 0 and len(ex.argv) == 2 + nk // 2 and IDENT.match(ex.argv[2]):
            # the multi-lock's acquire (scripts.c multi_acquire): KEYS lock, fence per name;
            # ARGV lease, fence TTL, then each name's identity
            ex.kind = "macquire"
            ex.writer = {ex.keys[2 * i]: ex.argv[2 + i] for i in range(nk // 2)}
        elif f == "GET" and len(ex.argv) == 2 * nk + 1 and ex.argv[0].endswith("."):
            # the multi-lock's release: ARGV "<token>." and channel per key, then the publish command
            ex.kind = "mrelease"
            ex.writer = {k: ex.argv[2 * i] for i, k in enumerate(ex.keys)}
        elif f == "DEL" and len(ex.argv) == 2:
            ex.kind = "force"
        else:
            ex.kind = "script"
    elif name == "SET" and len(a) > 3 and "NX" in [x.upper() for x in a[3:]] and hold_of(a[2]):
        ex.kind, ex.ident = "fast", a[2]


def _empty_report(**extra: Any) -> dict:
    r = {"acquires": 0, "renewals": 0, "releases": 0, "touches": [], "late_writes": [], "overwrites": [],
         "errors": [], "tail": 0, "segments": 0, "unaudited": 0, "fence_of": {}, "handoffs": {},
         "acquired_at": {}}
    r.update(extra)
    return r


def audit(dir: str) -> dict:
    """Reads monitor.log, replica.log and markers.jsonl in dir; returns
    {"acquires", "renewals", "releases", "touches", "late_writes",
    "overwrites", "errors", "tail" (writes at the cut end of a segment that
    MONITOR did not show: the server died), "segments" (audited),
    "unaudited" (segments or commands outside them), "fence_of": {hold:
    fence}, "handoffs": {hold: (previous hold, how it ended)}, "acquired_at":
    {hold: server time (s) of the command that took the key}}, or with
    "missing" when the logs are not there."""
    try:
        with open(os.path.join(dir, "monitor.log"), encoding="latin-1") as fh:
            mlines = fh.read().splitlines()
        with open(os.path.join(dir, "replica.log"), encoding="latin-1") as fh:
            rlines = fh.read().splitlines()
        with open(os.path.join(dir, "markers.jsonl")) as fh:
            snaps = {m["n"]: m["keys"] for m in (json.loads(x) for x in fh if x.strip())}
    except FileNotFoundError:
        return _empty_report(missing=True)
    report = _empty_report()
    msegs, mout = _monitor_segments(mlines, set(snaps))
    rsegs, rout = _replica_segments(rlines, set(snaps))
    report["unaudited"] = len(set(msegs) ^ set(rsegs)) + (1 if mout or rout else 0)
    placed = sorted(snaps, key=int)
    model = _Model(report)
    prev: Optional[Tuple[str, bool]] = None  # (marker, cut) of the segment before
    for n in sorted(set(msegs) & set(rsegs), key=int):
        ms, rs = msegs[n], rsegs[n]
        snap = snaps[n]
        continuous = prev is not None and placed.index(n) == placed.index(prev[0]) + 1 and not prev[1]
        model.at_marker(n, snap, continuous)
        for ex in ms.items:
            _classify(ex)
        ops, left = align(ms.items, rs.items)
        for op, x in ops:
            if op == "expire":
                model.expire(x)
            else:
                model.apply(x)
        cut = ms.cut or rs.cut
        for w in left:
            if w[0].upper() in _DELS:
                model.expire(w)
            elif cut:
                report["tail"] += 1
            else:
                report["errors"].append(f"segment {n}: replicated write no command explains: {w}")
        report["segments"] += 1
        prev = (n, cut)
    return report


class _Model:
    """The lock keys' values as the server held them, and what the audit
    reports about them."""

    def __init__(self, report: dict):
        self.r = report
        self.value: Dict[str, Optional[str]] = {}
        self.lock_keys: set = set()
        self.untracked: set = set()              # keys written by commands the model does not follow
        self.last_owner: Dict[str, str] = {}     # lock key -> the latest hold that acquired it
        self.ended: Dict[str, str] = {}          # lock key -> how that hold's key went
        self.acquired_at: Dict[str, float] = report["acquired_at"]  # hold -> server time of its acquire
        # (client, fence key) -> the hold whose fast SET of that name's lock key took effect, until
        # the client's INCR of the name's counter (a multi-lock's fast acquire sets several keys,
        # then INCRs every counter, also those of keys it did not get)
        self.pending_fast: Dict[Tuple[str, str], str] = {}
        self.fence_of: Dict[str, int] = report["fence_of"]
        self.handoffs: Dict[str, Tuple[Optional[str], str]] = report["handoffs"]

    def at_marker(self, n: str, snap: Dict[str, str], continuous: bool) -> None:
        if continuous:
            # the model must agree with the server (keys it still has may have expired
            # unseen: KEYS skips them, their DEL comes later in the stream)
            for k, v in snap.items():
                if k in self.untracked:
                    continue
                if self.value.get(k) != v:
                    self.r["errors"].append(f"marker {n}: {k} is {v!r} on the server, {self.value.get(k)!r} here")
            return
        # a gap: start from the server's state; a hold that came or went unseen
        # ended (or took over) by a "gap"
        self.pending_fast.clear()
        self.untracked.clear()
        for k in self.lock_keys:
            old, h = hold_of(self.value.get(k)), hold_of(snap.get(k))
            if old is not None and h != old:
                self.ended[k] = "gap"
            if h is not None and self.last_owner.get(k) != h:
                if self.last_owner.get(k) is not None:
                    self.ended[k] = "gap"
                self._new_hold(k, h, None)
        self.value = dict(snap)

    def _new_hold(self, key: str, h: str, ts: Optional[float]) -> None:
        prev = self.last_owner.get(key)
        if prev is None:
            self.handoffs[h] = (None, "first")
        elif prev != h:
            self.handoffs[h] = (prev, self.ended.get(key, "expiry"))
        self.ended.pop(key, None)
        self.last_owner[key] = h
        if ts is not None:
            self.acquired_at.setdefault(h, ts)

    def expire(self, w: List[str]) -> None:
        for k in w[1:]:
            if self.value.get(k) is not None and k in self.lock_keys:
                self.ended[k] = "expiry"
            self.value[k] = None

    def _check_owner(self, key: str, h: Optional[str], ex: _Exec, kind: str) -> None:
        cur = self.value.get(key)
        if h is None or hold_of(cur) != h:
            self.r["touches"].append({"key": key, "prefix": h, "ts": ex.ts, "kind": kind, "owner": cur})

    def _late(self, key: str, h: Optional[str], ex: _Exec, kind: str, wrote: bool) -> None:
        last = self.last_owner.get(key)
        if h is None or last is None or last == h or h not in self.acquired_at:
            return
        if self.acquired_at.get(last, 0) > self.acquired_at[h]:
            self.r["late_writes"].append({"key": key, "prefix": h, "ts": ex.ts, "kind": kind, "owner": last,
                                          "wrote": wrote})

    def apply(self, ex: _Exec) -> None:
        r = self.r
        if ex.kind == "renew":
            r["renewals"] += len(ex.keys)
        elif ex.kind == "release":
            r["releases"] += 1
        fence_key = ex.keys[1] if ex.kind == "acquire" and len(ex.keys) > 1 else None
        wrote: set = set()  # keys a renewal or release of a hold wrote
        for c in ex.effective:
            name = c[0].upper()
            key = c[1] if len(c) > 1 else ""
            if name == "SET" and len(c) >= 3:
                v = c[2]
                nx = "NX" in [x.upper() for x in c[3:]]
                if ex.kind == "macquire" and key in ex.writer and v == ex.writer[key]:
                    # a name of a multi-lock taken: an acquire of its own hold (the script read
                    # every key first: free, or already this identity's after a lost reply)
                    self.lock_keys.add(key)
                    if self.value.get(key) is not None and self.value[key] != v:
                        r["overwrites"].append({"key": key, "ts": ex.ts, "was": self.value[key], "by": v})
                    if self.value.get(key) != v:
                        r["acquires"] += 1
                        self._new_hold(key, hold_of(v) or v, ex.ts)
                elif ex.kind in ("fast", "acquire") and nx and key == (ex.args[1] if ex.kind == "fast" else ex.keys[0]):
                    self.lock_keys.add(key)
                    if self.value.get(key) is not None:
                        r["overwrites"].append({"key": key, "ts": ex.ts, "was": self.value[key], "by": v})
                    r["acquires"] += 1
                    h = hold_of(v) or v
                    self._new_hold(key, h, ex.ts)
                    if ex.kind == "fast":
                        self.pending_fast[(ex.source, key + ":fence")] = h
                elif ex.kind == "renew" and key in ex.writer:
                    self._check_owner(key, ex.writer[key], ex, "renew")
                    wrote.add(key)
                elif key in self.lock_keys and hold_of(v) != hold_of(self.value.get(key)):
                    self._check_owner(key, hold_of(v), ex, ex.kind)  # by neither an acquire nor a renewal
                self.value[key] = v
                self.untracked.discard(key)
            elif name in _EXPIRES:
                if ex.kind == "renew" and key in ex.writer:
                    self._check_owner(key, ex.writer[key], ex, "renew")
                    wrote.add(key)
                elif ex.kind == "acquire" and ex.keys and key == ex.keys[0]:
                    self._check_owner(key, hold_of(ex.ident), ex, "acquire")
                elif key in self.lock_keys:
                    self._check_owner(key, None, ex, ex.kind)
            elif name in _DELS:
                for k in c[1:]:
                    if k in self.lock_keys:
                        if ex.kind == "release":
                            self._check_owner(k, ex.argv[0], ex, "release")
                            wrote.add(k)
                        elif ex.kind == "mrelease" and k in ex.writer:
                            self._check_owner(k, ex.writer[k], ex, "release")
                            wrote.add(k)
                        if self.value.get(k) is not None:
                            self.ended[k] = {"release": "release", "force": "force",
                                             "mrelease": "release", "acquire": "undo",
                                             "macquire": "undo"}.get(ex.kind, "del")
                    self.value[k] = None
                    self.untracked.discard(k)
            elif name == "INCR":
                cur = self.value.get(key)
                if key in self.untracked or (cur is not None and not cur.lstrip("-").isdigit()):
                    self.untracked.add(key)
                    continue
                count = int(cur or 0) + 1
                self.value[key] = str(count)
                fast = self.pending_fast.pop((ex.source, key), None)
                if fast is not None:
                    self.fence_of[fast] = count
            elif name in ("FLUSHALL", "FLUSHDB"):
                for k, old in self.value.items():
                    if old is not None and k in self.lock_keys:
                        self.ended[k] = "flush"
                self.value = {k: None for k in self.value}
            elif name in ("PUBLISH", "SPUBLISH", "HSET", "HMSET", "HDEL"):
                pass  # not string keys: the model leaves them to the snapshot (which lists strings only)
            elif key:
                self.untracked.add(key)
        counted = fence_key is not None and any(len(c) > 1 and c[1] == fence_key and c[0].upper() in ("SET", "INCR")
                                                for c in ex.effective)
        fence_v = self.value.get(fence_key) if counted and fence_key is not None else None
        if fence_v is not None and fence_v.isdigit():
            self.fence_of[hold_of(ex.ident) or str(ex.ident)] = int(fence_v)
        if ex.kind == "macquire":  # each name's fence: its counter after the script
            for i in range(len(ex.keys) // 2):
                fv = self.value.get(ex.keys[2 * i + 1])
                h = hold_of(ex.writer.get(ex.keys[2 * i]))
                if h is not None and fv is not None and fv.isdigit() and self.value.get(ex.keys[2 * i]) is not None:
                    self.fence_of[h] = int(fv)
        if ex.kind == "renew":
            for k in ex.keys:
                self._late(k, ex.writer.get(k), ex, "renew", k in wrote)
        elif ex.kind == "release" and ex.keys:
            self._late(ex.keys[0], ex.argv[0], ex, "release", ex.keys[0] in wrote)
        elif ex.kind == "mrelease":
            for k in ex.keys:
                self._late(k, ex.writer.get(k), ex, "release", k in wrote)


def handoffs_by_fence(report: dict) -> Dict[int, Tuple[str, Optional[int]]]:
    """{fence of a hold: (how it got the key, fence of the hold before it)}:
    how = "release" (the previous hold's release deleted the key), "expiry"
    (it ran out, or was evicted), "force", "undo", "del", "flush", "gap"
    (the audit missed it) or "first"."""
    fence_of = report.get("fence_of", {})
    out: Dict[int, Tuple[str, Optional[int]]] = {}
    for h, (prev, how) in report.get("handoffs", {}).items():
        if h not in fence_of:
            continue
        pf = fence_of.get(prev) if prev is not None else None
        out[int(fence_of[h])] = (how, int(pf) if pf is not None else None)
    return out


def grants_by_fence(report: dict) -> Dict[int, int]:
    """{fence of a hold: the server's clock (realtime ns) when MONITOR showed
    the command that took the key}."""
    at = report.get("acquired_at", {})
    return {int(f): int(at[h] * 1e9) for h, f in report.get("fence_of", {}).items() if h in at}
