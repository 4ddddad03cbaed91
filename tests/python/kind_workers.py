"""Worker processes for test_fair.py, test_semaphore.py and test_rwlock.py:
python kind_workers.py MODE KIND NAME TTL

KIND: fair | sem:N:K (a semaphore of N permits, taking K) | read | write.
MODE:
  hold   acquires, prints "held TOKEN", then waits to be killed; if the lock
         is lost meanwhile (e.g. after SIGSTOP + SIGCONT) prints "lost" and
         exits 3.
  wait   prints "waiting", acquires (waits forever), prints "got TOKEN",
         releases when its stdin closes, prints "released".
WATCHLOCK_URL names the server.
"""
from __future__ import annotations

import sys
import threading

import watchlock


def make(client: watchlock.Client, kind: str, name: str, ttl: float):
    if kind == "fair":
        return client.fair_lock(name, ttl=ttl), 1
    if kind.startswith("sem:"):
        _, n, k = kind.split(":")
        return client.semaphore(name, permits=int(n), ttl=ttl), int(k)
    if kind in ("read", "write"):
        rw = client.rwlock(name)
        return (rw.read_lock(ttl=ttl) if kind == "read" else rw.write_lock(ttl=ttl)), 1
    return client.lock(name, ttl=ttl), 1


def acquire(lock, k: int) -> bool:
    if isinstance(lock, watchlock.Semaphore):
        return lock.acquire(permits=k)
    return lock.acquire()


def main() -> None:
    mode, kind, name, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    client = watchlock.Client()
    lock, k = make(client, kind, name, ttl)
    if mode == "hold":
        assert acquire(lock, k)
        print("held", lock.fencing_token, flush=True)
        lost = threading.Event()
        while not lost.wait(0.02):
            if lock.lost:
                print("lost", flush=True)
                sys.exit(3)
    elif mode == "wait":
        print("waiting", flush=True)
        assert acquire(lock, k)
        print("got", lock.fencing_token, flush=True)
        sys.stdin.read()
        lock.release()
        print("released", flush=True)
        client.close()
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
