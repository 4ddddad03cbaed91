"""A Python quorum client's members (issue 29.5): one server given twice
(TCP and localhost, or its unix socket) would grant a majority alone, so
the client refuses it with InvalidArgument naming both."""
from __future__ import annotations

import pytest

import watchlock
from quorum import Quorum


def test_one_server_given_twice_is_refused():
    with Quorum(3) as q:
        port = q.ports[0]
        with pytest.raises(watchlock.InvalidArgument) as ei:
            watchlock.Client([f"redis://127.0.0.1:{port}", f"redis://localhost:{port}", q.urls[1]])
        msg = str(ei.value)
        assert "one server" in msg and f"127.0.0.1:{port}" in msg and f"localhost:{port}" in msg, msg
        watchlock.Client(q.urls).close()  # three servers: fine
