"""renew_interval as the core reads it (issue 25 item 4): seconds (int,
float, timedelta), a duration string ("500ms", "2s"), a fraction of the
lease ("1/3", "9/10") or a percentage of it ("25%"). Strings go to the
core's one parser (watchlock_parse_renew_interval), so the forms and the
rules (a fraction above 0 and below 1; an absolute interval below the
lease, checked by the setter and again at acquire) are the CLI's and Lua's.
"""
from __future__ import annotations

from typing import Tuple, Union

from . import _native
from ._util import OK, Duration, Name, fmt_name, raise_status, to_ms

#: What Lock keeps for renew_interval: ms (int), or (num, den) of the lease.
RenewOption = Union[int, Tuple[int, int]]


def renew_option(value: Union[Duration, str], lock_name: Name) -> RenewOption:
    """renew_interval= as ms, or as (num, den) for a fraction of the lease."""
    if not isinstance(value, str):
        return to_ms(value, "renew_interval", lock_name)
    status, ms, num, den = _native.parse_renew_interval(value.replace("\0", "\\0"))
    if status != OK:
        raise_status(status, f"renew_interval of lock {fmt_name(lock_name)}", lock_name)
    return (num, den) if den else ms


def set_renew(handle: _native.LockHandle, option: RenewOption) -> int:
    """The core's setter for a renew_option() value; returns its status."""
    if isinstance(option, tuple):
        return _native.lock_set_renew_fraction(handle, option[0], option[1])
    return _native.lock_set_renew_interval(handle, option)
