"""The multi-lock on a Redlock quorum (issue 30.3), from Python: on 3 and 5
independent redis-servers (tests/harness/quorum.py), client.multi_lock([...])
is held when a majority of members granted every name; it excludes another
multi-lock sharing a name and a plain lock on one of its names, survives a
frozen minority, is refused by a frozen majority with nothing left, and its
release gives back on every member. Also the owner record of a labelled
quorum hold (Client.inspect shows it). Members are frozen with SIGSTOP;
every wait is on a condition with a deadline.
"""
from __future__ import annotations

import os

import pytest

import watchlock
from helpers import lock_key
from quorum import Quorum
from conftest import wait_for

OPTS = "?connect_timeout=300ms&command_timeout=400ms"
LEASE_MAX = 3  # the longest lease used here (s): members up longer than it count at once


def urls_of(q: Quorum):
    return [u + OPTS for u in q.urls]


@pytest.fixture(scope="module", params=[3, 5], ids=["3-members", "5-members"])
def quorum(request):
    with Quorum(request.param) as q:
        q.wait_settled(LEASE_MAX)
        yield q


@pytest.fixture
def qclient(quorum):
    c = watchlock.Client(urls_of(quorum))
    yield c
    c.close()


def majority(q: Quorum) -> int:
    return q.n // 2 + 1


def test_multi_lock_held_on_a_majority_and_released_everywhere(quorum, qclient, name):
    names = [f"{name}:a", f"{name}:b", f"{name}:c"]
    m = qclient.multi_lock(names, ttl=2)
    assert m.acquire(timeout=5)
    for n in names:
        assert quorum.holders(lock_key(n)) >= majority(quorum)
    tokens = m.fencing_tokens
    assert len(tokens) == 3 and all(t > 0 for t in tokens)
    assert m.fencing_token == tokens[0]
    m.extend(3)
    m.release()
    for n in names:
        assert wait_for(lambda n=n: quorum.holders(lock_key(n)) == 0, timeout=5)
    # the next holder of a name gets a higher token
    plain = qclient.lock(names[1], ttl=2)
    with plain:
        assert plain.fencing_token > tokens[1]


def test_excludes_a_multi_lock_and_a_plain_lock_sharing_a_name(quorum, qclient, name):
    a, b, c, d = (f"{name}:{x}" for x in "abcd")
    other = watchlock.Client(urls_of(quorum))
    try:
        m1 = qclient.multi_lock([a, b, c], ttl=2)
        m2 = other.multi_lock([d, c], ttl=2)
        plain = other.lock(b, ttl=2)
        with m1:
            assert not m2.acquire(blocking=False)
            assert quorum.holders(lock_key(d)) == 0  # what it got was given back
            assert not plain.acquire(blocking=False)
        assert m2.acquire(timeout=5)  # released: the names are free again
        assert plain.acquire(timeout=5)
        plain.release()
        m2.release()
    finally:
        other.close()


def test_minority_frozen_still_acquires(quorum, qclient, name):
    names = [f"{name}:a", f"{name}:b"]
    frozen = list(range(majority(quorum), quorum.n))
    with quorum.paused(*frozen):
        m = qclient.multi_lock(names, ttl=1.5)
        with m:
            for n in names:
                assert quorum.holders(lock_key(n), members=range(majority(quorum))) == majority(quorum)
            assert not m.lost
        for n in names:
            assert quorum.holders(lock_key(n), members=range(majority(quorum))) == 0


def test_majority_frozen_refuses_and_holds_nothing(quorum, qclient, name):
    names = [f"{name}:a", f"{name}:b"]
    live = majority(quorum) - 1
    with quorum.paused(*range(live, quorum.n)):
        m = qclient.multi_lock(names, ttl=1.5)
        with pytest.raises(watchlock.Error):
            m.acquire(blocking=False)
        assert not m.owned()
        for n in names:
            assert wait_for(lambda n=n: quorum.holders(lock_key(n), members=range(live)) == 0, timeout=5)
    for n in names:
        assert wait_for(lambda n=n: quorum.holders(lock_key(n)) == 0, timeout=5)


def test_labelled_quorum_hold_records_its_owner(quorum, qclient, name):
    lock = qclient.lock(name, ttl=2, label="nightly-report")
    with lock:
        info = qclient.inspect(name)
        assert info.held
        assert info.owner is not None
        assert info.owner.label == "nightly-report" and info.owner.pid == os.getpid()
    assert qclient.inspect(name).owner is None
