#!/usr/bin/env python3
"""History checker of the fault-injection suite (tests/faults).

Input: the merged events of every worker's history file (JSON lines, see
worker.c for the events), the runner's fault events, and the resource's final
state (counter per lock name, the fenced-write log in the resource's order).
All times are CLOCK_MONOTONIC nanoseconds of this machine.

A *hold* is one acquire of one worker: key (w, hold). It starts when
acquire returned ("acquired"); its accesses to the resource ("acts": GET,
SET, or a fenced write the resource accepted; a write the fence refused had
no effect) each carry the resource's own sequence number, so the order in
which the resource saw them is known exactly. An access whose reply never
came (the process died, the connection failed) counts as open until the
last sign of life of that process.

What it reports, per lock name:

* violations: two holds H1, H2 with start(H1) < start(H2) where H1 sent an
  access after H2's acquire returned, or the resource ran an access of H1
  after H2's first one, or an unanswered access of H1 was open when H2
  began. ``told_before`` says whether H1 had been told of its loss by then
  (acting after being told is worse, and is also listed in
  ``acted_after_told``).
* acted_after_told: accesses started after the holder was told of the loss.
* lost updates: the counter is incremented by GET then SET value+1. The
  final counter must equal the number of increments recorded as done, plus
  at most the increments in doubt (sent, reply never seen); a value written
  twice by done increments is a lost update as well.
* stale fenced writes accepted: recomputed from the resource's own log (an
  accepted write whose token is below the highest accepted before it).
  Rejected ones are the stale writes the fence stopped.
* fence order: fencing tokens must increase with the holds' start times.
* losses: every hold that was lost (told, found lost at release, or taken
  over before it released) with the next hold on the same name:
  - running holder: told_before = told < the next hold's acquire on the
    server (the fencing token is the server's clock in microseconds at
    acquire, converted with the worker's realtime-monotonic offset; when a
    token is not a time, the next holder's acquire return is used).
    margin_ms = server acquire - told (> 0: told first).
  - frozen holder (SIGSTOP covering the takeover): it cannot be told while
    stopped; told_after_resume_ms is reported instead, and acting before
    learning is caught as a violation.
  - killed holder (SIGKILL): takeover_ms = next acquire - kill.
  - let go: it was told, then released, and the next hold got the key
    because that release deleted it (from the server-side audit when
    given, else judged by the times): not a takeover, no margin counted.
  - released late: not told before the takeover, but its owner had called
    release before it and made no access after that call; the lease ran out
    while the release was on its way: nobody to tell, no margin counted.

Usage as a program: ``checker.py DIR`` reads DIR/*.jsonl and DIR/resource.json
(written by tests/faults/run), and the audit's logs when kept there, and
prints the report; exit 1 when it finds a
violation, lost update, stale fenced write accepted or a loss told late.
"""
from __future__ import annotations

import glob
import json
import os
import statistics
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

NS = 1_000_000  # ns per ms
# slack(t0_ns, t1_ns, base_ms, cap_ms) -> ms: the allowance for scheduling over
# [t0, t1] (the runner's common.LagProbe.slack_ms: base_ms on an idle machine,
# more on a loaded one, at most cap_ms); None: base_ms, fixed
Slack = Optional[Callable[[int, int, float, float], float]]


def _slack(slack: Slack, t0: int, t1: int, base_ms: float, cap_ms: float) -> float:
    return base_ms if slack is None else slack(t0, t1, base_ms, cap_ms)
# fewer fencing numbers than this are spent between two holds of a lock (holds
# and contended fast attempts): a token closer above another is not a seed
SPENT_MAX = 100_000


def ms(ns: Optional[float]) -> Optional[float]:
    return None if ns is None else round(ns / NS, 3)


