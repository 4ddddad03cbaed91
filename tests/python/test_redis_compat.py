"""watchlock.redis_compat.Lock: redis-py's lock API over watchlock, on
redis-py's keys (the lock is the key named like it): the lease is that
key's PTTL, another owner takes over by deleting it."""
from __future__ import annotations

import threading
import time

import pytest
import redis
import redis.exceptions

import watchlock
from watchlock import redis_compat
from watchlock.redis_compat import Lock


@pytest.fixture
def r(redis_server):
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    yield client
    client.close()


def lease_left(r, name):
    return r.pttl(name) / 1000.0


def test_one_watchlock_client_per_redis_connection_pool(r, redis_server, name):
    lock = r.lock(name, lock_class=Lock)
    assert redis_compat.client_for(r) is lock.watchlock_lock.client
    assert redis_compat.client_for(redis.Redis(connection_pool=r.connection_pool)) is lock.watchlock_lock.client
    other = redis.Redis(host="127.0.0.1", port=redis_server.port)
    assert redis_compat.client_for(other) is not lock.watchlock_lock.client
    other.close()


def test_url_from_the_connection_kwargs():
    no_timeouts = dict(socket_timeout=None, socket_connect_timeout=None)
    assert redis_compat.url_for(redis.Redis(host="h", port=7000, db=3, username="u", password="p@ss",
                                            **no_timeouts)) == "redis://u:p%40ss@h:7000/3"
    assert redis_compat.url_for(redis.Redis(unix_socket_path="/tmp/r.sock", db=2, password="pw",
                                            **no_timeouts)) == "unix:///tmp/r.sock?db=2&password=pw"
    assert redis_compat.url_for(redis.Redis(host="h", socket_timeout=0.25, socket_connect_timeout=2)) == \
        "redis://h:6379?connect_timeout=2000ms&command_timeout=250ms"
    url = redis_compat.url_for(redis.Redis(host="h", ssl=True, ssl_ca_certs="/ca.pem", ssl_certfile="/c.pem",
                                           ssl_keyfile="/k.pem", socket_timeout=1.5, socket_connect_timeout=None))
    assert url == "rediss://h:6379?command_timeout=1500ms&cacert=/ca.pem&cert=/c.pem&key=/k.pem"


def test_unix_socket_client_locks(redis_server, name):
    r = redis.Redis(unix_socket_path=redis_server.unixsocket)
    with r.lock(name, lock_class=Lock, blocking_timeout=5) as lock:
        assert lock.owned() and lock.locked()
    assert not lock.locked()
    r.close()


def test_timeout_is_a_hard_cap_without_renewal(r, name):
    lock = r.lock(name, timeout=1, lock_class=Lock)
    assert lock.acquire(blocking=False)
    assert 0 < lease_left(r, name) <= 1
    assert lock.watchlock_lock.renewals == 0
    # the lease runs out: nobody renews it, redis-py's TTL semantics
    deadline = time.monotonic() + 30
    while lock.locked() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lock.locked()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.release()


def test_no_timeout_means_a_key_without_expiry_as_redis_py(r, name):
    lock = r.lock(name, lock_class=Lock)
    assert lock.acquire(blocking=False)
    assert r.pttl(name) == -1 and r.get(name) == lock.local.token
    other = r.lock(name, blocking_timeout=0.3, lock_class=Lock)
    assert not other.acquire()  # held, no lease to wait out
    lock.release()
    assert not r.exists(name)
    assert other.acquire(blocking=False)
    other.release()


def test_extend_adds_and_replace_ttl_replaces(r, name):
    lock = r.lock(name, timeout=10, lock_class=Lock)
    assert lock.acquire(blocking=False)
    assert lock.extend(10) is True
    assert 16 < lease_left(r, name) <= 20
    assert lock.extend(5, replace_ttl=True) is True
    assert 3 < lease_left(r, name) <= 5
    assert lock.reacquire() is True
    assert 8 < lease_left(r, name) <= 10
    lock.release()
    # the next hold gets `timeout` again, not the extended lease
    assert lock.acquire(blocking=False)
    assert 8 < lease_left(r, name) <= 10
    lock.release()


