"""Shared by test_fair.py, test_semaphore.py and test_rwlock.py: worker
processes (kind_workers.py) and waits on the server's view of a name."""
from __future__ import annotations

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(redis_server, mode: str, kind: str, name: str, ttl: float = 2.0) -> subprocess.Popen:
    env = dict(os.environ, WATCHLOCK_URL=redis_server.url)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen([sys.executable, os.path.join(HERE, "kind_workers.py"), mode, kind, name, str(ttl)],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def expect_line(p: subprocess.Popen, prefix: str) -> str:
    line = p.stdout.readline()
    assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}; stderr: {p.stderr.read() if p.poll() is not None else ''}"
    return line


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()


def wait_queue(client, name, length: int, timeout: float = 30.0) -> None:
    """Waits until the name's queue has `length` waiters (a condition, not a sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        got = client.name_info(name).queue_length
        if got == length:
            return
        assert time.monotonic() < deadline, f"queue of {name!r} has {got} waiters, not {length}"
        time.sleep(0.01)