class Hold:
    __slots__ = ("w", "hold", "lock", "lang", "start", "t_call", "fence", "srv_start", "ops", "told",
                 "told_how", "told_reason", "release_call", "release_result", "cli_exit", "pid",
                 "ppid", "in_doubt", "end", "events", "max_seq")

    def __init__(self, w: str, hold: int):
        self.w, self.hold = w, hold
        self.lock: Optional[str] = None
        self.lang: Optional[str] = None
        self.start: Optional[int] = None
        self.t_call: Optional[int] = None
        self.fence: Optional[int] = None
        self.srv_start: Optional[int] = None
        self.ops: List[dict] = []          # completed accesses: op, t0, t1, ...
        self.in_doubt: List[dict] = []     # op_begin without op_end
        self.told: Optional[int] = None
        self.told_how: Optional[str] = None
        self.told_reason: Optional[str] = None
        self.release_call: Optional[int] = None
        self.release_result: Optional[str] = None
        self.cli_exit: Optional[int] = None
        self.pid: Optional[int] = None
        self.ppid: Optional[int] = None
        self.end: Optional[int] = None
        self.max_seq: Optional[int] = None
        self.events = 0

    @property
    def key(self) -> str:
        return f"{self.w}:{self.hold}"

    def tell(self, t: int, how: str, reason: Optional[str]) -> None:
        if self.told is None or t < self.told:
            self.told, self.told_how, self.told_reason = t, how, reason


def _fault_events(events: Iterable[dict]) -> List[dict]:
    return [e for e in events if e.get("ev") == "fault"]


def build_holds(events: List[dict], grants: Optional[Dict[int, int]] = None
                ) -> Tuple[Dict[Tuple[str, int], Hold], Dict[str, dict]]:
    """Groups events into holds. Returns (holds, workers) where workers maps
    w -> {"rt_off", "lang", "last_t"}. grants: {fence: the server's clock
    (realtime ns) when it granted that hold}, from the server-side audit."""
    workers: Dict[str, dict] = {}
    holds: Dict[Tuple[str, int], Hold] = {}
    begins: Dict[Tuple[str, int], Dict[Tuple[str, int], dict]] = {}
    for e in sorted(events, key=lambda e: e.get("t", 0)):
        w = e.get("w")
        if w is None or w == "runner":
            continue
        info = workers.setdefault(w, {"rt_off": None, "lang": None, "last_t": 0})
        t = e.get("t", 0)
        info["last_t"] = max(info["last_t"], t)
        ev = e.get("ev")
        if ev == "start":
            info["rt_off"] = e.get("rt_off")
            info["lang"] = e.get("lang")
            continue
        if "hold" not in e or not isinstance(e["hold"], int) or e["hold"] <= 0:
            continue
        k = (w, e["hold"])
        h = holds.get(k)
        if h is None:
            h = holds[k] = Hold(w, e["hold"])
        h.events += 1
        if e.get("lock") is not None and h.lock is None:
            h.lock = e["lock"]
        if ev == "acquired":
            h.start, h.fence = t, e.get("fence")
            # the CLI's job has no call time: its `watchlock run` was spawned at cli_spawn
            h.t_call = e.get("t_call", h.t_call)
            h.pid, h.ppid = e.get("pid"), e.get("ppid")
        elif ev == "cli_spawn":
            h.t_call = t
        elif ev == "op":
            h.ops.append(dict(e))
        elif ev == "op_begin":
            begins.setdefault(k, {})[(e["op"], e["t0"])] = dict(e)
        elif ev == "op_end":
            begins.get(k, {}).pop((e["op"], e["t0"]), None)
            h.ops.append(dict(e))
        elif ev == "op_error":
            b = begins.get(k, {}).pop((e["op"], e["t0"]), None)
            if b is not None:  # sent, outcome unknown: in doubt until the error was seen
                b["t_end"] = t
                h.in_doubt.append(b)
        elif ev == "told":
            h.tell(t, e.get("how", "?"), e.get("reason"))
        elif ev == "release_call":
            h.release_call = t
        elif ev == "released":
            h.release_result = e.get("result")
        elif ev == "cli_exit":
            h.cli_exit = e.get("code")
            if h.release_result is None:
                code = e.get("code")
                h.release_result = "ok" if code == 0 else "lost" if code == 79 else f"exit {code}"
            if e.get("code") == 79 and h.told is None:
                h.tell(t, "exit79", "lost")
    # Accesses still open: in doubt until the last sign of life of the process.
    for k, open_ops in begins.items():
        h = holds[k]
        for b in open_ops.values():
            b["t_end"] = max(b["t0"], workers[h.w]["last_t"])
            h.in_doubt.append(b)
    offs = [w["rt_off"] for w in workers.values() if w["rt_off"] is not None]
    default_off = statistics.median(offs) if offs else None
    # When the server granted a hold: from the audit where there is one (the
    # time MONITOR showed the write that took the key); else its token where
    # that reads as the server's clock (token_as_clock); else none, and the
    # hold's start (the reply: after the grant) stands for it.
    fences_of: Dict[str, List[int]] = {}
    for h in holds.values():
        if h.fence:
            fences_of.setdefault(h.lock or "?", []).append(h.fence)
    for h in holds.values():
        info = workers.get(h.w, {})
        h.lang = info.get("lang")
        off = info.get("rt_off") if info.get("rt_off") is not None else default_off
        if h.fence and off is not None and h.start is not None:
            if grants is not None:
                if h.fence in grants:
                    h.srv_start = int(grants[h.fence] - off)
            else:
                h.srv_start = token_as_clock(h.fence, h.t_call, h.start, off, fences_of[h.lock or "?"])
        ends = [o["t1"] for o in _acts(h)] + [b["t_end"] for b in h.in_doubt]
        h.end = max(ends) if ends else None
        seqs = [o["seq"] for o in _acts(h) if o.get("seq") is not None]
        h.max_seq = max(seqs) if seqs else None
    return holds, workers


