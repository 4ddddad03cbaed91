"""Python side of the watchlock benchmarks, run by bench/bench.py in the
bench's own venv. One mode per invocation; prints one JSON object.

    py_worker.py ping     URL N MAX_S              redis-py PING loop (the Python floor)
    py_worker.py cycle    LIB URL N MAX_S          uncontended acquire + release (one Lock)
    py_worker.py cycle-with watchlock URL N MAX_S  the same as `with client.lock(name, ttl=...):`,
                                                   a new Lock per cycle
    py_worker.py handoff  LIB URL SHM ID HOLD_US POLITE
    py_worker.py probe    LIB                      exits 0 when LIB imports

LIB is one of: watchlock, watchlock-fair (client.fair_lock), watchlock-sem
(client.semaphore with 1 permit), redis-py, python-redis-lock, pottery.
URL may be several URLs separated by spaces: watchlock then opens a quorum
(watchlock.Client([...])) and pottery's Redlock uses them all as masters.
A watchlock kind or a quorum the installed watchlock does not have yet
makes the worker exit 3 with the reason on stderr.
The shared-memory layout of `handoff` is the one of bench/c/wlbench.c
(see bench/README.md, "How hand-off latency is measured").
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import sys
import time

LEASE_S = 10


def unsupported(what: str):
    print(f"py_worker: {what} is not in the installed watchlock yet", file=sys.stderr)
    raise SystemExit(3)


def make_lock(lib: str, url: str, name: str):
    """Returns (acquire(), release()) for one lock handle of `lib`."""
    urls = url.split()
    if lib.startswith("watchlock"):
        import watchlock
        if len(urls) > 1:
            try:
                client = watchlock.Client(urls)
            except TypeError:
                unsupported("a quorum client (watchlock.Client([urls]))")
        else:
            client = watchlock.Client(url)
        if lib == "watchlock":
            lock = client.lock(name, ttl=LEASE_S)
        elif lib == "watchlock-fair":
            if not hasattr(client, "fair_lock"):
                unsupported("client.fair_lock")
            lock = client.fair_lock(name, ttl=LEASE_S)
        elif lib in ("watchlock-sem", "watchlock-sem2"):
            if not hasattr(client, "semaphore"):
                unsupported("client.semaphore")
            lock = client.semaphore(name, permits=1 if lib == "watchlock-sem" else 2, ttl=LEASE_S)
        elif lib in ("watchlock-read", "watchlock-write"):  # issue 32: every kind's cycle
            if not hasattr(client, "rwlock"):
                unsupported("client.rwlock")
            rw = client.rwlock(name)
            lock = rw.read_lock(ttl=LEASE_S) if lib == "watchlock-read" else rw.write_lock(ttl=LEASE_S)
        elif lib == "watchlock-multi3":  # three names on one server
            if not hasattr(client, "multi_lock"):
                unsupported("client.multi_lock")
            lock = client.multi_lock([f"{name}:{i}" for i in range(3)], ttl=LEASE_S)
        else:
            raise SystemExit(f"unknown library {lib!r}")
        return (lambda: lock.acquire(blocking=True, timeout=30)), lock.release, client
    import redis
    conn = redis.Redis.from_url(urls[0])
    if lib == "redis-py":
        # Default polling (sleep=0.1 s between tries), as users get it.
        lock = conn.lock(name, timeout=LEASE_S)
        return (lambda: lock.acquire(blocking=True, blocking_timeout=30)), lock.release, conn
    if lib == "python-redis-lock":
        import redis_lock
        lock = redis_lock.Lock(conn, name, expire=LEASE_S)
        # Its timeout may not exceed expire; block without one (BLPOP wake-ups).
        return (lambda: lock.acquire(blocking=True)), lock.release, conn
    if lib == "pottery":
        import logging
        import pottery
        logging.getLogger("pottery").setLevel(logging.ERROR)
        masters = {conn} | {redis.Redis.from_url(u) for u in urls[1:]}
        lock = pottery.Redlock(key=name, masters=masters, auto_release_time=LEASE_S)
        return (lambda: lock.acquire(blocking=True, timeout=30)), lock.release, masters
    raise SystemExit(f"unknown library {lib!r}")


def cmd_ping(url: str, n: int, max_s: float) -> dict:
    import redis
    conn = redis.Redis.from_url(url)
    for _ in range(100):
        conn.ping()
    t0 = time.perf_counter()
    limit = t0 + max_s
    done = 0
    while done < n:
        conn.ping()
        done += 1
        if not done & 63 and time.perf_counter() > limit:
            break
    return {"ops": done, "seconds": time.perf_counter() - t0}


def cmd_cycle_with(url: str, n: int, max_s: float) -> dict:
    """`with client.lock(name):` per cycle: what most code writes."""
    import watchlock
    client = watchlock.Client(url)
    name = f"bench:cycle:watchlock-with:{os.getpid()}"
    for _ in range(min(100, n)):
        with client.lock(name, ttl=LEASE_S):
            pass
    c0 = time.process_time()
    t0 = time.perf_counter()
    limit = t0 + max_s
    done = 0
    while done < n:
        with client.lock(name, ttl=LEASE_S):
            pass
        done += 1
        if not done & 15 and time.perf_counter() > limit:
            break
    return {"ops": done, "seconds": time.perf_counter() - t0, "cpu_us": (time.process_time() - c0) * 1e6}


def cmd_cycle(lib: str, url: str, n: int, max_s: float) -> dict:
    acquire, release, _keep = make_lock(lib, url, f"bench:cycle:{lib}:{os.getpid()}")
    for _ in range(min(100, n)):
        if not acquire():
            raise SystemExit("warm-up acquire failed")
        release()
    c0 = time.process_time()
    t0 = time.perf_counter()
    limit = t0 + max_s
    done = 0
    while done < n:
        if not acquire():
            raise SystemExit("acquire failed on a free lock")
        release()
        done += 1
        if not done & 15 and time.perf_counter() > limit:
            break
    # cpu_us: the process's CPU time (all its threads) over the timed cycles
    return {"ops": done, "seconds": time.perf_counter() - t0, "cpu_us": (time.process_time() - c0) * 1e6}


# Shared slots (int64, little-endian); same numbers as wlbench.c.
RELEASE_NS, TURNS, LAST_HOLDER, STOP_NS, IN_CS, VIOLATIONS, START_NS, OUT_OF_ORDER, READY = 0, 1, 2, 3, 4, 5, 6, 7, 8
ARRIVAL = 40  # ARRIVAL + id: when worker id called acquire (0: not waiting)
SLOTS = 64


class Shm:
    def __init__(self, path: str):
        fd = os.open(path, os.O_RDWR)
        self.mm = mmap.mmap(fd, SLOTS * 8)
        os.close(fd)

    def get(self, slot: int) -> int:
        return struct.unpack_from("<q", self.mm, slot * 8)[0]

    def put(self, slot: int, value: int) -> None:
        struct.pack_into("<q", self.mm, slot * 8, value)


def cmd_handoff(lib: str, url: str, shm_path: str, wid: int, hold_us: int, polite: bool) -> dict:
    shm = Shm(shm_path)
    acquire, release, _keep = make_lock(lib, url, "bench:handoff")
    now = time.monotonic_ns  # CLOCK_MONOTONIC, same clock as the C and Java workers
    hold_s = hold_us / 1e6
    lat: list[int] = []
    turns = same = 0
    shm.put(READY + wid, 1)
    while shm.get(START_NS) == 0:
        time.sleep(0.0002)
    stop = shm.get(STOP_NS)
    while now() < stop:
        arrived = now()
        shm.put(ARRIVAL + wid, arrived)
        if not acquire():
            raise SystemExit("acquire timed out after 30 s")
        t_acq = now()
        shm.put(ARRIVAL + wid, 0)
        if any(i != wid and 0 < shm.get(ARRIVAL + i) < arrived for i in range(8)):
            shm.put(OUT_OF_ORDER, shm.get(OUT_OF_ORDER) + 1)  # an earlier arrival still waits
        if shm.get(IN_CS):
            shm.put(VIOLATIONS, shm.get(VIOLATIONS) + 1)
        shm.put(IN_CS, 1)
        rel = shm.get(RELEASE_NS)
        prev = shm.get(LAST_HOLDER)
        if rel and t_acq < stop:
            if prev != wid + 1:
                lat.append(t_acq - rel)
            else:
                same += 1
        turns += 1
        my_turn = shm.get(TURNS) + 1
        shm.put(TURNS, my_turn)
        shm.put(LAST_HOLDER, wid + 1)
        time.sleep(hold_s)
        shm.put(IN_CS, 0)
        shm.put(RELEASE_NS, now())
        release()
        while polite and shm.get(TURNS) == my_turn and now() < stop:
            time.sleep(0.00005)
    return {"turns": turns, "same_holder": same, "handoff_ns": lat}


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else ""
    if mode == "ping" and len(argv) == 4:
        out = cmd_ping(argv[1], int(argv[2]), float(argv[3]))
    elif mode == "cycle-with" and len(argv) == 5 and argv[1] == "watchlock":
        out = cmd_cycle_with(argv[2], int(argv[3]), float(argv[4]))
    elif mode == "cycle" and len(argv) == 5:
        out = cmd_cycle(argv[1], argv[2], int(argv[3]), float(argv[4]))
    elif mode == "handoff" and len(argv) == 7:
        out = cmd_handoff(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6] == "1")
    elif mode == "probe" and len(argv) == 2:
        lib = argv[1]
        mod = {"watchlock": "watchlock", "watchlock-fair": "watchlock", "watchlock-sem": "watchlock",
               "redis-py": "redis", "python-redis-lock": "redis_lock", "pottery": "pottery"}[lib]
        m = __import__(mod)
        out = {"version": getattr(m, "__version__", "?")}
        if lib == "redis-py":  # the reply parser: hiredis (C) when installed
            import redis.utils
            out["hiredis"] = bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
