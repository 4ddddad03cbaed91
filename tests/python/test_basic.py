"""Client and Lock basics: the DESIGN.md Python contract, names, options, errors."""
from __future__ import annotations

import builtins
import datetime
import os

import pytest

import watchlock
from helpers import RedisAt, lock_key
from watchlock import exceptions as wexc


def test_locked_means_held_by_anyone_owned_means_by_this_handle(client, name):
    lock, other = client.lock(name), client.lock(name)
    assert not lock.locked() and not lock.owned()
    assert lock.acquire() is True
    assert lock.locked() and lock.owned()
    assert other.locked() and not other.owned()  # as redis-py's and threading.Lock's locked()
    assert client.inspect(name).held
    lock.release()
    assert not lock.locked() and not lock.owned() and not other.locked()
    assert not client.inspect(name).held


def test_two_handles_exclude_each_other_in_one_thread(client, name):
    a, b = client.lock(name), client.lock(name)
    assert a.acquire(blocking=False)
    assert b.acquire(blocking=False) is False
    assert b.acquire(timeout=0.2) is False
    a.release()
    assert b.acquire(blocking=False)
    b.release()


def test_two_clients_exclude_each_other(redis_url, client, name):
    with watchlock.Client(redis_url) as other:
        with client.lock(name):
            assert other.lock(name).acquire(blocking=False) is False
        assert other.lock(name).acquire(blocking=False) is True


def test_reentrant_for_the_owner(client, name):
    lock = client.lock(name)
    assert lock.acquire() and lock.acquire()
    assert lock.hold_count == 2
    lock.release()
    assert lock.locked() and client.inspect(name).held
    lock.release()
    assert not lock.locked() and not client.inspect(name).held
    with lock:
        with lock:
            assert lock.hold_count == 2
    assert not client.inspect(name).held


def test_release_when_not_held_names_the_lock(client, name):
    lock = client.lock(name)
    with pytest.raises(watchlock.LockNotOwnedError, match=name) as info:
        lock.release()
    assert info.value.lock_name == name
    assert not isinstance(info.value, watchlock.LockLostError)


def test_threading_lock_argument_conventions(client, name):
    lock = client.lock(name)
    with pytest.raises(ValueError):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-2)
    with pytest.raises(watchlock.InvalidArgument, match="soon"):
        lock.acquire(timeout="soon")
    with pytest.raises(TypeError):
        lock.acquire(timeout=object())  # type: ignore[arg-type]
    assert lock.acquire(blocking=False) is True
    lock.release()
    assert lock.acquire(timeout=0) is True  # timeout 0 = try once
    lock.release()
    for wait in ("500ms", datetime.timedelta(seconds=0.5), 0.5, None):
        assert lock.acquire(timeout=wait) is True
        lock.release()


def test_fencing_tokens_strictly_increase(redis_url, client, name):
    seen = []
    with watchlock.Client(redis_url) as other:
        for c in (client, other, client, other):
            lock = c.lock(name)
            assert lock.fencing_token == 0
            with lock:
                seen.append(lock.fencing_token)
            assert lock.fencing_token == seen[-1]  # kept after release
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert client.inspect(name).fencing_token == seen[-1]


def test_bytes_and_str_names_are_the_same_lock_and_binary_names_work(client, name):
    with client.lock(name):
        assert client.lock(name.encode()).acquire(blocking=False) is False
    for weird in (b"a\x00b", b"x}:fence", "{braces}", "caf\u00e9", b"\xff\xfe"):
        lock = client.lock(weird)
        assert lock.name == weird
        with lock:
            assert client.inspect(weird).held
        assert not client.inspect(weird).held
    # injective: "x}:fence" must not collide with the fence key of "x"
    with client.lock("x"):
        assert client.lock(b"x}:fence").acquire(blocking=False)
        client.lock(b"x}:fence")  # its own handle, freed
    assert client.inspect("x").held is False