def _granted_at(h: "Hold") -> int:
    """When the server granted h (monotonic ns) where known, else its start (later)."""
    return h.srv_start if h.srv_start is not None else h.start


def token_as_clock(fence: int, t_call: Optional[int], t: int, off: int, fences: Iterable[int]) -> Optional[int]:
    """The server's grant time (CLOCK_MONOTONIC ns; off = realtime - monotonic)
    read from a fencing token returned at t by an acquire called at t_call,
    or None where the token cannot be read so. A token is the server's clock
    in us only where it seeded the counter (first use, or after it expired);
    later ones are the seed plus the numbers spent since (holds and
    contended fast attempts), which read as a time fall at an earlier grant.
    So it counts only when no other hold's token (fences, of the same lock)
    is less than SPENT_MAX below it, and it falls inside the acquire call
    and within 1 s of its return (a 10 s window made takeovers after a
    SIGKILL come out negative, so their check could not fail)."""
    if any(0 < fence - g < SPENT_MAX for g in fences):
        return None
    srv = fence * 1000 - off
    lo = max(t_call if t_call is not None else t, t - 1000 * NS) - 5 * NS
    return int(srv) if lo <= srv <= t + 5 * NS else None


def _acts(h: Hold) -> List[dict]:
    """Accesses that may have had an effect (a write the fence refused had none)."""
    return [o for o in h.ops if not (o.get("op") == "fence" and o.get("accepted") is False)]


def _overlap(h1: Hold, h2: Hold, first2: Optional[int]) -> Optional[str]:
    """Why H1 (started first) acted while H2 held the lock, or None.

    - an access H1 sent after H2's acquire returned;
    - an access the resource executed after H2's first one (the resource's
      own order, from its sequence numbers);
    - an access in doubt (never answered) still open when H2 began.
    An access sent before H2 began whose reply came after is fine when the
    resource ran it before anything of H2 (its sequence number says so)."""
    for o in _acts(h1):
        if o["t0"] > h2.start:
            return "sent after the next hold began"
        if o.get("seq") is not None and first2 is not None and o["seq"] > first2:
            return "ran on the resource after the next holder's first access"
    for o in h1.in_doubt:
        if o["t0"] > h2.start:
            return "sent after the next hold began"
        if o["t_end"] > h2.start:
            return "unanswered access still open when the next hold began"
    return None


