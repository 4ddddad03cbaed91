"""fork(): a multiprocessing child (fork start method) never owns, renews or
releases its parent's locks."""
from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time

import watchlock
from helpers import RedisAt, lock_key


def _child(client, lock, name, url, queue):
    out = {}
    for what, call in (("release", lock.release), ("acquire", lock.acquire),
                       ("extend", lock.extend), ("lock", lambda: client.lock(name + ":x")),
                       ("inspect", lambda: client.inspect(name))):
        try:
            call()
            out[what] = "no error"
        except watchlock.ForkedError as e:
            out[what] = ("ForkedError", str(e))
    out["owned"] = lock.owned()
    try:
        lock.locked()  # asks the server through the parent's client
        out["locked"] = "no error"
    except watchlock.ForkedError:
        out["locked"] = "ForkedError"
    # The child may open its own client: the parent's lock is still taken.
    with watchlock.Client(url) as own:
        out["own_try"] = own.lock(name).acquire(blocking=False)
    # The default client is per process: recreated here.
    os.environ["WATCHLOCK_URL"] = url
    with watchlock.lock(name + ":child", blocking_timeout=10) as l:
        out["default_client_works"] = l.owned()
    # Dropping the inherited objects and closing the inherited client must
    # not release anything in the parent's name.
    client.close()
    del lock
    gc.collect()
    queue.put(out)


def test_forked_child_does_not_own_renew_or_release(redis_server, name):
    client = watchlock.Client(redis_server.url)
    lock = client.lock(name, ttl=1)
    lock.acquire()
    token = lock.fencing_token
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(client, lock, name, redis_server.url, queue))
    p.start()
    out = queue.get(timeout=60)
    p.join(timeout=60)
    assert p.exitcode == 0
    for what in ("release", "acquire", "extend", "lock", "inspect"):
        assert out[what][0] == "ForkedError", (what, out[what])
    assert "parent" in out["release"][1] and name in out["release"][1]
    assert out["owned"] is False  # an inherited handle reads as not held
    assert out["locked"] == "ForkedError"
    assert out["own_try"] is False
    assert out["default_client_works"] is True
    # The parent still holds it, its watchdog (not the child's) keeps it alive
    # for longer than the 1 s lease, and only the parent's token is in Redis.
    time.sleep(1.5)
    assert lock.owned() and not lock.lost and lock.fencing_token == token
    assert RedisAt(redis_server.port).command("PTTL", lock_key(name)) > 0
    lock.release()
    assert not client.inspect(name).held
    client.close()


def test_forked_child_cannot_renew_after_the_parent_dies_either(redis_server, name):
    """The child of a holder that exits does not keep the lock alive."""
    rfd, wfd = os.pipe()

    def child(url):
        c = watchlock.Client(url)
        l = c.lock(name, ttl=1)
        l.acquire()
        pid = os.fork()
        if pid == 0:  # grandchild: outlives its parent, holding the inherited objects
            time.sleep(60)
            os._exit(0)
        os.write(wfd, b"%d\n" % pid)
        os._exit(0)  # the holder dies without releasing

    # plain fork: a multiprocessing join would wait for the grandchild too
    pid = os.fork()
    if pid == 0:
        try:
            child(redis_server.url)
        finally:
            os._exit(1)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        grandchild = int(f.readline())
    assert os.waitpid(pid, 0)[1] == 0
    with watchlock.Client(redis_server.url) as c:
        # freed by its 1 s lease while the grandchild still lives: nobody renews it
        assert c.lock(name).acquire(timeout=3)
        try:
            os.kill(grandchild, 0)
            still_alive = True
        except ProcessLookupError:
            still_alive = False
        assert still_alive
    os.kill(grandchild, signal.SIGKILL)
