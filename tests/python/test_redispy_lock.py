"""redis-py's own lock tests (tests/test_lock.py of the redis sdist matching
the installed redis package) run against watchlock.redis_compat.Lock.

redis-py's code is not in this repository: the sdist is fetched with
`pip download` into build/redis-py/ at test time (reused when already
there). If redis is not installed or the download fails, this module fails
to import: the run fails, nothing is skipped.

A thin adapter: a shim for the `.conftest` module the file imports
(`_get_client`: a redis client on the harness's throwaway redis-server), an
`r` fixture (a redis.Redis on that server, flushed after each test), and a
subclass of redis-py's TestLock whose get_lock() passes our class as
`lock_class` instead of redis-py's. The tests listed in EXCLUDED read or
write redis-py's internals: its key layout (the lock's value stored at the
key `name` itself, read with r.get/ttl/pttl or overwritten with r.set/
pexpire) or its token (`lock.local.token`, `acquire(token=)`), or they patch
redis.lock's clock to count its polling sleeps; watchlock keeps its state
under its own keys (DESIGN.md) and waits for wake-ups instead of polling.
They run as strict xfails: if one starts passing, the run fails and the
list must be updated.
"""
from __future__ import annotations

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


sys.path.insert(0, str(fetch_upstream().parent))
upstream = importlib.import_module("redispy_tests.test_lock")

#: upstream test -> why it cannot pass against another lock implementation
_KEY = "redis-py's key layout: "
_STEAL = _KEY + "r.set(name, ...) overwrites redis-py's lock key to fake another owner; watchlock's keys are its own"
_TTL = _KEY + "reads the TTL of the key named like the lock (watchlock's lease is on its own key)"
_TOKEN = "redis-py's token: compares r.get(name) with lock.local.token"
_CLOCK = "patches redis.lock.mod_time to count redis-py's polling sleeps; watchlock waits for a wake-up, not by polling"
EXCLUDED = {
    "test_lock": _TOKEN + "; and r.ttl(name)",
    "test_lock_token": "acquire(token=...) sets redis-py's token (watchlock makes its own) and reads it with r.get",
    "test_lock_token_thread_local_false": "acquire(token=...) and r.get(name), as test_lock_token",
    "test_timeout": _TTL,
    "test_float_timeout": _TTL,
    "test_blocking_timeout": _CLOCK,
    "test_context_manager": _TOKEN,
    "test_context_manager_blocking_timeout": _CLOCK,
    "test_context_manager_raises_when_locked_not_acquired": _STEAL,
    "test_releasing_lock_no_longer_owned_raises_error": _STEAL + "; and lock.local.token",
    "test_extend_lock": _TTL,
    "test_extend_lock_replace_ttl": _TTL,
    "test_extend_lock_float": _TTL,
    "test_extending_lock_no_longer_owned_raises_error": _STEAL,
    "test_reacquire_lock": _TTL + " and r.pexpire(name) shortens it",
    "test_reacquiring_lock_no_longer_owned_raises_error": _STEAL,
    "test_context_manager_reacquiring_lock_no_longer_owned_raises_error": _STEAL,
    "test_lock_error_gives_correct_lock_name": _STEAL,
}
# Each excluded behaviour is tested against watchlock's own state in
# tests/python/test_redis_compat.py (the lease with Client.inspect, a stolen
# lock with Client.force_release).


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
    assert len(tests) >= 30  # the file really is redis-py's lock suite