def _fault_on(faults: List[dict], kind: str, h: Hold) -> List[dict]:
    out = []
    for f in faults:
        if f.get("kind") != kind:
            continue
        targets = f.get("targets") or ([f["target"]] if f.get("target") else [])
        pids = f.get("pids") or []
        if h.w in targets or (h.pid is not None and h.pid in pids) or (h.ppid is not None and h.ppid in pids):
            out.append(f)
    return out


def check(events: List[dict], resource: Dict[str, dict], faults: Optional[List[dict]] = None,
          handoffs: Optional[Dict[int, Tuple[str, Optional[int]]]] = None,
          grants: Optional[Dict[int, int]] = None, slack: Slack = None) -> dict:
    """Checks a merged history. resource: {lock: {"counter": int|None,
    "fence_log": ["<token> <1|0> <w:hold> <max before>", ...]}}.
    faults: the runner's fault events (default: those found in events).
    handoffs: from the server-side audit (audit.handoffs_by_fence):
    {fence of a hold: (how it got the key, fence of the previous owner)},
    "release" when the previous hold's own release deleted the key.
    grants: from the audit too (audit.grants_by_fence): {fence: realtime ns
    of the grant on the server}. slack: see Slack (a frozen holder's takeover
    may come that long after its SIGCONT)."""
    if faults is None:
        faults = _fault_events(events)
    holds, workers = build_holds(events, grants)
    report: Dict[str, Any] = {"locks": {}, "violations": [], "acted_after_told": [], "lost_updates": 0,
                              "stale_accepted": 0, "stale_rejected": 0, "fence_order_errors": [],
                              "losses": [], "anomalies": [], "notes": []}
    by_lock: Dict[str, List[Hold]] = {}
    for h in holds.values():
        if h.start is None:
            if h.cli_exit in (0, 79):  # watchlock ran COMMAND, which recorded nothing
                report["notes"].append(f"hold {h.key}: watchlock exited {h.cli_exit} before COMMAND recorded its start")
            continue
        by_lock.setdefault(h.lock or "?", []).append(h)

    for lock, hs in sorted(by_lock.items()):
        hs.sort(key=lambda h: (h.start, h.key))
        lr: Dict[str, Any] = {"holds": len(hs)}
        # -- overlaps: H1 still acting after H2 began
        for i, h2 in enumerate(hs):
            seqs2 = [o["seq"] for o in h2.ops if o.get("seq") is not None]
            first2 = min(seqs2) if seqs2 else None
            for h1 in hs[:i]:
                if h1.end is None or h1.end <= h2.start and (first2 is None or h1.max_seq is None
                                                              or h1.max_seq < first2):
                    continue
                why = _overlap(h1, h2, first2)
                if why is not None:
                    report["violations"].append({
                        "lock": lock, "earlier": h1.key, "later": h2.key, "kind": why,
                        "later_start_ms": ms(h2.start), "earlier_last_act_ms": ms(h1.end),
                        "overlap_ms": ms(h1.end - h2.start),
                        "told_before": h1.told is not None and h1.told <= h2.start,
                        "earlier_told_ms": ms(h1.told)})
        # -- accesses after being told
        for h in hs:
            if h.told is None:
                continue
            for o in h.ops + h.in_doubt:
                if o["t0"] > h.told and not (o.get("op") == "fence" and o.get("accepted") is False):
                    report["acted_after_told"].append({"lock": lock, "hold": h.key, "op": o.get("op"),
                                                       "after_told_ms": ms(o["t0"] - h.told)})
        # -- the counter
        done = [o for h in hs for o in h.ops if o.get("op") == "set"]
        doubt = [o for h in hs for o in h.in_doubt if o.get("op") == "set"]
        written = [o["wrote"] for o in done]
        dups = len(written) - len(set(written))
        final = (resource.get(lock) or {}).get("counter")
        lost = 0
        if final is not None:
            if final < len(done):
                lost = len(done) - final
            elif final > len(done) + len(doubt):
                report["anomalies"].append(
                    f"{lock}: counter {final} > {len(done)} increments done + {len(doubt)} in doubt")
        lost = max(lost, dups)
        report["lost_updates"] += lost
        lr.update({"increments_done": len(done), "increments_in_doubt": len(doubt), "counter": final,
                   "lost_updates": lost, "duplicate_values": dups})
        # -- the fence log
        top = None
        acc = rej = stale_acc = 0
        for line in (resource.get(lock) or {}).get("fence_log", []):
            parts = line.split()
            tok, ok = int(parts[0]), parts[1] == "1"
            if ok:
                acc += 1
                if top is not None and tok < top:
                    stale_acc += 1
                top = tok if top is None else max(top, tok)
            else:
                rej += 1
                if top is None or tok >= top:
                    report["anomalies"].append(f"{lock}: fenced write {line!r} rejected with no higher token seen")
        report["stale_accepted"] += stale_acc
        report["stale_rejected"] += rej
        lr.update({"fenced_accepted": acc, "fenced_rejected": rej, "stale_accepted": stale_acc})
        # -- fencing tokens increase with the holds' grants on the server: ordered by the
        # grant where it is known (the audit, a token read as the clock), else by the start.
        # A start is when the holder recorded it: a `watchlock run` whose COMMAND started
        # 1.4 s after its grant (a stalled machine) recorded its start after a later hold's
        gs = sorted(hs, key=lambda h: (_granted_at(h), h.key))
        prev = None
        for h in gs:
            if h.fence is None:
                continue
            if prev is not None and h.fence <= prev.fence:
                report["fence_order_errors"].append({"lock": lock, "earlier": prev.key, "later": h.key,
                                                     "earlier_fence": prev.fence, "later_fence": h.fence})
            prev = h
        # -- losses: each hold against the next one granted
        for i, h1 in enumerate(gs):
            h2 = next((h for h in gs[i + 1:] if _granted_at(h) > _granted_at(h1)), None)
            taken_over = h2 is not None and (h1.release_call is None or
                                             (h2.srv_start or h2.start) < h1.release_call)
            lost = h1.told is not None or h1.release_result in ("lost",) or taken_over
            if not lost:
                continue
            loss: Dict[str, Any] = {"lock": lock, "hold": h1.key, "lang": h1.lang, "told_ms": ms(h1.told),
                                    "how": h1.told_how, "reason": h1.told_reason,
                                    "release": h1.release_result}
            if h2 is None:
                loss["class"] = "no takeover"
                report["losses"].append(loss)
                continue
            takeover = h2.srv_start if h2.srv_start is not None else h2.start
            loss.update({"next": h2.key, "next_start_ms": ms(h2.start), "next_srv_start_ms": ms(h2.srv_start)})
            kills = [f for f in _fault_on(faults, "sigkill", h1)
                     if f["t0"] >= h1.start and (h1.release_call is None or f["t0"] <= h1.release_call)]
            stops = [f for f in _fault_on(faults, "sigstop", h1)
                     if f["t0"] >= h1.start and (h1.release_call is None or f["t0"] <= h1.release_call)
                     and f["t0"] <= takeover <= f.get("t1", takeover)
                     + _slack(slack, f.get("t1", takeover), takeover, 50, 500) * NS]
            via = (handoffs or {}).get(h2.fence) if h2.fence is not None else None
            if via is not None and via[1] == h1.fence:
                loss["via"] = via[0]
                let_go = via[0] == "release" and h1.told is not None and h1.told <= (h1.release_call or 0)
            else:  # no server-side record: judge by the times
                let_go = (h1.release_call is not None and h1.told is not None and h1.told <= h1.release_call
                          and takeover > h1.release_call)
            if let_go:
                # it learned of the loss, then released: the next hold came after its own release
                loss["class"] = "let go"
                loss["margin_ms"] = ms(takeover - h1.told)
            elif kills:
                loss["class"] = "killed"
                loss["takeover_ms"] = ms(h2.start - kills[0]["t0"])
                loss["takeover_srv_ms"] = ms(takeover - kills[0]["t0"])
            elif stops:
                loss["class"] = "frozen"
                loss["told_after_resume_ms"] = ms(h1.told - stops[0]["t1"]) if h1.told is not None else None
            elif (h1.release_call is not None and h1.release_call <= takeover
                  and (h1.end is None or h1.end <= h1.release_call) and (h1.told is None or h1.told >= takeover)):
                # its owner had stopped using it and asked for the release before the takeover,
                # and the lease ran out while the release was on its way (a `watchlock run`
                # whose COMMAND had exited, its release held up on a loaded machine): nobody was
                # left to tell, and any access after its release call would be judged above
                loss["class"] = "released late"
                loss["release_call_before_ms"] = ms(takeover - h1.release_call)
            else:
                loss["class"] = "running"
                if h1.told is None:
                    loss["told_before"] = False
                    loss["margin_ms"] = None
                else:
                    loss["margin_ms"] = ms(takeover - h1.told)
                    loss["margin_client_ms"] = ms(h2.start - h1.told)
                    loss["told_before"] = h1.told < takeover
                    if not loss["told_before"] and slack is not None:
                        # A holder's told event is recorded by its own code (the on-lost callback,
                        # a check, the SIGTERM handler of `watchlock run`'s COMMAND) when the
                        # machine runs it: beside a CPU hog (load 30 on 2 cores) a C holder's
                        # loss timer ran 110 ms past its deadline, a COMMAND's handler 8 ms past
                        # the takeover. A process the machine did not run could not act either
                        # (violations are checked above). Late by no more than HOPS x the
                        # scheduling delay measured before it, never 250 ms, it is counted as
                        # told late on a stalled machine (a note, not a failure); telling at
                        # the expiry instead of before stays a failure on an idle machine.
                        late = h1.told - takeover
                        if late <= _slack(slack, takeover - 250 * NS, h1.told, 0, 250) * NS:
                            loss["stalled_late_ms"] = ms(late)
            report["losses"].append(loss)
        report["locks"][lock] = lr

    running = [x for x in report["losses"] if x.get("class") == "running"]
    margins = [x["margin_ms"] for x in running if x.get("margin_ms") is not None]
    report["summary"] = {
        "holds": sum(v["holds"] for v in report["locks"].values()),
        # holds that acted while a later hold held the lock (each may overlap several later holds)
        "violations": len({(v["lock"], v["earlier"]) for v in report["violations"]}),
        "violation_pairs": len(report["violations"]),
        "acted_after_told": len(report["acted_after_told"]),
        "lost_updates": report["lost_updates"],
        "stale_accepted": report["stale_accepted"],
        "stale_rejected": report["stale_rejected"],
        "fence_order_errors": len(report["fence_order_errors"]),
        "losses_running": len(running),
        "told_before": sum(1 for x in running if x.get("told_before")),
        # told after the takeover by no more than the scheduling delay measured then (see check)
        "told_late_stalled": sum(1 for x in running if x.get("stalled_late_ms") is not None),
        "margin_min_ms": min(margins) if margins else None,
        "margin_median_ms": statistics.median(margins) if margins else None,
        "losses_frozen": sum(1 for x in report["losses"] if x.get("class") == "frozen"),
        "losses_killed": sum(1 for x in report["losses"] if x.get("class") == "killed"),
        "losses_let_go": sum(1 for x in report["losses"] if x.get("class") == "let go"),
        "losses_released_late": sum(1 for x in report["losses"] if x.get("class") == "released late"),
        "anomalies": len(report["anomalies"]),
    }
    return report


