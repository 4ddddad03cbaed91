"""Issue 29 items 9 and 11 where Python users meet them, against a real
redis-server, with real processes:
  9  one WriteLock object reused after a downgrade takes the write side
     again (the side belongs to the hold, not the handle);
 11  a process that exits holding a fair lock and a semaphore (Python's
     exit handler closes its clients) releases them through the queue's
     script: the waiting processes are granted inside that release, not
     when the 30 s leases run out."""
from __future__ import annotations

import os
import subprocess
import sys

from kinds_helpers import HERE, expect_line, stop, wait_queue, worker


def test_write_lock_reused_after_downgrade_writes_again(client, name):
    rw = client.rwlock(name)
    w, r = rw.write_lock(ttl=10), rw.read_lock(ttl=10)
    last = 0
    for _ in range(3):
        assert w.acquire(blocking=False)
        assert r.acquire(blocking=False) is False  # no reader beside a writer
        assert client.name_info(name).writer
        assert w.fencing_token > last  # a writer's token rises
        last = w.fencing_token
        assert w.kind == "write"
        w.downgrade()
        assert w.kind == "read" and not client.name_info(name).writer
        assert r.acquire(blocking=False)  # readers share
        r.release()
        w.release()
        assert client.name_info(name).holders == 0
    assert w.kind == "write"  # not held: the handle's side


HOLDER = """
import sys, watchlock
client = watchlock.Client()
f = client.fair_lock(sys.argv[1], ttl=30)
s = client.semaphore(sys.argv[2], permits=2, ttl=30)
assert f.acquire(blocking=False) and s.acquire(blocking=False, permits=2)
print("held", flush=True)
sys.stdin.read()
# returns holding both: the exit handler closes the client
"""


def test_exit_hands_queued_holds_on_at_once(client, name, redis_server):
    fname, sname = name + "-f", name + "-s"
    env = dict(os.environ, WATCHLOCK_URL=redis_server.url)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH", "")) if p)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, fname, sname], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fw = sw = None
    try:
        expect_line(holder, "held")  # holds both before the waiters start
        fw = worker(redis_server, "wait", "fair", fname, ttl=5)
        sw = worker(redis_server, "wait", "sem:2:1", sname, ttl=5)
        expect_line(fw, "waiting")
        expect_line(sw, "waiting")
        wait_queue(client, fname, 1)
        wait_queue(client, sname, 1)
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
        # granted inside the exit handler's releases
        assert client.name_info(fname).queue_length == 0
        assert client.name_info(sname).queue_length == 0
        assert client.name_info(sname).in_use == 1
        expect_line(fw, "got")
        expect_line(sw, "got")
    finally:
        stop(*(p for p in (holder, fw, sw) if p is not None))
