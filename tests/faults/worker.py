#!/usr/bin/env python3
"""The Python worker of the fault-injection suite (tests/faults).

Same loop and events as worker.c, through the watchlock Python package:
acquire -> "acquired" -> iterations of check / GET / SET+1 / fenced write /
idle (common.Work) -> "release_call" -> release -> "released". A check is
``lock.owned()`` (``lock.locked()`` in packages before owned() existed,
when locked() meant "held by this Lock"); the on_lost callback records "told" (how=callback);
LockLostError at release records "told" (how=release) if nothing told it
earlier. One Lock object per hold (the package's advice: a Lock per use).

--name2 N: a multi-lock (issue 23) over --name and N, in a random order per
hold (the library takes them in its own global order). Its hold is
recorded as one hold per name (numbers 2k-1 for --name, 2k for N), each
with that name's fencing token, so the checker judges every name on its
own: no two holders of any name at once.
--extend-ms E: right after each acquire the hold sets its lease to E ms
(lock.extend), from the --lease-ms it was granted with (issue 29.13:
scenario r, holders that shortened their lease and died).
--lock-kind picks the lock kind (issues 22, 23): plain (the default), fair,
sem:N:K (a semaphore of N permits, K taken per hold) or rw:P (a read-write
lock, P% of the holds on the write side). Holds that must exclude each other
record their work under the lock's name (writers; semaphore holds taking
more than half the permits); the others under NAME#r (readers) or NAME#kK
(smaller permit holds), whose counters may legitimately lose updates. Every
"acquired" event says kind, side or permits, for checker.check_family.
SIGUSR1: the hold in progress ends by closing the client (no release call:
the close releases it), then the worker exits (scenarios m-close, n-close).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import History, Redis, Work, die_with_parent, iterations, start_fields  # noqa: E402

import watchlock  # noqa: E402

stop = False
close_now = False  # SIGUSR1: close the client while holding (issue 29.11), then exit


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--resource-port", type=int, required=True)
    p.add_argument("--scripts", required=True, help="SHA1s of common.SCRIPTS, comma-separated")
    p.add_argument("--id", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--name", default="faults")
    p.add_argument("--lease-ms", type=int, default=1000)
    p.add_argument("--renew-ms", type=int, default=0)
    p.add_argument("--duration-ms", type=int, default=600000)
    p.add_argument("--wait-ms", type=int, default=5000)
    p.add_argument("--iters-max", type=int, default=3)
    p.add_argument("--idle-min-ms", type=int, default=50)
    p.add_argument("--idle-max-ms", type=int, default=300)
    p.add_argument("--gap-max-ms", type=int, default=30)
    p.add_argument("--window-ms", type=int, default=0)
    p.add_argument("--long-pct", type=int, default=30)
    p.add_argument("--long-iters", type=int, default=16)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--name2", default=None, help="a multi-lock over --name and this")
    p.add_argument("--lock-kind", default="plain", help="plain | fair | sem:N:K | rw:P")
    p.add_argument("--extend-ms", type=int, default=0, help="extend each hold to this lease at once")
    a = p.parse_args()

    die_with_parent()

    def on_signal(signum, frame):
        global stop
        stop = True

    def on_usr1(signum, frame):
        global close_now
        close_now = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_usr1)
    rng = random.Random(a.seed if a.seed is not None else os.getpid())
    hist = History(a.history, a.id)
    hist.emit("start", lease_ms=a.lease_ms, **start_fields("python"))
    client = None
    for _ in range(50):
        try:
            # several URLs separated by spaces: a Redlock quorum (issue 21)
            client = watchlock.Client(a.url.split() if " " in a.url else a.url)
            break
        except watchlock.Error:
            time.sleep(0.1)
    if client is None:
        hist.emit("exit", error="cannot open a client")
        return 69
    res = Redis(a.resource_port)
    work = Work(hist, res, a.scripts, a.name)
    kind, permits, take, write_pct = a.lock_kind, 0, 1, 0
    if kind.startswith("sem:"):
        permits, take = (int(x) for x in kind[4:].split(":"))
        kind = "sem"
        if 2 * take <= permits:  # holds of this size may overlap: their own counter
            work = Work(hist, res, a.scripts, f"{a.name}#k{take}")
    elif kind.startswith("rw:"):
        write_pct, kind = int(kind[3:]), "rw"
    read_work = Work(hist, res, a.scripts, f"{a.name}#r")
    end = time.monotonic() + a.duration_ms / 1000.0
    hold_no = 0
    renew = a.renew_ms / 1000.0 if a.renew_ms else None

    if a.name2:
        return multilock(a, client, hist, res, rng, end, renew)

    while not stop and time.monotonic() < end:
        told = {"done": False}
        cur = {"hold": 0, "fence": 0}

        def on_lost(lock, reason, told=told, cur=cur):
            t = time.monotonic_ns()
            told["done"] = True
            hist.emit("told", t=t, hold=cur["hold"], lock=cur.get("lock", a.name), how="callback", reason=str(reason),
                      fence=cur["fence"])

        opts = dict(ttl=a.lease_ms / 1000.0, renew_interval=renew, on_lost=on_lost)
        side, hw = None, work
        if kind == "fair":
            lock = client.fair_lock(a.name, **opts)
        elif kind == "sem":
            lock = client.semaphore(a.name, permits=permits, **opts)
        elif kind == "rw":
            side = "write" if rng.randint(1, 100) <= write_pct else "read"
            rw = client.rwlock(a.name)
            lock = rw.write_lock(**opts) if side == "write" else rw.read_lock(**opts)
            hw = work if side == "write" else read_work
        else:
            lock = client.lock(a.name, **opts)
        t_call = time.monotonic_ns()
        try:
            ok = lock.acquire(timeout=a.wait_ms / 1000.0, permits=take) if kind == "sem" else \
                lock.acquire(timeout=a.wait_ms / 1000.0)
        except watchlock.Error as e:
            hist.emit("acquire_failed", lock=a.name, t_call=t_call, status=type(e).__name__, detail=str(e))
            time.sleep(rng.uniform(0.01, 0.06))
            continue
        t = time.monotonic_ns()
        if not ok:
            hist.emit("acquire_failed", t=t, lock=a.name, t_call=t_call, status="timeout", detail="")
            continue
        try:
            fence = lock.fencing_token
        except watchlock.Error as e:  # a quorum could not confirm the token's raise (issue 21.6)
            hist.emit("acquire_failed", lock=a.name, t_call=t_call, status=type(e).__name__, detail="fence")
            try:
                lock.release()
            except watchlock.Error:
                pass
            continue
        if a.extend_ms:
            try:
                lock.extend(a.extend_ms / 1000.0)
            except watchlock.Error as e:
                hist.emit("acquire_failed", lock=a.name, t_call=t_call, status=type(e).__name__, detail="extend")
                try:
                    lock.release()
                except watchlock.Error:
                    pass
                continue
        hold_no += 1
        cur["hold"], cur["fence"], cur["lock"] = hold_no, fence, hw.name
        family = {} if kind == "plain" else {"kind": kind, "base": a.name, "side": side,
                                             "permits": take if kind == "sem" else None, "of": permits or None}
        hist.emit("acquired", t=t, hold=hold_no, lock=hw.name, t_call=t_call, fence=fence,
                  remaining_ms=int(lock.remaining * 1000), pid=os.getpid(), **family)

        owned = getattr(lock, "owned", None) or lock.locked

        def check(lock=lock, hold=hold_no, fence=fence, owned=owned):
            if owned():
                return True
            hist.emit("told", hold=hold, lock=hw.name, how="check",
                      reason=str(lock.lost_reason) if lock.lost else "not held", fence=fence)
            return False

        iters = iterations(rng, a.iters_max, a.long_pct, a.long_iters)
        for k in range(iters):
            if stop or close_now:
                break
            if not hw.once(hold_no, fence, check, rng.randint(a.idle_min_ms, a.idle_max_ms),
                             a.window_ms, left=iters - 1 - k):
                break
        if close_now:
            # The client's close releases what it holds (as Python's exit
            # handler does): through the queue's script for a queued kind.
            hist.emit("release_call", hold=hold_no, lock=hw.name, held=owned(), how="close")
            client.close()
            hist.emit("released", t=time.monotonic_ns(), hold=hold_no, lock=hw.name, result="ok", status="",
                      detail="", how="close")
            res.close()
            hist.emit("exit")
            return 0
        hist.emit("release_call", hold=hold_no, lock=hw.name, held=owned())
        result, status, detail = "ok", "", ""
        try:
            lock.release()
        except watchlock.LockLostError as e:
            result, status, detail = "lost", type(e).__name__, str(e)
        except watchlock.LockNotOwnedError as e:
            result, status, detail = "lost", type(e).__name__, str(e)
        except watchlock.Error as e:
            result, status, detail = "error", type(e).__name__, str(e)
        t = time.monotonic_ns()
        hist.emit("released", t=t, hold=hold_no, lock=hw.name, result=result, status=status, detail=detail)
        if result == "lost" and not told["done"]:
            hist.emit("told", t=t, hold=hold_no, lock=hw.name, how="release",
                      reason=str(lock.lost_reason), fence=fence)
        del lock
        time.sleep(rng.uniform(0, a.gap_max_ms / 1000.0))

    client.close()
    res.close()
    hist.emit("exit")
    return 0


def multilock(a, client, hist, res, rng, end, renew) -> int:
    """The loop of worker.py with one multi-lock over two names per hold."""
    names = [a.name, a.name2]
    works = [Work(hist, res, a.scripts, n) for n in names]
    hold_no = 0
    while not stop and time.monotonic() < end:
        told = {"done": False}
        cur = {"holds": [0, 0], "fences": [0, 0]}

        def on_lost(lock, reason, told=told, cur=cur):
            t = time.monotonic_ns()
            told["done"] = True
            for i in range(2):
                hist.emit("told", t=t, hold=cur["holds"][i], lock=names[i], how="callback", reason=str(reason),
                          fence=cur["fences"][i])

        order = names if rng.random() < 0.5 else names[::-1]
        lock = client.multi_lock(order, ttl=a.lease_ms / 1000.0, renew_interval=renew, on_lost=on_lost)
        t_call = time.monotonic_ns()
        try:
            ok = lock.acquire(timeout=a.wait_ms / 1000.0)
        except watchlock.Error as e:
            for n in names:
                hist.emit("acquire_failed", lock=n, t_call=t_call, status=type(e).__name__, detail=str(e))
            time.sleep(rng.uniform(0.01, 0.06))
            continue
        t = time.monotonic_ns()
        if not ok:
            for n in names:
                hist.emit("acquire_failed", t=t, lock=n, t_call=t_call, status="timeout", detail="")
            continue
        hold_no += 2
        holds = [hold_no - 1, hold_no]
        tokens = dict(zip(order, lock.fencing_tokens))
        fences = [tokens[n] for n in names]
        cur["holds"], cur["fences"] = holds, fences
        for i in range(2):
            hist.emit("acquired", t=t, hold=holds[i], lock=names[i], t_call=t_call, fence=fences[i],
                      remaining_ms=int(lock.remaining * 1000), pid=os.getpid())

        def check(i, lock=lock):
            if lock.owned():
                return True
            hist.emit("told", hold=holds[i], lock=names[i], how="check",
                      reason=str(lock.lost_reason) if lock.lost else "not held", fence=fences[i])
            return False

        iters = iterations(rng, a.iters_max, a.long_pct, a.long_iters)
        ok = True
        for k in range(iters):
            if stop or not ok:
                break
            for i in range(2):
                idle = rng.randint(a.idle_min_ms, a.idle_max_ms) if i == 1 else 0
                if not works[i].once(holds[i], fences[i], lambda i=i: check(i), idle, a.window_ms,
                                     left=iters - 1 - k):
                    ok = False
                    break
        held = lock.owned()
        for i in range(2):
            hist.emit("release_call", hold=holds[i], lock=names[i], held=held)
        result, status, detail = "ok", "", ""
        try:
            lock.release()
        except (watchlock.LockLostError, watchlock.LockNotOwnedError) as e:
            result, status, detail = "lost", type(e).__name__, str(e)
        except watchlock.Error as e:
            result, status, detail = "error", type(e).__name__, str(e)
        t = time.monotonic_ns()
        for i in range(2):
            hist.emit("released", t=t, hold=holds[i], lock=names[i], result=result, status=status, detail=detail)
            if result == "lost" and not told["done"]:
                hist.emit("told", t=t, hold=holds[i], lock=names[i], how="release",
                          reason=str(lock.lost_reason), fence=fences[i])
        del lock
        time.sleep(rng.uniform(0, a.gap_max_ms / 1000.0))
    client.close()
    res.close()
    hist.emit("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
