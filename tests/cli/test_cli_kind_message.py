"""The error of a plain `watchlock run NAME` on a name in use as another
queued kind names the kind the name really is (issue 29): the plain run
tries the write side of a read-write lock as a fallback, and that try's
error ("this handle is a read-write lock") must not replace the first."""
from __future__ import annotations

import pytest

from test_cli import EX_PROTOCOL, Cli, hold, holders, name  # noqa: F401

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cli(redis_url, tmp_path):
    return Cli(redis_url, tmp_path)


@pytest.mark.parametrize("kind, word", [(("--permits", "2"), "a semaphore"), (("--fair",), "a fair lock")])
def test_plain_run_names_the_kind_in_use(cli, name, holders, kind, word):
    h = hold(holders, cli, name, *kind)
    r = cli.run("run", "-n", name, "--", "true")
    assert r.returncode == EX_PROTOCOL, r.stderr
    assert f"in use as {word}" in r.stderr, r.stderr
    assert "read-write" not in r.stderr, r.stderr
    assert h.finish() == 0
