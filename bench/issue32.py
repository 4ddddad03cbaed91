"""Issue 32's figures for bench/bench.py (scenario `issue32`): the
performance of the lock family, every target decided by a ratio measured
in the same run (this machine's loopback round trip swings 40-250 us
between runs, so an absolute time decides nothing).

1. Uncontended acquire + release of every kind vs the plain lock, C and
   Python, interleaved rounds on one pinned core; script calls per cycle
   from INFO commandstats before/after each run (the profile of where a
   cycle's server work goes).
2. Fair lock, semaphore and plain hand-off (8 processes, 1 ms holds,
   greedy): p50/p99 in us and as multiples of the PING round trip measured
   just before each hand-off run (unpinned, like the hand-off), and
   against the machine's floor: the same group on a minimal fair lock in
   raw hiredis (wlbench relay, its waiter in 1 or 2 threads).
3. Renewals per lock per interval in 5-second windows from the first one
   after acquisition (wlbench watchdog's trace), at 10,000 / 100,000 /
   300,000 locks (quick: 10,000 / 100,000), and acquisitions/s while
   0, 100,000 and 300,000 are held (wlbench's probe: one more lock taken
   and given back, the median of batches).

bench.py sets `B` to itself before calling anything here.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import time

B = None  # the bench module (bench.py), set by it

KIND_RATIO = 1.15          # each kind's cycle vs the plain lock's
MULTI_CLUSTER_RATIO = 1.5  # multi-lock over 3 slots in Cluster (not measured here)
HANDOFF_P50_RTT, HANDOFF_P99_RTT = 2.0, 6.0
RENEW_PER_INTERVAL = 1.02
WINDOW_S = 5.0
KEEP_UP = 0.95      # renewals per lock per interval below this: the watchdog is behind
NOT_STARVED = 0.5   # acquire+release rate with N held vs none held

# (key, worker lib for py_worker / WLBENCH_KIND and WLBENCH_PERMITS for wlbench)
C_KINDS = [("plain", {}), ("fair", {"WLBENCH_KIND": "fair"}),
           ("semaphore k=1", {"WLBENCH_KIND": "sem", "WLBENCH_PERMITS": "1"}),
           ("semaphore k=2", {"WLBENCH_KIND": "sem", "WLBENCH_PERMITS": "2"}),
           ("read side", {"WLBENCH_KIND": "read"}), ("write side", {"WLBENCH_KIND": "write"})]
PY_KINDS = [("plain", "watchlock"), ("fair", "watchlock-fair"), ("semaphore k=1", "watchlock-sem"),
            ("semaphore k=2", "watchlock-sem2"), ("read side", "watchlock-read"), ("write side", "watchlock-write"),
            ("multi-lock, 3 names", "watchlock-multi3")]
HANDOFF_KINDS = [("plain", "plain"), ("fair", "fair"), ("semaphore", "sem")]

SCALES = {
    "full": dict(wd_counts=[10000, 100000, 300000], wd_hold_s=30.0, probe=1000, handoff_s=10.0),
    "quick": dict(wd_counts=[10000, 100000], wd_hold_s=15.0, probe=500, handoff_s=4.0),
    "smoke": dict(wd_counts=[300], wd_hold_s=6.0, probe=50, handoff_s=0.5),
}


def _run(cmd: list, timeout: float, env: "dict | None" = None) -> "tuple[dict, str]":
    """(the JSON on the last stdout line, stderr) of a worker; raises on failure."""
    full_env = dict(os.environ, **(env or {}))
    cmd = [str(c) for c in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=B.BENCH, env=full_env)
    if r.returncode != 0:
        path = B.write_log(f"run-issue32-{os.path.basename(cmd[0])}-{cmd[1]}", cmd, r.returncode, r.stdout,
                           r.stderr, B.BENCH)
        raise RuntimeError(f"{os.path.basename(cmd[0])} {cmd[1]} exited {r.returncode}: {B.one_line(r.stderr)} "
                           f"(log: {path})")
    import json
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _scripts(port: int) -> int:
    st = B.wave_scenarios.commandstats(port)
    return sum(v for k, v in st.items() if k in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"))


def _cycles(srv, scale: dict, status: dict, out: dict) -> None:
    """Item 1: interleaved, pinned; us per cycle and script calls per cycle."""
    jobs = []  # (lang, kind, cmd, env)
    n, max_s = scale["cycle_n"], scale["cycle_max_s"]
    if "watchlock-c" not in status:
        for kind, env in C_KINDS:
            jobs.append(("c", kind, [B.WLBENCH, "cycle", srv.url, n, max_s], env))
    if "watchlock-py" not in status:
        for kind, lib in PY_KINDS:
            jobs.append(("py", kind, [B.VPY, B.PY_WORKER, "cycle", lib, srv.url, n, max_s], None))
    samples: dict = {}
    scripts: dict = {}
    B.pin_server(srv, True)
    try:
        for _ in range(scale["repeats"]):
            for lang, kind, cmd, env in jobs:
                key = f"{lang}:{kind}"
                if key in out["errors"]:
                    continue
                try:
                    s0 = _scripts(srv.port)
                    r, _ = _run(B.pinned(cmd), timeout=max_s * 10 + 120, env=env)
                    s1 = _scripts(srv.port)
                    samples.setdefault(key, []).append(r["seconds"] / r["ops"] * 1e6)
                    # the warm-up's cycles (<= 200) are counted too: a small overestimate
                    scripts.setdefault(key, []).append((s1 - s0) / max(1, r["ops"]))
                except Exception as e:  # noqa: BLE001
                    out["errors"][key] = str(e)
                    B.log(f"issue32 cycle {key}: {e}")
    finally:
        B.pin_server(srv, False)
    # the C multi-lock: wlbench multi interleaves the plain lock and a 3-name multi-lock itself
    if "watchlock-c" not in status:
        try:
            r, _ = _run(B.pinned([B.WLBENCH, "multi", srv.url, n, max_s, 3]), timeout=max_s * 10 + 120)
            out["c_multi"] = r
        except Exception as e:  # noqa: BLE001
            out["errors"]["c:multi-lock, 3 names"] = str(e)
        _cluster_multi(scale, out)
    out["cycles"] = {k: {"us_per_op": statistics.median(v), "samples_us": v,
                         "scripts_per_cycle": statistics.median(scripts[k])} for k, v in samples.items()}


def _cluster_multi(scale: dict, out: dict) -> None:
    """Item 1's Cluster part: a multi-lock over 3 names whose slots are on
    the 3 masters of a cluster (no replicas) against the plain lock's cycle
    on the same cluster, interleaved by wlbench multi, pinned as (f)'s cycle
    is (the client and every server on one core)."""
    try:
        from cluster import RedisCluster
    except Exception as e:  # noqa: BLE001
        out["errors"]["c:multi-lock, 3 slots in Cluster"] = f"the cluster harness does not load: {e}"
        return
    try:
        with RedisCluster(masters=3, replicas=0) as c3:
            t = B.Target.cluster(c3, "cluster, 3 masters")
            names, per_master = B.spread_names(t)
            n, max_s = scale["cycle_n"], scale["cycle_max_s"]
            B.pin_pids(t.pids, True)
            try:
                r, _ = _run(B.pinned([B.WLBENCH, "multi", t.url, n, max_s, 3, "--names", ",".join(names)]),
                            timeout=max_s * 10 + 120)
            finally:
                B.pin_pids(t.pids, False)
            r["per_master"] = per_master
            out["c_multi_cluster"] = r
    except Exception as e:  # noqa: BLE001
        out["errors"]["c:multi-lock, 3 slots in Cluster"] = str(e)
        B.log(f"issue32 cluster multi-lock: {e}")


def _ping_rtt_us(srv) -> float:
    r, _ = _run([B.WLBENCH, "ping", "127.0.0.1", srv.port, 20000, 1.0], timeout=120)
    return r["seconds"] / r["ops"] * 1e6


# The machine's hand-off floor (wlbench relay: a minimal fair lock in raw hiredis,
# the grant in the wake-up, no watchlock), timed as the kinds are: its waiter reads
# its subscription in its one thread (1t: any design's floor) or through a reader
# thread that wakes it (2t: the structure of watchlock's waiter)
RELAYS = [("relay-1t", "relay-1t"), ("relay-2t", "relay-2t")]


def _handoffs(srv, ws: dict, status: dict, out: dict) -> None:
    """Item 2: greedy hand-off of each kind and of the relay floors, each
    with a PING floor just before and after."""
    if "watchlock-c" in status:
        return
    flush = lambda: srv.command("FLUSHALL")  # noqa: E731
    for kind, wkind in HANDOFF_KINDS + RELAYS:
        key = f"c:{kind}"
        try:
            rtt = _ping_rtt_us(srv)
            # greedy (each contends again at once); the plain lock in queue mode (a holder
            # waits for another to take it before contending again): greedy, its releaser
            # takes it back every time and there is no release-to-acquire to time
            lib = kind if kind.startswith("relay") else "watchlock-c"
            h = B.wave_scenarios.handoff(lib, srv.url, ws["handoff_s"], kind == "plain", flush,
                                         kind=wkind, ports=(srv.port,))
            rtt2 = _ping_rtt_us(srv)
            h.pop("latencies_ms", None)
            h["ping_rtt_us"] = (rtt + rtt2) / 2  # before and after: the floor of this run
            h["p50_rtt"] = h["p50_ms"] * 1000 / h["ping_rtt_us"]
            h["p99_rtt"] = h["p99_ms"] * 1000 / h["ping_rtt_us"]
            for side in ("to_grant_us", "after_grant_us"):
                if f"p50_{side}" in h:
                    h[f"p50_{side}_rtt"] = h[f"p50_{side}"] / h["ping_rtt_us"]
            out["handoff"][key] = h
        except Exception as e:  # noqa: BLE001
            out["errors"][f"handoff:{key}"] = str(e)
            B.log(f"issue32 hand-off {key}: {e}")


TRACE = re.compile(r"trace t=([0-9.]+)s held=(\d+) renewals=(\d+)")


def windows(trace: str, n: int, lease_ms: int) -> list:
    """Renewals per lock per renew interval (lease/3) in each window of
    WINDOW_S (or one interval when that is longer) of a `wlbench watchdog` run from its WLBENCH_TRACE lines (a sample every
    --sample-ms, the first window starting when the hold begins)."""
    interval_s = lease_ms / 3 / 1000
    # a window shorter than the interval sees the burst of an acquisition's renewals or the gap
    # after it (30 s leases: 0.2 and 1.8 in turn), not the rate: one interval at least
    width = max(WINDOW_S, interval_s)
    out = []
    edge, last = width, (0.0, 0)
    for m in TRACE.finditer(trace):
        t, ren = float(m.group(1)), int(m.group(3))
        if t >= edge - 0.125:  # the sample nearest the window's end
            span = t - last[0]
            out.append(round((ren - last[1]) / n / (span / interval_s), 3) if span > 0 and n > 0 else None)
            last, edge = (t, ren), edge + width
    return out


def _watchdog(srv, ws: dict, status: dict, out: dict) -> None:
    """Item 3: renewals per 5-second window from the first; acquisitions/s
    with N held (probe) and while acquiring N (the watchdog renewing those
    already taken)."""
    if "watchlock-c" in status:
        return
    lease = B.WD_LEASE_MS
    for n in [1] + ws["wd_counts"]:
        key = str(n)
        srv.command("FLUSHALL")
        hold = ws["wd_hold_s"] if n > 1 else 1.0
        B.log(f"issue32 watchdog: {n} locks, lease {lease} ms, {hold:g} s ({time.monotonic() - B.T0:.0f} s)")
        try:
            r, err = _run([B.WLBENCH, "watchdog", srv.url, "127.0.0.1", srv.port, n, lease, hold,
                           "--sample-ms", 250, "--probe", ws["probe"]],
                          timeout=hold * 2 + n * 0.004 + 600, env={"WLBENCH_TRACE": "1"})
        except Exception as e:  # noqa: BLE001
            out["errors"][f"watchdog:{key}"] = str(e)
            B.log(f"issue32 watchdog {key}: {e}")
            continue
        B.derive_watchdog(r)
        r["windows_renewals_per_interval"] = windows(err, n, lease)
        r["acquire_per_s_while_acquiring"] = n / r["acquire_s"] if r["acquire_s"] > 0 else None
        r["probe_acquire_per_s"] = 1e6 / (r["probe_acquire_us"] + r["probe_release_us"]) \
            if r.get("probe_acquire_us") else None
        out["watchdog"][key] = r
    srv.command("FLUSHALL")


def scenario_issue32(srv, scale: dict, status: dict) -> dict:
    ws = SCALES[scale["mode"]]
    out: dict = {"errors": {}, "cycles": {}, "handoff": {}, "watchdog": {}, "window_s": WINDOW_S}
    B.log(f"issue32: every kind's cycle ({time.monotonic() - B.T0:.0f} s)")
    _cycles(srv, scale, status, out)
    B.log(f"issue32: hand-off in round trips ({time.monotonic() - B.T0:.0f} s)")
    _handoffs(srv, ws, status, out)
    _watchdog(srv, ws, status, out)
    return out


# ---- targets and table -------------------------------------------------------------------


def targets(res: dict) -> list:
    """[(title, [(target, measured, verdict)])]"""
    s = res.get("issue32") or {}
    t = []
    if s.get("not_run") or not s:
        return [("Issue 32 targets (performance of the lock family)", [("issue 32 scenario", "not run (--only)",
                                                                        "n/a")])]
    cyc = s.get("cycles", {})
    for lang in ("c", "py"):
        base = cyc.get(f"{lang}:plain")
        for kind, _ in PY_KINDS[1:]:
            name = f"{'C' if lang == 'c' else 'Python'} {kind}: cycle <= {KIND_RATIO}x the plain lock's"
            if lang == "c" and kind.startswith("multi"):
                m = s.get("c_multi")
                if m and m.get("ratio"):
                    t.append((name, f"{m['ratio']:.2f}x (wlbench multi, interleaved)",
                              B.verdict(m["ratio"] <= KIND_RATIO)))
                else:
                    t.append((name, "not measured", "n/a"))
                continue
            me = cyc.get(f"{lang}:{kind}")
            if base and me:
                x = me["us_per_op"] / base["us_per_op"]
                t.append((name, f"{x:.2f}x ({me['us_per_op']:.1f} vs {base['us_per_op']:.1f} us; scripts/cycle "
                          f"{me['scripts_per_cycle']:.2f} vs {base['scripts_per_cycle']:.2f})",
                          B.verdict(x <= KIND_RATIO)))
            else:
                t.append((name, "not measured", "n/a"))
    m = s.get("c_multi_cluster")
    name = f"C multi-lock over 3 slots in Cluster (3 masters): cycle <= {MULTI_CLUSTER_RATIO}x the plain lock's"
    if m and m.get("ratio"):
        t.append((name, f"{m['ratio']:.2f}x ({m['multi_us_per_cycle']:.1f} vs {m['plain_us_per_cycle']:.1f} us, "
                  "wlbench multi, interleaved, pinned)", B.verdict(m["ratio"] <= MULTI_CLUSTER_RATIO)))
    else:
        t.append((name, "not measured", "n/a"))
    for kind, _ in HANDOFF_KINDS:
        h = s.get("handoff", {}).get(f"c:{kind}")
        what = "release-to-acquire" if kind == "plain" else "hand-off"
        if h is None:
            t.append((f"C {kind} {what}: p50 <= {HANDOFF_P50_RTT}x, p99 <= {HANDOFF_P99_RTT}x RTT", "not measured",
                      "n/a"))
            continue
        t.append((f"C {kind} {what} p50 <= {HANDOFF_P50_RTT}x PING RTT",
                  f"{h['p50_ms'] * 1000:.0f} us = {h['p50_rtt']:.2f}x RTT {h['ping_rtt_us']:.0f} us",
                  B.verdict(h["p50_rtt"] <= HANDOFF_P50_RTT)))
        t.append((f"C {kind} {what} p99 <= {HANDOFF_P99_RTT}x PING RTT",
                  f"{h['p99_ms'] * 1000:.0f} us = {h['p99_rtt']:.2f}x RTT",
                  B.verdict(h["p99_rtt"] <= HANDOFF_P99_RTT)))
        floor = s.get("handoff", {}).get("c:relay-2t")
        if kind != "plain" and floor:
            # the same hand-off on this machine with no watchlock and the waiter's two
            # threads: what the kind adds to it (info: the target reads the RTT)
            t.append((f"C {kind} hand-off p50 vs the machine's floor (relay, 2 threads)",
                      f"{h['p50_ms'] * 1000:.0f} vs {floor['p50_ms'] * 1000:.0f} us = "
                      f"{h['p50_ms'] / floor['p50_ms']:.2f}x", "info"))
        if kind != "plain":
            t.append((f"C {kind} hand-off: arrival order >= 99%, releaser share 0",
                      f"{h['in_order_frac'] * 100:.1f}% in order, releaser share {h['releaser_share']:.3f}",
                      B.verdict(h["in_order_frac"] >= 0.99 and h["same_holder_turns"] == 0)))
    for kind, _ in RELAYS:
        h = s.get("handoff", {}).get(f"c:{kind}")
        if h:
            t.append((f"the machine's hand-off floor, {kind} (no watchlock; info)",
                      f"p50 {h['p50_ms'] * 1000:.0f} us = {h['p50_rtt']:.2f}x RTT, p99 {h['p99_ms'] * 1000:.0f} us = "
                      f"{h['p99_rtt']:.2f}x RTT {h['ping_rtt_us']:.0f} us", "info"))
    for key, r in sorted(s.get("watchdog", {}).items(), key=lambda kv: int(kv[0])):
        if int(key) <= 1:
            continue
        w = [x for x in r.get("windows_renewals_per_interval", []) if x is not None]
        name = f"{int(key):,} locks: renewals/lock/interval <= {RENEW_PER_INTERVAL} in every {WINDOW_S:g} s window"
        if w:
            t.append((name, "windows " + " ".join(f"{x:.3f}" for x in w) + f"; lost {r['lost']}",
                      B.verdict(max(w) <= RENEW_PER_INTERVAL and r["lost"] == 0)))
            # below 1: renewals later than the interval (the watchdog behind the server), not a loss yet
            t.append((f"{int(key):,} locks: the watchdog keeps up (>= {KEEP_UP} in every window)",
                      f"lowest window {min(w):.3f}, lowest remaining lease "
                      f"{B.fmt((r.get('min_remaining_frac') or 0) * 100, '.0f')}%", B.verdict(min(w) >= KEEP_UP)))
        else:
            t.append((name, "not measured", "n/a"))
        if r.get("probe_acquire_per_s") and s.get("watchdog", {}).get("1", {}).get("probe_acquire_per_s"):
            zero = s["watchdog"]["1"]["probe_acquire_per_s"]
            x = r["probe_acquire_per_s"] / zero
            t.append((f"{int(key):,} held: acquire+release/s vs none held (not starved, >= {NOT_STARVED}x)",
                      f"{r['probe_acquire_per_s']:.0f}/s vs {zero:.0f}/s = {x:.2f}x", B.verdict(x >= NOT_STARVED)))
    return [("Issue 32 targets (performance of the lock family)", t)]


def table(res: dict) -> list:
    s = res.get("issue32") or {}
    lines = ["(k) Lock family performance (issue 32): ratios in one run"]
    if s.get("not_run") or not s:
        return lines + ["  not run (--only)", ""]
    cyc = s.get("cycles", {})
    for lang in ("c", "py"):
        base = cyc.get(f"{lang}:plain")
        row = []
        for kind, _ in PY_KINDS:
            me = cyc.get(f"{lang}:{kind}")
            if me:
                row.append(f"{kind} {me['us_per_op']:.1f} us" + (f" ({me['us_per_op'] / base['us_per_op']:.2f}x, "
                                                                 f"{me['scripts_per_cycle']:.2f} script calls)"
                                                                 if base else ""))
        m = s.get("c_multi") if lang == "c" else None
        if m:
            row.append(f"multi-lock, 3 names {m['multi_us_per_cycle']:.1f} us ({m['ratio']:.2f}x its own interleaved "
                       "plain)")
        m = s.get("c_multi_cluster") if lang == "c" else None
        if m:
            row.append(f"multi-lock, 3 slots on 3 Cluster masters {m['multi_us_per_cycle']:.1f} us ({m['ratio']:.2f}x "
                       f"the plain lock's {m['plain_us_per_cycle']:.1f} us on that cluster)")
        lines.append(f"  {'C' if lang == 'c' else 'Python'} cycle, pinned: " + "; ".join(row))
    lines.append("  (script calls per cycle from INFO commandstats; the plain lock's acquire is a MULTI/EXEC, not a "
                 "script: both take 2 round trips per cycle)")
    for kind, _ in HANDOFF_KINDS + RELAYS:
        h = s.get("handoff", {}).get(f"c:{kind}")
        if h:
            lines.append(f"  C {kind} hand-off (8 x 1 ms, {'queue' if kind == 'plain' else 'greedy'}): p50 {h['p50_ms'] * 1000:.0f} us "
                         f"({h['p50_rtt']:.2f}x RTT), p99 {h['p99_ms'] * 1000:.0f} us ({h['p99_rtt']:.2f}x RTT); "
                         f"PING RTT {h['ping_rtt_us']:.0f} us; {h['handoffs_per_s']:.0f} hand-offs/s; "
                         f"scripts/acquire {h.get('script_calls_per_acquire', 0):.2f}; "
                         f"in order {h['in_order_frac'] * 100:.1f}%; releaser share {h['releaser_share']:.3f}")
            if "p50_to_grant_us" in h:
                lines.append(f"    split at the grant (p50): release call to the grant {h['p50_to_grant_us']:.0f} us "
                             f"({h['p50_to_grant_us_rtt']:.2f}x RTT), the grant to acquire() returning "
                             f"{h['p50_after_grant_us']:.0f} us ({h['p50_after_grant_us_rtt']:.2f}x RTT); "
                             f"the server's time in scripts {h.get('script_us_per_acquire', float('nan')):.0f} us "
                             "per turn (INFO commandstats)")
    for key, r in sorted(s.get("watchdog", {}).items(), key=lambda kv: int(kv[0])):
        w = r.get("windows_renewals_per_interval", [])
        lines.append(f"  watchdog {int(key):>7,} locks (lease {r['lease_ms']} ms): renewals/lock/interval per "
                     f"{WINDOW_S:g} s window [{' '.join(B.fmt(x, '.3f') for x in w)}]; lost {r['lost']}; "
                     f"acquired at {B.fmt(r.get('acquire_per_s_while_acquiring'), '.0f')}/s while the watchdog "
                     f"renewed those taken; with all {int(key):,} held one more acquire+release "
                     f"{B.fmt(r.get('probe_acquire_per_s'), '.0f')}/s")
    lines.append("")
    return lines


def failures(res: dict) -> list:
    s = res.get("issue32") or {}
    bad = [f"issue32 {k}: {e}" for k, e in s.get("errors", {}).items()]
    for key, h in s.get("handoff", {}).items():
        if h["mutual_exclusion_violations"]:
            bad.append(f"issue32 hand-off {key}: {h['mutual_exclusion_violations']} mutual exclusion violations")
    for key, r in s.get("watchdog", {}).items():
        if r["lost"] or r["release_failures"]:
            bad.append(f"issue32 watchdog {key}: {r['lost']} lost, {r['release_failures']} release failures")
    return bad
