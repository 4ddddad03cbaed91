"""Client.stats(): the core's counters and histograms (issue 25 item 5),
read lock-free from C (watchlock_client_stat, watchlock_client_histogram).

Counters count since the client was opened. Histograms have fixed
log-scale buckets (64 us * 4**i up to about 18 minutes, then +Inf); each
is a :class:`Histogram` with non-cumulative bucket counts, its total
``count`` and ``sum`` in seconds, and :meth:`Histogram.cumulative` for
exporters that want Prometheus' ``le`` buckets.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Tuple

from . import _native

_S = _native  # the ids are the header's constants

#: Counters: name -> stat id.
COUNTERS: Tuple[Tuple[str, int], ...] = (
    ("held_locks", _S.WATCHLOCK_STAT_HELD_LOCKS),
    ("renew_rounds", _S.WATCHLOCK_STAT_RENEW_ROUNDS),
    ("renew_roundtrips", _S.WATCHLOCK_STAT_RENEW_ROUNDTRIPS),
    ("renewals", _S.WATCHLOCK_STAT_RENEWALS),
    ("watchdog_cpu_us", _S.WATCHLOCK_STAT_WATCHDOG_CPU_US),
    ("subscribe_denied", _S.WATCHLOCK_STAT_SUBSCRIBE_DENIED),
    ("acquires", _S.WATCHLOCK_STAT_ACQUIRES),
    ("contended_acquires", _S.WATCHLOCK_STAT_CONTENDED_ACQUIRES),
    ("acquire_timeouts", _S.WATCHLOCK_STAT_ACQUIRE_TIMEOUTS),
    ("release_retries", _S.WATCHLOCK_STAT_RELEASE_RETRIES),
)

#: Losses by reason: the key of stats()["lost"] -> stat id.
LOST: Tuple[Tuple[str, int], ...] = (
    ("taken", _S.WATCHLOCK_STAT_LOST_TAKEN),
    ("expired", _S.WATCHLOCK_STAT_LOST_EXPIRED),
    ("max_renewals", _S.WATCHLOCK_STAT_LOST_MAX_RENEWALS),
    ("max_hold", _S.WATCHLOCK_STAT_LOST_MAX_HOLD),
    ("connection", _S.WATCHLOCK_STAT_LOST_CONNECTION),
)

#: Quorum clients (issue 21; all 0 on a plain client): the key of stats()["quorum"] -> stat id.
QUORUM: Tuple[Tuple[str, int], ...] = (
    ("restarts", _S.WATCHLOCK_STAT_QUORUM_RESTARTS),          # members seen restarted
    ("kept_out", _S.WATCHLOCK_STAT_QUORUM_KEPT_OUT),          # members kept out by the restart rule now
    ("unreached", _S.WATCHLOCK_STAT_QUORUM_UNREACHED),        # release/give-back writes that got no answer
    ("late_grants", _S.WATCHLOCK_STAT_QUORUM_LATE_GRANTS),    # grants after the decision, given back
    ("fence_unavailable", _S.WATCHLOCK_STAT_QUORUM_FENCE_UNAVAILABLE),
    ("split_votes", _S.WATCHLOCK_STAT_QUORUM_SPLIT_VOTES),    # failed attempts that had grants
)

#: Histograms: name -> (histogram id, stat id of its sum in us).
HISTOGRAMS: Tuple[Tuple[str, int, int], ...] = (
    ("wait_time", _S.WATCHLOCK_HIST_WAIT, _S.WATCHLOCK_STAT_WAIT_US_SUM),
    ("hold_time", _S.WATCHLOCK_HIST_HOLD, _S.WATCHLOCK_STAT_HOLD_US_SUM),
    ("renew_rtt", _S.WATCHLOCK_HIST_RENEW_RTT, _S.WATCHLOCK_STAT_RENEW_RTT_US_SUM),
)

_INT64_MAX = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Histogram:
    """A histogram of durations in seconds.

    ``buckets``: ``(upper_bound, count)`` pairs, counts not cumulative (the
    values above the previous bound and at most this one), the last bound
    ``math.inf``; ``count``: their total; ``sum``: of all values, seconds."""

    buckets: Tuple[Tuple[float, int], ...]
    count: int
    sum: float

    def cumulative(self) -> List[Tuple[float, int]]:
        """``(le, count of values <= le)`` pairs, as Prometheus' buckets."""
        out, total = [], 0
        for upper, n in self.buckets:
            total += n
            out.append((upper, total))
        return out


def _histogram(handle: Any, which: int, sum_id: int) -> Histogram:
    buckets = []
    for i in range(_S.WATCHLOCK_HIST_BUCKETS):
        st, upper_us, n = _native.client_histogram(handle, which, i)
        if st != _S.WATCHLOCK_OK:
            from ._util import raise_status
            raise_status(st, "cannot read the client's histograms")
        buckets.append((math.inf if upper_us == _INT64_MAX else upper_us / 1e6, n))
    return Histogram(tuple(buckets), sum(n for _, n in buckets), _native.client_stat(handle, sum_id) / 1e6)


def client_stats(handle: Any) -> Dict[str, Any]:
    """Client.stats() for a client handle."""
    stats: Dict[str, Any] = {key: _native.client_stat(handle, which) for key, which in COUNTERS}
    stats["lost"] = {key: _native.client_stat(handle, which) for key, which in LOST}
    stats["quorum"] = {key: _native.client_stat(handle, which) for key, which in QUORUM}
    for key, which, sum_id in HISTOGRAMS:
        stats[key] = _histogram(handle, which, sum_id)
    return stats
