"""Worker processes started by test_processes.py (python workers.py MODE ARGS...).

WATCHLOCK_URL names the server; WATCHLOCK_TEST_PORT its port (for plain
GET/SET through the harness, not through watchlock).
"""
from __future__ import annotations

import os
import sys
import threading
import time

import watchlock
from helpers import RedisAt


def counter(name: str, threads: int, rounds: int) -> None:
    """`threads` threads each do `rounds` unprotected GET/SET increments under the lock."""
    r = RedisAt(int(os.environ["WATCHLOCK_TEST_PORT"]))
    client = watchlock.Client()
    errors = []

    def work() -> None:
        try:
            for _ in range(rounds):
                with client.lock(name, ttl=10, blocking_timeout=120):
                    v = int(r.command("GET", name + ":counter"))
                    r.command("SET", name + ":counter", str(v + 1))
        except BaseException as e:  # reported through the exit status
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    client.close()
    if errors:
        print(repr(errors[0]), file=sys.stderr)
        sys.exit(1)


def hold(name: str, ttl: str) -> None:
    """Takes the lock, says so, then waits to be killed."""
    client = watchlock.Client()
    lock = client.lock(name, ttl=float(ttl))
    lock.acquire()
    print("held", lock.fencing_token, flush=True)
    time.sleep(3600)


def exit_holding(name: str) -> None:
    """Holds locks (with on_lost callbacks, "interrupt", a blocked waiter
    thread and an asyncio waiter) and returns from the script: the
    interpreter must shut down cleanly and promptly, releasing them."""
    import asyncio
    client = watchlock.Client()
    locks = [client.lock(f"{name}:{i}", ttl=2, on_lost=lambda l, r: None) for i in range(3)]
    locks.append(client.lock(f"{name}:int", ttl=2, on_lost="interrupt"))
    for lock in locks:
        lock.acquire()
    # A daemon thread blocked forever in acquire, on a lock the test process
    # holds. (Not on one of ours: a waiter whose retry races with close() can
    # take the lock just after close released it, and the core then returns
    # ECLOSED leaving the key to run out by its lease - a core issue.)
    threading.Thread(target=lambda: client.lock(f"{name}:parent").acquire(), daemon=True).start()
    # the default client holds one too
    watchlock.lock(f"{name}:default", on_lost=lambda l, r: None).acquire()
    # an asyncio acquire still waiting in a worker thread when its loop ends
    # (for a lock the test process holds)
    async def waiter() -> None:
        try:
            await asyncio.wait_for(client.lock(f"{name}:parent").acquire_async(), 0.2)
        except asyncio.TimeoutError:
            pass
    asyncio.run(waiter())
    print("holding", flush=True)
    if len(sys.argv) > 3 and sys.argv[3] == "sys.exit":
        sys.exit(0)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "counter":
        counter(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "hold":
        hold(sys.argv[2], sys.argv[3])
    elif mode == "exit_holding":
        exit_holding(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")
