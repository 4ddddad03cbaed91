"""redis-py's own lock tests (tests/test_lock.py of the redis sdist matching
the installed redis package) run against watchlock.redis_compat.Lock.

redis-py's code is not in this repository: the sdist is fetched with
`pip download` into build/redis-py/ at test time (reused when already
there). If redis is not installed or the download fails, this module fails
to import: the run fails, nothing is skipped.

A thin adapter, the same for tests/test_lock.py (threads) and
tests/test_asyncio/test_lock.py (redis.asyncio):
- the fixtures of redis-py's conftest the files use (`r`, `r_decoded`'s
  `_get_client`, `create_redis`): redis clients on the harness's throwaway
  redis-server, flushed after each test;
- names: redis-py keeps a lock's token at the key named like the lock,
  watchlock at watchlock:{name}; LockKeys maps the tests' key commands on a
  lock's name (get, set, ttl, pttl, pexpire) to that key, so r.pttl("foo")
  reads lock foo's lease and r.set("foo", "a") overwrites its holder's token;
- get_lock() passes lock_class=watchlock.redis_compat.Lock (AsyncLock)
  instead of redis-py's own class.
The tests in EXCLUDED read redis-py's token storage or patch its polling
clock; they run as strict xfails: if one starts passing, the run fails and
the list must be updated.
"""
from __future__ import annotations

import fcntl
import importlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import redis  # installed by scripts/test: an ImportError here fails the run

from watchlock import redis_compat

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("WATCHLOCK_REDISPY_DIR") or ROOT / "build" / "redis-py") / redis.__version__

SHIM = '''"""Stands in for redis-py's tests/conftest.py (written by watchlock's tests/python/test_redispy_lock.py)."""
def _get_client(cls, request, single_connection_client=True, flushdb=True, from_url=None, **kwargs):
    server = request.getfixturevalue("redis_server")
    client = request.getfixturevalue("lock_keys")(cls(host="127.0.0.1", port=server.port, **kwargs))

    def teardown():
        if flushdb:
            client.flushdb()
        client.close()
    request.addfinalizer(teardown)
    return client
'''

UPSTREAM_FILES = ("tests/test_lock.py", "tests/test_asyncio/test_lock.py")


#: the key commands redis-py's lock tests run on a lock's key
LOCK_KEY_COMMANDS = frozenset({"get", "set", "ttl", "pttl", "pexpire", "expire", "delete", "exists"})


def lock_key(name):
    """watchlock's key of lock `name` (core/src/proto/keys.c, short names)."""
    raw = name.encode() if isinstance(name, str) else bytes(name)
    escaped = raw.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")
    return b"watchlock:{" + escaped + b"}"


class LockKeys:
    """The name half of the adapter: a redis client (sync or asyncio) whose
    key commands (LOCK_KEY_COMMANDS) address the lock key of the name they
    are given. redis-py keeps a lock's token at the key named like the lock;
    watchlock at watchlock:{name} (DESIGN.md): r.pttl("foo") in a redis-py
    test reads the lease of lock "foo", r.set("foo", "a") overwrites its
    holder's token, on the same server. Every other call goes to the client
    as it is (r.lock(..., lock_class=...) makes the lock with the client itself)."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, attr):
        value = getattr(self._client, attr)
        if attr in LOCK_KEY_COMMANDS:
            return lambda key, *args, **kwargs: value(lock_key(key), *args, **kwargs)
        return value


def fetch_upstream() -> Path:
    """The redis sdist's lock tests, unpacked into WORK/redispy_tests."""
    pkg = WORK / "redispy_tests"
    if (pkg / "test_lock.py").is_file():
        return pkg
    WORK.mkdir(parents=True, exist_ok=True)
    sdists = list(WORK.glob("redis-*.tar.gz"))
    if not sdists:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                               f"redis=={redis.__version__}", "-d", str(WORK)],
                              capture_output=True, text=True, timeout=600)
        sdists = list(WORK.glob("redis-*.tar.gz"))
        if proc.returncode != 0 or not sdists:
            raise RuntimeError(f"cannot download the redis {redis.__version__} sdist (its lock tests are part of "
                               f"this suite):\n{proc.stdout}\n{proc.stderr}")
    tmp = WORK / "redispy_tests.tmp"
    tmp.mkdir(exist_ok=True)
    with tarfile.open(sdists[0]) as tar:
        top = tar.getnames()[0].split("/")[0]
        for rel in UPSTREAM_FILES:
            member = tar.extractfile(f"{top}/{rel}")
            if member is None:
                raise RuntimeError(f"the redis sdist has no {rel}")
            name = "test_lock.py" if rel == UPSTREAM_FILES[0] else "test_asyncio_lock.py"
            (tmp / name).write_bytes(member.read())
    (tmp / "__init__.py").write_text("")
    (tmp / "conftest.py").write_text(SHIM)
    tmp.rename(pkg)
    return pkg


