"""Shared pytest fixtures: real redis-servers on free loopback ports."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "harness"))
from redis_server import RedisServer  # noqa: E402


@pytest.fixture(scope="session")
def redis_server():
    """One server for the whole session; tests use distinct lock names."""
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def fresh_redis():
    """A server of the test's own, for tests that restart or reconfigure it."""
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def redis_url(redis_server):
    return redis_server.url