def test_bad_names_and_options(client, name):
    with pytest.raises(watchlock.InvalidArgument, match="empty"):
        client.lock("")
    with pytest.raises(ValueError):
        client.lock(b"")
    with pytest.raises(TypeError):
        client.lock(42)  # type: ignore[arg-type]
    with pytest.raises(watchlock.InvalidArgument):
        client.lock(b"x" * (64 * 1024 + 1))
    for bad in ({"ttl": 0}, {"ttl": -1}, {"ttl": float("nan")}, {"ttl": float("inf")},
                {"ttl": 31 * 24 * 3600}, {"ttl": "10x"}, {"ttl": "1e3s"}, {"ttl": "10s\0junk"},
                {"ttl": datetime.timedelta(seconds=-1)}, {"max_hold": -1}, {"renew_interval": 5, "ttl": 5},
                {"renew_interval": "5s", "ttl": "5000ms"}, {"max_renewals": -1}, {"blocking_timeout": -3},
                {"blocking_timeout": "soon"}):
        with pytest.raises(watchlock.InvalidArgument, match=name):
            client.lock(name, **bad)
    with pytest.raises(TypeError):
        client.lock(name, on_lost="explode")
    with pytest.raises(TypeError):
        client.lock(name, ttl=[10])
    with pytest.raises(TypeError):
        client.lock(name, bogus=1)


def test_extend_and_remaining(client, name):
    lock = client.lock(name, ttl=5, auto_renew=False)
    assert lock.remaining == 0.0
    with pytest.raises(watchlock.LockNotOwnedError, match=name):
        lock.extend()
    with lock:
        assert 0 < lock.remaining <= 5
        lock.extend(60)
        assert 5 < lock.remaining <= 60
        assert lock.ttl == 60
        assert client.inspect(name).remaining > 5
        lock.extend()
        assert 5 < lock.remaining <= 60
    assert lock.remaining == 0.0


def test_with_timeout_raises_lock_timeout(client, name):
    holder = client.lock(name)
    holder.acquire()
    try:
        with pytest.raises(watchlock.LockTimeout, match=name) as info:
            with client.lock(name, blocking_timeout=0.3):
                pytest.fail("entered a held lock")
        assert info.value.lock_name == name
        assert isinstance(info.value, watchlock.Error)
        with pytest.raises(watchlock.LockTimeout):
            with client.lock(name, blocking_timeout=0):  # 0 = try once
                pytest.fail("entered a held lock")
    finally:
        holder.release()
    with client.lock(name, blocking_timeout="300ms") as lock:
        assert lock.owned()


def test_with_releases_when_the_block_raises(client, name):
    with pytest.raises(KeyError):
        with client.lock(name):
            raise KeyError("boom")
    assert not client.inspect(name).held


def test_client_url_argument_env_and_default(redis_server, monkeypatch, name):
    monkeypatch.setenv("WATCHLOCK_URL", redis_server.url)
    with watchlock.Client() as c:
        assert c.url == redis_server.url
        with c.lock(name):
            assert RedisAt(redis_server.port).command("EXISTS", lock_key(name)) == 1
    monkeypatch.setenv("WATCHLOCK_URL", "redis://127.0.0.1:1")
    with pytest.raises(watchlock.ConnectionError, match="127.0.0.1:1"):
        watchlock.Client()
    with watchlock.Client(redis_server.url) as c:  # the argument wins over the environment
        assert c.url == redis_server.url
    monkeypatch.delenv("WATCHLOCK_URL")
    try:
        c = watchlock.Client()
    except watchlock.ConnectionError as e:
        assert "127.0.0.1:6379" in str(e)
    else:
        assert c.url == "redis://127.0.0.1:6379"
        c.close()


def test_client_close_and_context_manager(redis_url, name):
    with watchlock.Client(redis_url) as c:
        lock = c.lock(name)
        lock.acquire()
        assert c.inspect(name).held
    assert c.closed
    with watchlock.Client(redis_url) as probe:
        assert not probe.inspect(name).held  # close released it
    with pytest.raises(watchlock.ClientClosedError):
        lock.acquire()
    with pytest.raises(watchlock.ClientClosedError):
        c.lock(name)
    c.close()  # idempotent


def test_unix_socket_url(redis_server, name):
    with watchlock.Client("unix://" + redis_server.unixsocket) as c:
        with c.lock(name):
            assert c.inspect(name).held


def test_password_is_hidden_and_auth_errors(name):
    from redis_server import RedisServer
    with RedisServer(password="s3cret") as srv:
        with watchlock.Client(srv.url) as c:
            with c.lock(name):
                assert c.inspect(name).held
            assert "s3cret" not in c.url and "s3cret" not in repr(c)
        bad = srv.url.replace("s3cret", "wrong")
        with pytest.raises(watchlock.AuthenticationError) as info:
            watchlock.Client(bad)
        assert "wrong" not in str(info.value)
        assert isinstance(info.value, watchlock.ConnectionError)
        assert isinstance(info.value, builtins.ConnectionError)


