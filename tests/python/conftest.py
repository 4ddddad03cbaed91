"""Fixtures for the Python package's tests (real redis-servers come from
tests/conftest.py: redis_server, fresh_redis, redis_url)."""
from __future__ import annotations

import os
import sys
import time
import uuid

import pytest

import watchlock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "harness"))
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def client(redis_url):
    c = watchlock.Client(redis_url)
    yield c
    c.close()


@pytest.fixture
def name(request):
    """A lock name of the test's own (tests share one server)."""
    return f"pytest:{request.node.name}:{uuid.uuid4().hex[:8]}"


from waiting import wait_for  # noqa: E402,F401 - the one helper (tests/harness/waiting.py); tests import it from here


def pytest_configure(config):
    # a mark of redis-py's tests/test_asyncio/test_lock.py, run by test_redispy_lock.py
    config.addinivalue_line("markers", "onlynoncluster: redis-py's mark (its cluster-less tests)")
