"""redis-py's own lock tests (tests/test_lock.py of the redis sdist matching
the installed redis package) run against watchlock.redis_compat.Lock.

redis-py's code is not in this repository: the sdist is fetched with
`pip download` into build/redis-py/ at test time (reused when already
there). If redis is not installed or the download fails, this module fails
to import: the run fails, nothing is skipped.

Only the lock class is swapped (issue 31 item 1): get_lock() passes
lock_class=watchlock.redis_compat.Lock (AsyncLock) instead of redis-py's own
class, and the fixtures of redis-py's conftest the files use (`r`,
`r_decoded`'s `_get_client`, `create_redis`) are redis clients on the
harness's throwaway redis-server, flushed after each test. The tests read
and write the lock's key by its name (r.get("foo"), r.set("foo", "a"),
r.pttl("foo")) as they do against redis-py: redis_compat uses redis-py's
keys. The tests in EXCLUDED run as strict xfails (if one starts passing,
the run fails and the list must be updated): the ones that patch redis-py's
own module clock.
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
    client = cls(host="127.0.0.1", port=server.port, **kwargs)

    def teardown():
        if flushdb:
            client.flushdb()
        client.close()
    request.addfinalizer(teardown)
    return client
'''

UPSTREAM_FILES = ("tests/test_lock.py", "tests/test_asyncio/test_lock.py")


def fetch_upstream() -> Path:
    """The redis sdist's lock tests, unpacked into WORK/redispy_tests."""
    pkg = WORK / "redispy_tests"
    if (pkg / "test_lock.py").is_file():
        # this file's, also over one an older version wrote; only when it differs, and by a
        # rename: another xdist worker may be importing it right now (a clean-clone run: one
        # worker rewrote it in place while another imported it, and read it truncated)
        conf = pkg / "conftest.py"
        if not conf.is_file() or conf.read_text() != SHIM:
            (pkg / "conftest.py.tmp").write_text(SHIM)
            os.replace(pkg / "conftest.py.tmp", conf)
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
_CLOCK = ("patches redis-py's module internals (redis.lock.mod_time / redis.asyncio.lock.asyncio) to count its "
          "polling sleeps; watchlock waits for the release's wake-up, not by polling every `sleep` seconds")
EXCLUDED = {
    "test_blocking_timeout": _CLOCK,
    "test_context_manager_blocking_timeout": _CLOCK,
}
# What they check otherwise is tested in tests/python/test_redis_compat_keys.py
# (the token stored under the name, acquire(token=...)).


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
        yield client
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