def check_family(events: List[dict], faults: Optional[List[dict]] = None, fifo_margin_ms: float = 5.0,
                 first_call_margin_ms: float = 100.0, slack: Slack = None) -> dict:
    """The rules of the queued kinds (issues 22, 23), across the groups a
    worker records its holds under (worker.py --lock-kind): NAME (holds that must
    exclude each other), NAME#r (readers), NAME#kK (smaller permit holds).
    check() runs on NAME's group as for a plain lock (exclusion, lost
    updates, fencing); this adds what spans groups, with the same notion of
    "H1 still acting while H2 holds" (_overlap):

    * semaphore (acquired events with "permits" and "of" = N): when a hold
      begins, the permits of the earlier holds still acting plus its own
      never exceed N ("permit_violations");
    * read-write lock ("side"): a writer never acts with a reader or another
      writer, in either order ("shared_violations"); readers overlapping
      each other is the point;
    * fair lock ("kind" fair): queue order. A hold whose acquire was called
      more than fifo_margin_ms before another's, while that other one was
      still waiting, must begin first ("fifo_inversions"), unless a fault hit
      its worker while it waited (a frozen waiter may lose its place). The
      first acquire call of a worker process gets first_call_margin_ms
      instead: it opens the client's subscriber connection and thread before
      its request reaches the queue (fault variant m-close restarts a worker
      every trial; a loaded machine spent over 5 ms there). With slack (see
      Slack), either margin grows with the scheduling delay measured after
      the older call, by 200 ms at most.
    """
    if faults is None:
        faults = _fault_events(events)
    holds, _ = build_holds(events)
    meta: Dict[Tuple[str, int], dict] = {}
    for e in events:
        if e.get("ev") == "acquired" and e.get("base") is not None:
            meta[(e["w"], e["hold"])] = e
    fam = [(h, meta[k]) for k, h in holds.items() if k in meta and h.start is not None]
    fam.sort(key=lambda x: (x[0].start, x[0].key))
    out: Dict[str, Any] = {"permit_violations": [], "shared_violations": [], "fifo_inversions": [],
                           "max_permits_in_use": 0, "max_readers": 0, "fifo_checked": 0}
    for i, (h2, m2) in enumerate(fam):
        seqs2 = [o["seq"] for o in h2.ops if o.get("seq") is not None]
        first2 = min(seqs2) if seqs2 else None
        acting = []
        for h1, m1 in fam[:i]:
            if m1["base"] != m2["base"] or h1.end is None:
                continue
            # seq numbers are per resource key group: compare them only within one group
            why = _overlap(h1, h2, first2 if h1.lock == h2.lock else None)
            if why is not None:
                acting.append((h1, m1, why))
        if m2.get("of"):
            used = sum(m1.get("permits") or 1 for _, m1, _ in acting) + (m2.get("permits") or 1)
            out["max_permits_in_use"] = max(out["max_permits_in_use"], used)
            if used > m2["of"]:
                out["permit_violations"].append({"lock": m2["base"], "hold": h2.key, "in_use": used, "of": m2["of"],
                                                 "with": [h1.key for h1, _, _ in acting]})
        if m2.get("side"):
            readers = sum(1 for _, m1, _ in acting if m1.get("side") == "read") + (m2["side"] == "read")
            out["max_readers"] = max(out["max_readers"], readers if m2["side"] == "read" else 0)
            for h1, m1, why in acting:
                if "write" in (m1.get("side"), m2.get("side")):
                    out["shared_violations"].append({"lock": m2["base"], "earlier": h1.key, "earlier_side": m1["side"],
                                                     "later": h2.key, "later_side": m2["side"], "kind": why})
    fair = [(h, m) for h, m in fam if m.get("kind") == "fair" and h.t_call is not None]
    first_call: Dict[str, int] = {}  # worker -> its first acquire call
    for e in events:
        if e.get("ev") in ("acquired", "acquire_failed") and e.get("t_call") is not None:
            first_call[e["w"]] = min(first_call.get(e["w"], e["t_call"]), e["t_call"])
    for h2, m2 in fair:  # h2 asked while an older waiter h1 still waited: h1 must begin first
        for h1, m1 in fair:
            if h1 is h2 or m1["base"] != m2["base"]:
                continue
            if not h1.t_call < h2.t_call < h1.start:
                continue
            margin = first_call_margin_ms if first_call.get(h1.w) == h1.t_call else fifo_margin_ms
            margin = _slack(slack, h1.t_call, h1.t_call + int(margin * NS), margin, margin + 200)
            if not (h1.t_call + margin * NS < h2.t_call < h1.start):
                continue
            out["fifo_checked"] += 1
            if h1.start <= h2.start:
                continue
            hit = [f for f in faults if (f.get("target") == h1.w or h1.w in (f.get("targets") or []))
                   and f.get("t0", 0) <= h1.start and f.get("t1", f.get("t0", 0)) >= h1.t_call]
            if not hit:
                out["fifo_inversions"].append({"lock": m2["base"], "older": h1.key, "younger": h2.key,
                                               "older_called_ms": ms(h1.t_call), "younger_called_ms": ms(h2.t_call),
                                               "younger_began_ms": ms(h2.start), "older_began_ms": ms(h1.start)})
    return out