WORK.mkdir(parents=True, exist_ok=True)
with open(WORK / "fetch.lock", "w") as _fetch_lock:  # pytest-xdist's workers all collect this file at once
    fcntl.flock(_fetch_lock, fcntl.LOCK_EX)
    sys.path.insert(0, str(fetch_upstream().parent))
upstream = importlib.import_module("redispy_tests.test_lock")

#: upstream test -> why it cannot pass against another lock implementation
_TOKEN = ("reads redis-py's token storage: compares the key's value with lock.local.token (watchlock's token "
          "is the core's, not readable from Python; lock.local.token holds the fencing token)")
_CLOCK = ("patches redis-py's module internals (redis.lock.mod_time / redis.asyncio.lock.asyncio) to count its "
          "polling sleeps; watchlock waits for the release's wake-up, not by polling every `sleep` seconds")
EXCLUDED = {
    "test_lock": _TOKEN + "; also expects no TTL for timeout=None, where watchlock keeps a renewed lease",
    "test_lock_token": "acquire(token=...) stores a caller's token in redis-py's storage: watchlock makes its own "
                       "(TypeError naming fencing_token)",
    "test_lock_token_thread_local_false": "acquire(token=...), as test_lock_token",
    "test_blocking_timeout": _CLOCK,
    "test_context_manager": _TOKEN,
    "test_context_manager_blocking_timeout": _CLOCK,
}
# What they check otherwise is tested in tests/python/test_redis_compat.py
# (the fencing token as local.token, the wait of blocking_timeout).


@pytest.fixture
def lock_keys():
    return LockKeys


@pytest.fixture
def r(request):
    return upstream._get_client(redis.Redis, request=request)


def _excluded(cls):
    for test, why in EXCLUDED.items():
        setattr(cls, test, pytest.mark.xfail(reason=why, strict=True)(getattr(upstream.TestLock, test)))
    return cls


@_excluded
class TestRedisPyLock(upstream.TestLock):
    """redis-py's TestLock with lock_class=watchlock.redis_compat.Lock."""

    def get_lock(self, redis_client, *args, **kwargs):
        kwargs["lock_class"] = redis_compat.Lock
        return redis_client.lock(*args, **kwargs)


class TestRedisPyLockClassSelection(upstream.TestLockClassSelection):
    pass


def test_every_upstream_test_runs_or_is_excluded_with_a_reason():
    tests = {n for n in dir(upstream.TestLock) if n.startswith("test_")}
    assert set(EXCLUDED) <= tests, set(EXCLUDED) - tests
    assert len(tests) >= 25  # the file really is redis-py's lock suite


# ---- tests/test_asyncio/test_lock.py: redis.asyncio with lock_class=AsyncLock ----

import pytest_asyncio  # noqa: E402  installed by scripts/test, as redis

import redis.asyncio  # noqa: E402

upstream_async = importlib.import_module("redispy_tests.test_asyncio_lock")

#: the same reasons as the threaded file's, with `asyncio.sleep` as the patched clock
EXCLUDED_ASYNC = {**{test: why for test, why in EXCLUDED.items() if hasattr(upstream_async.TestLock, test)}}


class _AsyncServer:
    """The fixtures redis-py's tests/test_asyncio/conftest.py gives: `r`
    and `create_redis`, redis.asyncio clients on the harness's server."""

    @pytest_asyncio.fixture
    async def create_redis(self, redis_server):
        made = []

        async def factory(cls=redis.asyncio.Redis, flushdb=True, **kwargs):
            client = cls(host="127.0.0.1", port=redis_server.port, **kwargs)
            made.append(client)
            return client
        yield factory
        for client in made:
            await client.aclose()

    @pytest_asyncio.fixture
    async def r(self, create_redis):
        client = await create_redis()
        yield LockKeys(client)
        await client.flushdb()


def _excluded_async(cls):
    for test, why in EXCLUDED_ASYNC.items():
        setattr(cls, test, pytest.mark.xfail(reason=why, strict=True)(getattr(upstream_async.TestLock, test)))
    return cls


@pytest.mark.asyncio
@_excluded_async
class TestRedisPyAsyncLock(_AsyncServer, upstream_async.TestLock):
    """redis-py's asyncio TestLock with lock_class=watchlock.redis_compat.AsyncLock."""

    def get_lock(self, redis_client, *args, **kwargs):
        kwargs["lock_class"] = redis_compat.AsyncLock
        return redis_client.lock(*args, **kwargs)


class TestRedisPyAsyncLockClassSelection(_AsyncServer, upstream_async.TestLockClassSelection):
    pass


def test_every_upstream_async_test_runs_or_is_excluded_with_a_reason():
    tests = {n for n in dir(upstream_async.TestLock) if n.startswith("test_")}
    assert set(EXCLUDED_ASYNC) <= tests
    assert len(tests) >= 25