def test_lost_lock_raises_redis_lock_not_owned_error(r, name):
    for op in ("release", "extend", "reacquire", "exit"):
        lock = r.lock(name, timeout=10, lock_class=Lock)
        assert lock.acquire(blocking=False)
        assert r.delete(name) == 1  # the key freed, as for redis-py (and then another owner may take it)
        with pytest.raises(redis.exceptions.LockNotOwnedError) as info:
            if op == "release":
                lock.release()
            elif op == "extend":
                lock.extend(10)
            elif op == "reacquire":
                lock.reacquire()
            else:
                lock.__exit__(None, None, None)
        assert isinstance(info.value, watchlock.LockNotOwnedError) and info.value.lock_name == name
        if lock.owned():
            lock.local.token = None


def test_with_raises_lock_error_naming_the_lock_when_held_elsewhere(r, name):
    holder = r.lock(name, lock_class=Lock)
    assert holder.acquire(blocking=False)
    try:
        with pytest.raises(redis.exceptions.LockError) as info:
            with r.lock(name, blocking_timeout=0.1, lock_class=Lock):
                pass
        assert info.value.lock_name == name and isinstance(info.value, watchlock.LockError)
    finally:
        holder.release()


def test_raise_on_release_error_false_logs_instead(r, name, caplog):
    with r.lock(name, timeout=10, raise_on_release_error=False, lock_class=Lock):
        assert r.delete(name) == 1
    assert any("no longer owned" in rec.getMessage() for rec in caplog.records)


def test_bare_acquire_waits_blocking_timeout_then_gives_up(r, name):
    holder = r.lock(name, lock_class=Lock)
    assert holder.acquire(blocking=False)
    try:
        started = time.monotonic()
        assert r.lock(name, blocking_timeout=0.5, lock_class=Lock).acquire() is False
        assert time.monotonic() - started >= 0.45
        assert r.lock(name, blocking=False, lock_class=Lock).acquire() is False
    finally:
        holder.release()


def test_thread_local_token(r, name):
    lock = r.lock(name, lock_class=Lock)
    assert lock.acquire(blocking=False)
    errors = []

    def other():
        errors.append(lock.owned())
        try:
            lock.release()
        except redis.exceptions.LockError as e:
            errors.append(type(e).__name__)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors == [False, "LockError"]
    lock.release()
    shared = r.lock(name, thread_local=False, lock_class=Lock)
    assert shared.acquire(blocking=False)
    t = threading.Thread(target=shared.release)  # redis-py: the token is shared by every thread
    t.start()
    t.join()
    assert not shared.locked()


def test_a_held_lock_is_not_reentrant_like_redis_pys(r, name):
    lock = r.lock(name, lock_class=Lock)
    assert lock.acquire(blocking=False)
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(blocking_timeout=0.2) is False
    lock.release()
    assert not lock.locked()


def test_fencing_token_increases(r, name):
    lock = r.lock(name, lock_class=Lock)
    tokens = []
    for _ in range(2):
        assert lock.acquire(blocking=False)
        tokens.append(lock.fencing_token)
        lock.release()
    assert 0 < tokens[0] < tokens[1]


def test_token_argument_is_checked(r, name):
    for bad, words in (("a.b", "must not contain '.'"), ("x" * 33, "longer than 32 bytes"), ("", "empty")):
        with pytest.raises(watchlock.InvalidArgument, match=words):
            r.lock(name, lock_class=Lock).acquire(token=bad)
    assert not r.exists(name)


def test_tls_redis_client_locks_over_tls(tmp_path):
    from redis_server import RedisServer
    from tls import make_certs
    certs = make_certs(str(tmp_path))
    with RedisServer(tls=certs) as srv:
        host = srv.url.split("://", 1)[1].split(":", 1)[0]
        r = redis.Redis(host=host, port=srv.port, ssl=True, ssl_ca_certs=certs.ca, ssl_certfile=certs.client_cert,
                        ssl_keyfile=certs.client_key)
        assert r.ping()  # redis-py itself connects with these settings
        assert redis_compat.url_for(r).startswith(f"rediss://{host}:{srv.port}?")
        with r.lock("tls-job", timeout=10, blocking_timeout=5, lock_class=Lock) as lock:
            assert lock.owned() and lock.locked() and lock.fencing_token > 0
        assert not lock.locked()
        redis_compat.client_for(r).close()
        r.close()


def test_forked_child_gets_its_own_client(r, name):
    import os
    parent = redis_compat.client_for(r)
    pid = os.fork()
    if pid == 0:  # the child: a new watchlock Client for the same pool, and it works
        code = 1
        try:
            child = redis_compat.client_for(r)
            with r.lock(name, blocking_timeout=5, lock_class=Lock):
                code = 0 if child is not parent else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