def test_every_status_code_maps_to_an_exception(redis_server, client, name):
    # EINVAL: malformed URL
    with pytest.raises(watchlock.InvalidArgument) as info:
        watchlock.Client("http://nope")
    assert isinstance(info.value, ValueError) and info.value.status == 1
    # ECONN
    with pytest.raises(watchlock.ConnectionError) as info:
        watchlock.Client("redis://127.0.0.1:1?connect_timeout=1")
    assert isinstance(info.value, builtins.ConnectionError) and info.value.status == 5
    # ESERVER: the key holds a non-string value
    r = RedisAt(redis_server.port)
    r.command("RPUSH", lock_key(name), "x")
    try:
        with pytest.raises(watchlock.ServerError, match=name) as info:
            client.lock(name).acquire()
        assert info.value.status == 7
    finally:
        r.command("DEL", lock_key(name))
    # ETIMEDOUT / ENOTOWNER are LockTimeout / LockNotOwnedError (tested above);
    # ECLOSED / EFORKED: test_client_close_and_context_manager, test_fork.py.
    expected = {1: watchlock.InvalidArgument, 2: watchlock.OutOfMemoryError, 3: watchlock.LockTimeout,
                4: watchlock.LockNotOwnedError, 5: watchlock.ConnectionError,
                6: watchlock.AuthenticationError, 7: watchlock.ServerError, 8: watchlock.ClientClosedError,
                9: watchlock.ForkedError, 10: watchlock.InternalError}
    for status, cls in expected.items():
        assert wexc.error_class(status) is cls
        assert issubclass(cls, watchlock.Error)
        assert watchlock._native.strerror(status) != watchlock._native.strerror(999)
    assert issubclass(watchlock.OutOfMemoryError, MemoryError)
    assert issubclass(watchlock.LockLostError, watchlock.LockNotOwnedError)


def test_admin_force_release_and_inspect(redis_url, client, name):
    info = client.inspect(name)
    assert info == watchlock.LockInfo(False, 0.0, 0)
    lock = client.lock(name, ttl=10)
    lock.acquire()
    info = client.inspect(name)
    assert info.held and 0 < info.remaining <= 10 and info.fencing_token == lock.fencing_token
    with watchlock.Client(redis_url) as admin:
        assert admin.force_release(name) is True
        assert admin.force_release(name) is False
    with pytest.raises(watchlock.LockLostError):
        lock.extend()
    assert lock.lost


def test_stats_and_repr(client, name):
    lock = client.lock(name)
    assert "unlocked" in repr(lock) and name in repr(lock)
    with lock:
        assert "held" in repr(lock)
        assert client.stats()["held_locks"] >= 1
    assert set(client.stats()) == {"held_locks", "renew_rounds", "renew_roundtrips", "renewals",
                                   "watchdog_cpu_us", "subscribe_denied", "acquires", "contended_acquires",
                                   "acquire_timeouts", "release_retries", "lost", "quorum", "wait_time",
                                   "hold_time", "renew_rtt"}
    assert set(client.stats()["quorum"].values()) == {0}  # a plain client


def test_version():
    assert watchlock.__version__ == watchlock._native.WATCHLOCK_VERSION_STRING
    assert watchlock._native.version() == watchlock._native.WATCHLOCK_VERSION_NUMBER


def test_lock_and_client_cannot_be_pickled(client, name):
    import pickle
    with pytest.raises(TypeError):
        pickle.dumps(client.lock(name))
    with pytest.raises(TypeError):
        pickle.dumps(client)


def test_import_from_outside_the_tree(tmp_path, redis_url, name):
    import subprocess
    import sys
    code = ("import watchlock, sys\n"
            "with watchlock.Client() as c, c.lock(sys.argv[1]) as l:\n"
            "    print(watchlock.__file__, l.fencing_token > 0)\n")
    env = dict(os.environ, WATCHLOCK_URL=redis_url)
    out = subprocess.run([sys.executable, "-c", code, name], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path, ok = out.stdout.split()
    assert ok == "True" and os.path.exists(path)
