"""A holder process of the model test (test_model.py): one client, one lock
handle of one kind, driven by JSON lines on stdin; every event is a JSON line
on stdout with a CLOCK_MONOTONIC time (time.monotonic() is system-wide on
Linux, so the test compares times across processes).

    python worker.py KIND NAMES TTL          (WATCHLOCK_URL: the placement)

KIND: plain | fair | sem:N | read | write | multi (NAMES: comma-separated;
one name except for multi). Commands ({"op": ...}):
  acquire {wait: ms (-1 forever, 0 try once), k}: in a thread; replies
          "got" {hold, token, t} or "failed"; a wait that can block prints
          "waiting" first.
  release | extend | set_lease {ttl} | downgrade | inspect (client.inspect of
          the first name): inline; reply "done" or "error".
  close:  closes the client (its holds are released), opens a new one.
  drop:   drops the handle without releasing (garbage-collected), makes a new one.
  state:  "state" {owned, lost, hold}.
Belief events: "got" starts a hold's belief; "end" {hold, why, t} ends it
(release/close/drop stamped BEFORE the call, so the interval never covers
time when the server may already be free); "lost" {hold, t} comes from the
on_lost callback (the library's declaration).
"""
from __future__ import annotations

import gc
import json
import sys
import threading
import time
import warnings

import watchlock

warnings.simplefilter("ignore", ResourceWarning)
out_mu = threading.Lock()


def emit(ev: str, **fields) -> None:
    fields["ev"] = ev
    fields.setdefault("t", time.monotonic())
    with out_mu:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


class Worker:
    def __init__(self, kind: str, names: list, ttl: float):
        self.kind, self.names, self.ttl = kind, names, ttl
        self.mu = threading.Lock()
        self.hold = 0          # id of the current (or last) hold of this process
        self.holding = False
        self.fresh = True      # the handle never acquired (a new one after close/drop)
        self.client = watchlock.Client()
        self.lock = self.make()

    def on_lost(self, hold_id: int):
        def cb(*_args) -> None:
            emit("lost", hold=hold_id)
        return cb

    def make(self):
        c, name = self.client, self.names[0]
        opts = dict(ttl=self.ttl, on_lost=lambda *a: self.on_lost(self.hold)(*a))
        if self.kind == "plain":
            return c.lock(name, **opts)
        if self.kind == "fair":
            return c.fair_lock(name, **opts)
        if self.kind.startswith("sem:"):
            return c.semaphore(name, permits=int(self.kind.split(":")[1]), **opts)
        if self.kind == "read":
            return c.rwlock(name).read_lock(**opts)
        if self.kind == "write":
            return c.rwlock(name).write_lock(**opts)
        if self.kind == "multi":
            return c.multi_lock(self.names, **opts)
        raise SystemExit(f"unknown kind {self.kind}")

    def acquire(self, wait_ms: int, k: int) -> None:
        lock = self.lock
        if wait_ms != 0:
            emit("waiting")
        try:
            timeout = -1 if wait_ms < 0 else wait_ms / 1000.0
            if isinstance(lock, watchlock.Semaphore):
                ok = lock.acquire(blocking=wait_ms != 0, timeout=timeout if wait_ms != 0 else -1, permits=k)
            else:
                ok = lock.acquire(blocking=wait_ms != 0, timeout=timeout if wait_ms != 0 else -1)
        except watchlock.Error as e:
            emit("failed", error=f"{type(e).__name__}: {e}")
            return
        if not ok:
            emit("failed", error="timeout")
            return
        with self.mu:
            self.hold += 1
            self.holding = True
            self.fresh = False
            hold = self.hold
        t = time.monotonic()
        try:
            token = lock.fencing_token
        except watchlock.Error:
            token = -1
        emit("got", hold=hold, token=token, t=t)

    def end(self, why: str) -> None:
        with self.mu:
            if self.holding:
                self.holding = False
                emit("end", hold=self.hold, why=why)

    def run(self, cmd: dict) -> None:
        op = cmd["op"]
        if op == "acquire":
            threading.Thread(target=self.acquire, args=(cmd.get("wait", 0), cmd.get("k", 1)), daemon=True).start()
            return
        if op == "state":
            emit("state", owned=self.lock.owned(), lost=self.lock.lost, hold=None if self.fresh else self.hold)
            return
        try:
            if op == "release":
                self.end("release")
                self.lock.release()
            elif op == "extend":
                self.lock.extend()
            elif op == "set_lease":
                self.lock.extend(ttl=cmd["ttl"])
            elif op == "inspect":
                self.client.inspect(self.names[0])
            elif op == "downgrade":
                self.lock.downgrade()
            elif op == "close":
                self.end("close")
                self.client.close()
                self.client = watchlock.Client()
                self.lock = self.make()
                self.fresh = True
            elif op == "drop":
                self.end("drop")
                self.lock = None
                gc.collect()
                self.lock = self.make()
                self.fresh = True
            else:
                raise SystemExit(f"unknown op {op}")
        except watchlock.Error as e:
            if isinstance(e, watchlock.LockNotOwnedError) or "lost" in type(e).__name__.lower():
                self.end("lost-at-" + op)
            emit("error", op=op, error=f"{type(e).__name__}: {e}")
            return
        emit("done", op=op)


def main() -> None:
    kind, names, ttl = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3])
    w = Worker(kind, names, ttl)
    emit("ready")
    for line in sys.stdin:
        if line.strip():
            w.run(json.loads(line))


if __name__ == "__main__":
    main()
