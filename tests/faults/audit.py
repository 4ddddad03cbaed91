"""Server-side audit of the lock's redis-server, from its MONITOR stream.

MONITOR shows every command as the server executes it, and (Redis 7) every
command a Lua script runs right after the script's own line ("[0 lua]").
That is enough to follow each lock key's owner without trusting any client:

* a successful acquire is the acquire script's ``SET key <identity> NX PX``
  followed by its ``SET <fence key> <token>`` (a failed one returns before
  that); the token ties the identity to a hold in the histories;
* a renewal (``PEXPIRE`` or ``SET ... PX`` inside a renewal script) or a
  release (``DEL`` inside a release script) must only ever act on a key that
  holds the writer's own hold identity ("<token>.").

A *touch* is a renewal or release that acted on a key owned by another hold:
the late-renewal bug the hold identity exists to prevent ("a bare PEXPIRE
delivered late cuts the next holder's lease"). A *late write* is a renewal or
release of a hold that reached the server after another hold acquired the
same key (harmless when it did nothing). Expiry and eviction do not show in
MONITOR; the owner model only changes on what it sees, and a touch is only
reported when a script wrote while the model's owner is someone else, which
a correct script cannot do whatever the key's expiry.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Dict, List, Optional, Tuple


def parse_line(line: str) -> Optional[Tuple[float, str, List[str]]]:
    """'1700000000.123456 [0 127.0.0.1:5000] "get" "k"' -> (ts, source, args)."""
    try:
        ts_s, rest = line.split(" ", 1)
        ts = float(ts_s.lstrip("+"))
        lb = rest.index("[")
        rb = rest.index("]", lb)
        source = rest[lb + 1:rb].split(" ", 1)[1] if " " in rest[lb + 1:rb] else rest[lb + 1:rb]
        return ts, source, _split_quoted(rest[rb + 1:])
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


class Monitor:
    """A thread that keeps a MONITOR connection to 127.0.0.1:port and appends
    every line to a file. Reconnects when the server restarts (writing a
    "# reconnect" marker: the owner model starts afresh there)."""

    def __init__(self, port: int, path: str):
        self.port = port
        self.path = path
        self.stopping = False
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.sock: Optional[socket.socket] = None

    def start(self) -> "Monitor":
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("MONITOR connection did not start")
        return self

    def stop(self) -> None:
        self.stopping = True
        s = self.sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(10)

    def _run(self) -> None:
        with open(self.path, "a") as out:
            first = True
            while not self.stopping:
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                except OSError:
                    time.sleep(0.02)
                    continue
                self.sock = s
                try:
                    s.settimeout(None)
                    s.sendall(b"MONITOR\r\n")
                    f = s.makefile("rb")
                    ok = f.readline()
                    if not ok.startswith(b"+OK"):
                        raise ConnectionError(ok)
                    if not first:
                        out.write("# reconnect\n")
                        out.flush()
                    first = False
                    self.ready.set()
                    for raw in f:
                        line = raw.decode(errors="replace").rstrip("\r\n")
                        if line.startswith("+"):
                            line = line[1:]
                        out.write(line + "\n")
                    out.flush()
                except (OSError, ConnectionError, ValueError):
                    pass
                finally:
                    self.sock = None
                    try:
                        s.close()
                    except OSError:
                        pass
                out.flush()


class _Exec:
    __slots__ = ("ts", "source", "args", "inner")

    def __init__(self, ts: float, source: str, args: List[str]):
        self.ts, self.source, self.args, self.inner = ts, source, args, []


def _execs(lines: List[str]):
    cur: Optional[_Exec] = None
    for line in lines:
        if line.startswith("# reconnect"):
            if cur is not None:
                yield cur
                cur = None
            yield "reconnect"
            continue
        p = parse_line(line)
        if p is None:
            continue
        ts, source, args = p
        if source == "lua":
            if cur is not None:
                cur.inner.append(args)
            continue
        if cur is not None:
            yield cur
        cur = _Exec(ts, source, args)
    if cur is not None:
        yield cur


def audit(path: str) -> dict:
    """Reads a monitor log; returns {"acquires", "renewals", "releases",
    "touches": [...], "late_writes": [...], "fence_of": {identity: fence}}."""
    try:
        with open(path, errors="replace") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return {"acquires": 0, "renewals": 0, "releases": 0, "touches": [], "late_writes": [],
                "fence_of": {}, "missing": True}
    owner: Dict[str, str] = {}          # key -> identity of the latest acquire seen
    last_owner: Dict[str, str] = {}     # key -> identity of the latest acquire (kept after DEL)
    ended: Dict[str, str] = {}          # key -> how the last owner's key went: "release", "force", "restart"
    handoffs: Dict[str, Tuple[Optional[str], str]] = {}  # identity -> (previous owner, how it got in)
    acquired_at: Dict[str, float] = {}  # identity -> server time of its acquire
    fence_of: Dict[str, str] = {}
    report = {"acquires": 0, "renewals": 0, "releases": 0, "touches": [], "late_writes": [],
              "fence_of": fence_of, "handoffs": handoffs}

    def late(key: str, prefix: str, ts: float, kind: str, wrote: bool) -> None:
        o = owner.get(key)
        if o is None or o.startswith(prefix):
            return
        mine = [i for i in acquired_at if i.startswith(prefix)]
        if mine and acquired_at.get(o, 0) > acquired_at[mine[0]]:
            report["late_writes"].append({"key": key, "prefix": prefix, "ts": ts, "kind": kind,
                                          "owner": o, "wrote": wrote})
        if wrote:
            report["touches"].append({"key": key, "prefix": prefix, "ts": ts, "kind": kind, "owner": o})

    for ex in _execs(lines):
        if ex == "reconnect":
            owner.clear()  # the server restarted: what it kept is unknown here
            for k in last_owner:
                ended.setdefault(k, "restart")
            continue
        cmd = [a.upper() for a in (x[0] for x in ex.inner)] if ex.inner else []
        a = ex.args
        if not a or a[0].lower() not in ("evalsha", "eval"):
            continue
        if any(x[0].upper() == "SET" and "NX" in [y.upper() for y in x[3:]] for x in ex.inner):
            # acquire: [TIME,] SET key ident NX PX ms [, GET, PEXPIRE], [TIME,] SET fence s PX ttl
            # [, owner record]: it got the key when it went on to set the fence (KEYS[2])
            set_nx = next(x for x in ex.inner if x[0].upper() == "SET" and "NX" in [y.upper() for y in x[3:]])
            key, ident = set_nx[1], set_nx[2]
            fence_key = a[4] if len(a) > 4 else None
            fset = [x for x in ex.inner if x[0].upper() == "SET" and len(x) > 2 and x[1] == fence_key]
            if fset:
                report["acquires"] += 1
                prev = last_owner.get(key)
                if prev is not None and prev != ident:
                    # the previous hold's key was deleted by its release (or an admin), lost
                    # in a restart, or else it expired (or was evicted): MONITOR shows no expiry
                    handoffs[ident] = (prev, ended.get(key, "expiry"))
                elif prev is None:
                    handoffs[ident] = (None, "first")
                ended.pop(key, None)
                last_owner[key] = ident
                owner[key] = ident
                acquired_at.setdefault(ident, ex.ts)
                fence_of[ident] = fset[-1][2]
            continue
        try:
            nkeys = int(a[2])
        except (IndexError, ValueError):
            continue
        keys = a[3:3 + nkeys]
        rest = a[3 + nkeys:]
        deleted_lock = any(x[0].upper() == "DEL" and len(x) > 1 and keys and x[1] == keys[0] for x in ex.inner)
        if len(rest) == 1 and rest[0].endswith(":released"):
            if deleted_lock:  # force-release (admin)
                owner.pop(keys[0], None)
                ended[keys[0]] = "force"
            continue
        if len(rest) == 2 and rest[1].endswith(":released") and rest[0].endswith("."):
            # release: GET, DEL, PUBLISH
            key, prefix = keys[0], rest[0]
            report["releases"] += 1
            dele = deleted_lock
            late(key, prefix, ex.ts, "release", dele)
            if dele and (owner.get(key) or "").startswith(prefix):
                owner.pop(key, None)
                ended[key] = "release"
            continue
        if len(rest) == 4 * nkeys and nkeys >= 1:
            # renewal of nkeys holds: per key GET [PEXPIRE | SET ... PX]
            report["renewals"] += nkeys
            wrote_keys: Dict[str, List[str]] = {}
            for x in ex.inner:
                if x[0].upper() in ("PEXPIRE", "SET") and len(x) > 1:
                    wrote_keys[x[1]] = x
            for i, key in enumerate(keys):
                prefix = rest[4 * i]
                w = wrote_keys.get(key)
                late(key, prefix, ex.ts, "renew", w is not None)
                old = owner.get(key) or ""
                if w is not None and w[0].upper() == "SET" and old.startswith(prefix):
                    owner[key] = w[2]  # a new epoch of the same hold
                    if last_owner.get(key) == old:
                        last_owner[key] = w[2]
                    if old in fence_of:
                        fence_of.setdefault(w[2], fence_of[old])
                    acquired_at.setdefault(w[2], acquired_at.get(old, ex.ts))
    return report


def handoffs_by_fence(report: dict) -> Dict[int, Tuple[str, Optional[int]]]:
    """{fence of a hold: (how it got the key, fence of the hold before it)}:
    how = "release" (the previous hold's release deleted the key), "expiry"
    (it ran out, or was evicted), "force", "restart" or "first"."""
    fence_of = report.get("fence_of", {})
    out: Dict[int, Tuple[str, Optional[int]]] = {}
    for ident, (prev, how) in report.get("handoffs", {}).items():
        if ident not in fence_of:
            continue
        pf = fence_of.get(prev) if prev is not None else None
        out[int(fence_of[ident])] = (how, int(pf) if pf is not None else None)
    return out
