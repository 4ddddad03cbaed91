"""The read-write lock on a Redlock quorum from Python (issue 30.3):
client.rwlock(name) on watchlock.Client([url, ...]) over 3 and 5
independent redis-servers (tests/harness/quorum.py). A read share and a write
hold each need a majority of members; members are frozen with SIGSTOP and
every wait is on a condition with a deadline.
"""
from __future__ import annotations

import threading
import time

import pytest

import watchlock
from quorum import Quorum
from conftest import wait_for
from helpers import lock_key


def glob_escape(key: bytes) -> bytes:
    return b"".join(b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in key)

OPTS = "connect_timeout=300ms&command_timeout=400ms"
LEASE_MAX = 3  # the longest lease these tests use (s)


def urls_of(q: Quorum):
    return [u + ("&" if "?" in u else "?") + OPTS for u in q.urls]


@pytest.fixture(scope="module", params=[3, 5])
def quorum(request):
    with Quorum(request.param) as q:
        q.wait_settled(LEASE_MAX)
        yield q


@pytest.fixture
def qclient(quorum):
    c = watchlock.Client(urls_of(quorum))
    yield c
    c.close()


@pytest.fixture
def other(quorum):
    c = watchlock.Client(urls_of(quorum))
    yield c
    c.close()


def test_readers_share_writers_exclude(quorum, qclient, other, name):
    rw, rw2 = qclient.rwlock(name), other.rwlock(name)
    r1, r2 = rw.read_lock(ttl=2), rw2.read_lock(ttl=2)
    assert r1.acquire(blocking=False)
    assert r2.acquire(blocking=False)  # readers share
    assert r1.fencing_token > 0
    w = rw2.write_lock(ttl=2)
    assert w.acquire(blocking=False) is False  # no writer beside readers
    # refused at a majority held (a member slower than the decision may be
    # "unknown": seen on a loaded machine), never granted anywhere
    assert w.members.count("held") >= quorum.n // 2 + 1, w.members
    assert set(w.members) <= {"held", "unknown", "unreachable"}, w.members
    r1.release()
    assert w.acquire(blocking=False) is False  # r2 still reads
    r2.release()
    with w:
        token = w.fencing_token
        assert rw.read_lock(ttl=2).acquire(blocking=False) is False
        assert rw.write_lock(ttl=2).acquire(blocking=False) is False
    with rw.write_lock(ttl=2) as w2:
        assert w2.fencing_token > token  # tokens rise across writers


def test_writer_waits_for_the_release(quorum, qclient, other, name):
    r = qclient.rwlock(name).read_lock(ttl=3)
    assert r.acquire(blocking=False)
    w = other.rwlock(name).write_lock(ttl=3)
    got = []
    t = threading.Thread(target=lambda: got.append((w.acquire(timeout=30), time.monotonic())))
    t.start()
    channel = lock_key(name) + b":released"
    assert wait_for(lambda: all(quorum.member(i).command("PUBSUB", "NUMSUB", channel)[1] >= 1
                                for i in range(quorum.n)), timeout=10)
    assert not got  # still waiting while the reader holds
    released = time.monotonic()
    r.release()
    t.join(30)
    assert got and got[0][0] is True
    assert got[0][1] - released < 1.5  # woken by the release, not the reader's 3 s lease
    w.release()


def test_minority_frozen_still_works(quorum, qclient, name):
    frozen = list(range(quorum.n // 2 + 1, quorum.n))  # a minority
    with quorum.paused(*frozen):
        rw = qclient.rwlock(name)
        with rw.read_lock(ttl=2) as r:
            assert r.members.count("granted") >= quorum.n // 2 + 1
            assert rw.write_lock(ttl=2).acquire(blocking=False) is False
        with rw.write_lock(ttl=2):
            assert rw.read_lock(ttl=2).acquire(blocking=False) is False


def test_majority_frozen_refuses(quorum, qclient, name):
    frozen = list(range(quorum.n // 2 + 1))
    with quorum.paused(*frozen):
        for side in ("read_lock", "write_lock"):
            lock = getattr(qclient.rwlock(name), side)(ttl=2)
            t0 = time.monotonic()
            with pytest.raises(watchlock.Error) as ei:
                lock.acquire(timeout=3)
            assert time.monotonic() - t0 < 3
            assert "unreachable" in str(ei.value)
            assert not lock.owned()


def test_downgrade(quorum, qclient, other, name):
    w = qclient.rwlock(name).write_lock(ttl=2)
    r = other.rwlock(name).read_lock(ttl=2)
    assert w.acquire(blocking=False)
    assert r.acquire(blocking=False) is False
    w.downgrade()
    assert r.acquire(blocking=False)  # readers share with the downgraded hold
    assert other.rwlock(name).write_lock(ttl=2).acquire(blocking=False) is False
    w.release()
    r.release()
    assert w.acquire(blocking=False)  # the handle's next hold is a write hold again
    assert r.acquire(blocking=False) is False
    w.release()


def test_reader_loss_reported(quorum, qclient, name):
    lost = threading.Event()
    r = qclient.rwlock(name).read_lock(ttl=1.5, on_lost=lambda *a: lost.set())
    assert r.acquire(blocking=False)
    pattern = glob_escape(lock_key(name)) + b":q:h:*"
    holding = [i for i in range(quorum.n) if quorum.member(i).command("KEYS", pattern)]
    assert len(holding) >= quorum.n // 2 + 1
    with quorum.paused(*holding[:len(holding) - quorum.n // 2]):  # below a majority left
        assert lost.wait(10)
        assert r.lost
    with pytest.raises(watchlock.LockNotOwnedError):
        r.release()


def test_fair_and_semaphore_refused(qclient, name):
    with pytest.raises(watchlock.Error, match="quorum"):
        qclient.fair_lock(name).acquire(blocking=False)
    with pytest.raises(watchlock.Error, match="quorum"):
        qclient.semaphore(name, 2).acquire(blocking=False)