def family_failures(fam: dict) -> List[str]:
    out = []
    if fam["permit_violations"]:
        out.append(f"{len(fam['permit_violations'])} hold(s) began with more than N permits in use")
    if fam["shared_violations"]:
        out.append(f"{len(fam['shared_violations'])} writer overlap(s) with a reader or another writer")
    if fam["fifo_inversions"]:
        out.append(f"{len(fam['fifo_inversions'])} fair-lock grant(s) out of arrival order")
    return out


def failures(report: dict) -> List[str]:
    """The in-contract pass criteria: what failed, in words (empty: passed)."""
    s = report["summary"]
    out = []
    if s["violations"]:
        out.append(f"{s['violations']} violation(s) of mutual exclusion")
    if s["acted_after_told"]:
        out.append(f"{s['acted_after_told']} access(es) after the holder was told of its loss")
    if s["lost_updates"]:
        out.append(f"{s['lost_updates']} lost update(s)")
    if s["stale_accepted"]:
        out.append(f"{s['stale_accepted']} stale fenced write(s) accepted")
    if s["fence_order_errors"]:
        out.append(f"{s['fence_order_errors']} fencing token(s) out of order")
    stalled = s.get("told_late_stalled", 0)
    if s["told_before"] + stalled < s["losses_running"]:
        out.append(f"only {s['told_before']}/{s['losses_running']} losses told before the takeover"
                   + (f" ({stalled} more told late while the machine stalled)" if stalled else ""))
    if s["anomalies"]:
        out.append(f"{s['anomalies']} anomal{'y' if s['anomalies'] == 1 else 'ies'} in the history")
    return out


