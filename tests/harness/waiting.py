"""The one wait-for-a-condition helper of the Python and CLI tests (the C
tests have WAIT_FOR in tests/c/testing.h, the Lua tests H.wait_until in
tests/lua/helpers.lua). Tests wait on a state, never for a fixed time."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union


def wait_for(cond: Callable[[], Any], what: Optional[Union[str, float]] = None, timeout: float = 20.0,
             interval: float = 0.01) -> Any:
    """Polls cond() until it returns a true value, and returns that value.

    At the timeout: raises AssertionError naming `what` when `what` is
    given, else returns cond()'s last (false) value, for
    `assert wait_for(...), detail`. A number in `what`'s place is the
    timeout (`wait_for(cond, 20)`)."""
    if isinstance(what, (int, float)):
        what, timeout = None, float(what)
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            if what is not None:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            return value
        time.sleep(interval)