def load_dir(path: str) -> Tuple[List[dict], Dict[str, dict]]:
    events: List[dict] = []
    for f in sorted(glob.glob(os.path.join(path, "*.jsonl"))):
        with open(f) as fh:
            for line in fh:
                line = line.strip()
                if line:
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut by SIGKILL
    resource: Dict[str, dict] = {}
    rp = os.path.join(path, "resource.json")
    if os.path.exists(rp):
        with open(rp) as fh:
            resource = json.load(fh)
    return events, resource


def main(argv: List[str]) -> int:
    if len(argv) != 1:
        print("usage: checker.py HISTORY_DIR", file=sys.stderr)
        return 2
    events, resource = load_dir(argv[0])
    import audit  # the server-side audit's logs, when the run kept them
    au = audit.audit(argv[0])
    if au.get("missing"):
        report = check(events, resource)
    else:
        report = check(events, resource, handoffs=audit.handoffs_by_fence(au), grants=audit.grants_by_fence(au))
        print("audit:", json.dumps({k: v if not isinstance(v, (list, dict)) else len(v) for k, v in au.items()}))
    print(json.dumps(report["summary"], indent=2))
    for v in report["violations"][:20]:
        print("violation:", json.dumps(v))
    for v in report["acted_after_told"][:20]:
        print("acted after told:", json.dumps(v))
    for a in report["anomalies"][:20]:
        print("anomaly:", a)
    for x in report["losses"]:
        if x.get("class") == "running" and not x.get("told_before"):
            print("told late:", json.dumps(x))
    fails = failures(report)
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
