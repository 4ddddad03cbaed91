"""Self-test of the history checker: it must find what is planted, and
nothing in a clean history. Run: python3 -m pytest tests/faults/test_checker.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

MS = 1_000_000
RT_OFF = 1_700_000_000_000_000_000  # realtime - monotonic, ns
LOCK = "L"


class H:
    """Builds one worker's history."""

    def __init__(self, w, lang="c"):
        self.w = w
        self.events = [{"ev": "start", "w": w, "t": 0, "lang": lang, "pid": hash(w) % 10000, "rt_off": RT_OFF}]
        self.hold = 0

    def ev(self, ev, t_ms, **kw):
        self.events.append({"ev": ev, "w": self.w, "t": int(t_ms * MS), **kw})

    def acquire(self, t_ms, srv_ms=None):
        """A hold acquired at t_ms (client) whose token is the server clock at srv_ms."""
        self.hold += 1
        srv = t_ms - 0.2 if srv_ms is None else srv_ms
        fence = (int(srv * MS) + RT_OFF) // 1000
        self.ev("acquired", t_ms, hold=self.hold, lock=LOCK, fence=fence, t_call=int((srv - 0.3) * MS))
        return self.hold, fence

    def rmw(self, hold, t_ms, read, fence, accepted=True, seq=None, took_ms=0.2):
        """GET, SET+1, fenced write; seq: the resource's sequence number of the GET."""
        s = {} if seq is None else {"seq": seq}
        self.ev("op", t_ms + took_ms, hold=hold, lock=LOCK, op="get", t0=int(t_ms * MS),
                t1=int((t_ms + took_ms) * MS), read=read, **s)
        t0 = int((t_ms + 0.3) * MS)
        s = {} if seq is None else {"seq": seq + 1}
        self.ev("op_begin", t_ms + 0.3, hold=hold, lock=LOCK, op="set", t0=t0, wrote=read + 1)
        self.ev("op_end", t_ms + 0.5, hold=hold, lock=LOCK, op="set", t0=t0, t1=int((t_ms + 0.5) * MS),
                wrote=read + 1, read=read, **s)
        t0 = int((t_ms + 0.6) * MS)
        s = {} if seq is None else {"seq": seq + 2}
        self.ev("op_begin", t_ms + 0.6, hold=hold, lock=LOCK, op="fence", t0=t0, token=fence)
        self.ev("op_end", t_ms + 0.8, hold=hold, lock=LOCK, op="fence", t0=t0, t1=int((t_ms + 0.8) * MS),
                token=fence, accepted=accepted, **s)

    def release(self, hold, t_ms, result="ok"):
        self.ev("release_call", t_ms, hold=hold, lock=LOCK)
        self.ev("released", t_ms + 0.3, hold=hold, lock=LOCK, result=result)

    def told(self, hold, t_ms, how="callback", reason="connection lost"):
        self.ev("told", t_ms, hold=hold, lock=LOCK, how=how, reason=reason)


def log(*entries):
    """Fence log lines from (token, accepted, tag) in the resource's order."""
    out, top = [], 0
    for tok, ok, tag in entries:
        out.append(f"{tok} {1 if ok else 0} {tag} {top}")
        if ok:
            top = max(top, tok)
    return out


def run(*workers, counter, fence_log, faults=()):
    events = [e for w in workers for e in w.events] + list(faults)
    return checker.check(events, {LOCK: {"counter": counter, "fence_log": fence_log}})


def clean_history():
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.rmw(h1, 110, 0, f1)
    a.release(h1, 200)
    h2, f2 = b.acquire(202)
    b.rmw(h2, 210, 1, f2)
    b.release(h2, 300)
    return a, b, f1, f2


def test_clean_history_passes():
    a, b, f1, f2 = clean_history()
    r = run(a, b, counter=2, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1")))
    assert checker.failures(r) == [], r
    assert r["summary"]["holds"] == 2
    assert r["summary"]["violations"] == 0
    assert r["losses"] == []


def test_clean_loss_told_before_takeover_passes():
    """c1 is told at 1000 ms (the deadline), py1 gets in at 1030 ms on the server."""
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.rmw(h1, 110, 0, f1)
    a.told(h1, 1000)
    a.ev("told", 1300, hold=h1, lock=LOCK, how="check", reason="connection lost")
    a.release(h1, 1300, result="lost")
    h2, f2 = b.acquire(1031, srv_ms=1030)
    b.rmw(h2, 1040, 1, f2)
    b.release(h2, 1100)
    r = run(a, b, counter=2, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1")))
    assert checker.failures(r) == [], r
    (loss,) = r["losses"]
    assert loss["class"] == "running" and loss["told_before"]
    assert abs(loss["margin_ms"] - 30) < 0.01


def test_planted_violation_is_found():
    """c1 keeps writing after py1 got the lock, and was never told."""
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.rmw(h1, 110, 0, f1)
    h2, f2 = b.acquire(500)
    b.rmw(h2, 510, 1, f2)
    a.rmw(h1, 520, 2, f1, accepted=False)  # GET and SET act; the fence rejects its write
    b.release(h2, 600)
    a.release(h1, 700, result="lost")
    r = run(a, b, counter=3, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1"), (f1, False, "c1:1")))
    fails = checker.failures(r)
    assert r["summary"]["violations"] == 1
    v = r["violations"][0]
    assert (v["earlier"], v["later"], v["told_before"]) == ("c1:1", "py1:1", False)
    assert any("violation" in f for f in fails)
    # the loss was only found at release, after the takeover
    (loss,) = [x for x in r["losses"] if x["hold"] == "c1:1"]
    assert loss["class"] == "running" and not loss["told_before"]
    assert r["summary"]["stale_rejected"] == 1 and r["summary"]["stale_accepted"] == 0


def test_reply_after_the_next_hold_began_is_judged_by_the_resource_order():
    """c1's last GET was sent before py1's acquire returned and answered after
    it: fine if the resource ran it before py1's first access, a violation
    if after."""
    for c1_seq, violations in ((1, 0), (5, 1)):
        a, b = H("c1"), H("py1", "python")
        h1, f1 = a.acquire(100)
        a.ev("op", 1015, hold=h1, lock=LOCK, op="get", t0=990 * MS, t1=1015 * MS, read=0, seq=c1_seq)
        a.told(h1, 995)
        a.release(h1, 1016, result="lost")
        h2, f2 = b.acquire(1010, srv_ms=1009)
        b.rmw(h2, 1011, 0, f2, seq=2 if c1_seq == 1 else 1)
        b.release(h2, 1100)
        r = run(a, b, counter=1, fence_log=log((f2, True, "py1:1")))
        assert r["summary"]["violations"] == violations, r["violations"]


def test_lost_update_is_found():
    """Both holders read 0 and write 1: one increment is lost."""
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    h2, f2 = b.acquire(300)
    a.rmw(h1, 290, 0, f1)
    b.rmw(h2, 310, 0, f2)
    a.release(h1, 400, result="lost")
    b.release(h2, 400)
    r = run(a, b, counter=1, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1")))
    assert r["summary"]["lost_updates"] == 1
    assert r["locks"][LOCK]["duplicate_values"] == 1
    assert any("lost update" in f for f in checker.failures(r))


def test_stale_fenced_write_accepted_is_found():
    """The resource accepted a token below one it had accepted before."""
    a, b, f1, f2 = clean_history()
    r = run(a, b, counter=2, fence_log=[f"{f2} 1 py1:1 0", f"{f1} 1 c1:1 {f2}"])
    assert r["summary"]["stale_accepted"] == 1
    assert any("stale fenced" in f for f in checker.failures(r))


def test_acted_after_told_is_found():
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.told(h1, 150)
    a.rmw(h1, 160, 0, f1)  # wrote after it knew
    a.release(h1, 170, result="lost")
    h2, f2 = b.acquire(1200)
    b.rmw(h2, 1210, 1, f2)
    b.release(h2, 1300)
    r = run(a, b, counter=2, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1")))
    assert r["summary"]["acted_after_told"] == 3
    assert r["summary"]["violations"] == 0
    assert any("after the holder was told" in f for f in checker.failures(r))


def test_counter_in_doubt_is_allowed():
    """A SET sent by a holder killed before the reply may or may not count."""
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.ev("op", 110.2, hold=h1, lock=LOCK, op="get", t0=110 * MS, t1=int(110.2 * MS), read=0)
    a.ev("op_begin", 110.3, hold=h1, lock=LOCK, op="set", t0=int(110.3 * MS), wrote=1)
    kill = {"ev": "fault", "w": "runner", "t": 111 * MS, "kind": "sigkill", "target": "c1", "t0": 111 * MS}
    h2, f2 = b.acquire(1100)
    b.rmw(h2, 1110, 1, f2)
    b.release(h2, 1200)
    r = run(a, b, counter=2, fence_log=log((f2, True, "py1:1")), faults=[kill])
    assert checker.failures(r) == [], r
    (loss,) = r["losses"]
    assert loss["class"] == "killed" and abs(loss["takeover_srv_ms"] - 988.8) < 0.01


def test_frozen_holder_that_learns_before_acting_passes():
    """c1 is stopped (SIGSTOP) while idle, py1 takes over, c1 resumes and is
    told before it touches anything: no violation; then it acts anyway."""
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.rmw(h1, 110, 0, f1)
    stop = {"ev": "fault", "w": "runner", "t": 200 * MS, "kind": "sigstop", "target": "c1",
            "t0": 200 * MS, "t1": 2200 * MS}
    h2, f2 = b.acquire(1200)
    b.rmw(h2, 1210, 1, f2)
    b.release(h2, 1300)
    a.told(h1, 2201, reason="expired")
    a.release(h1, 2300, result="lost")
    r = run(a, b, counter=2, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1")), faults=[stop])
    assert checker.failures(r) == [], r
    (loss,) = r["losses"]
    assert loss["class"] == "frozen" and abs(loss["told_after_resume_ms"] - 1) < 0.01
    # the same, but c1 writes after the resume before it learns: a violation
    a.rmw(h1, 2200.5, 2, f1, accepted=False)
    r = run(a, b, counter=3, fence_log=log((f1, True, "c1:1"), (f2, True, "py1:1"), (f1, False, "c1:1")),
            faults=[stop])
    assert r["summary"]["violations"] == 1


def test_fence_out_of_order_is_found():
    a, b = H("c1"), H("py1", "python")
    h1, f1 = a.acquire(100)
    a.rmw(h1, 110, 0, f1)
    a.release(h1, 200)
    b.hold += 1
    b.ev("acquired", 300, hold=1, lock=LOCK, fence=f1 - 5)
    b.rmw(1, 310, 1, f1 - 5, accepted=False)
    b.release(1, 400)
    r = run(a, b, counter=2, fence_log=log((f1, True, "c1:1"), (f1 - 5, False, "py1:1")))
    assert r["summary"]["fence_order_errors"] == 1
    assert any("out of order" in f for f in checker.failures(r))


def test_cli_exit_79_counts_as_told():
    c = H("cli1", "cli")
    c.ev("cli_spawn", 90, hold=1, lock=LOCK, pid=50)
    h1, f1 = c.acquire(100)
    c.rmw(h1, 110, 0, f1)
    c.ev("release_call", 150, hold=h1, lock=LOCK)
    c.ev("cli_exit", 1000, hold=h1, lock=LOCK, code=79)
    b = H("py1", "python")
    h2, f2 = b.acquire(1050, srv_ms=1040)
    b.rmw(h2, 1060, 1, f2)
    b.release(h2, 1100)
    r = run(c, b, counter=2, fence_log=log((f1, True, "cli1:1"), (f2, True, "py1:1")))
    assert checker.failures(r) == [], r
    (loss,) = r["losses"]
    assert loss["how"] == "exit79" and loss["told_before"] and abs(loss["margin_ms"] - 40) < 0.01


# ---- the MONITOR audit (audit.py)

def _acquire_lines(ts, ident, fence, ok=True):
    out = [f'{ts} [0 127.0.0.1:5001] "EVALSHA" "sha1" "3" "watchlock:{{L}}" "watchlock:{{L}}:fence" '
           f'"watchlock:{{L}}:owner" "{ident}" "1000" "86400000" "host" "1" "label"',
           f'{ts} [0 lua] "GET" "watchlock:{{L}}:fence"',
           f'{ts} [0 lua] "TIME"',
           f'{ts} [0 lua] "SET" "watchlock:{{L}}" "{ident}" "NX" "PX" "1000"']
    if not ok:
        return out + [f'{ts} [0 lua] "GET" "watchlock:{{L}}"', f'{ts} [0 lua] "PTTL" "watchlock:{{L}}"']
    return out + [f'{ts} [0 lua] "SET" "watchlock:{{L}}:fence" "{fence}" "PX" "86400000"',
                  f'{ts} [0 lua] "DEL" "watchlock:{{L}}:owner"',
                  f'{ts} [0 lua] "HSET" "watchlock:{{L}}:owner" "token" "x." "host" "h" "pid" "1" "label" "l"']


def _renew_lines(ts, prefix, wrote):
    out = [f'{ts} [0 127.0.0.1:5002] "EVALSHA" "sha2" "1" "watchlock:{{L}}" "{prefix}" "1" "1" "1000"',
           f'{ts} [0 lua] "GET" "watchlock:{{L}}"']
    if wrote:
        out.append(f'{ts} [0 lua] "PEXPIRE" "watchlock:{{L}}" "1000"')
    return out


def _release_lines(ts, prefix, deleted):
    out = [f'{ts} [0 127.0.0.1:5003] "EVALSHA" "sha3" "1" "watchlock:{{L}}" "{prefix}" "watchlock:{{L}}:released"',
           f'{ts} [0 lua] "GET" "watchlock:{{L}}"']
    if deleted:
        out += [f'{ts} [0 lua] "DEL" "watchlock:{{L}}"', f'{ts} [0 lua] "PUBLISH" "watchlock:{{L}}:released" ""']
    return out


def test_audit_finds_a_late_renewal_that_touched_the_next_hold(tmp_path):
    import audit
    lines = (_acquire_lines(1.0, "aaa.1", 100) + _renew_lines(1.3, "aaa.", True)
             + _acquire_lines(2.0, "bbb.1", 150, ok=False)  # held by aaa: refused
             + _acquire_lines(3.0, "bbb.1", 200)          # aaa's key expired (no DEL seen)
             + _renew_lines(3.1, "aaa.", False)           # late, did nothing: fine
             + _renew_lines(3.2, "aaa.", True)            # late, and it wrote: the bug
             + _release_lines(3.3, "aaa.", False)         # late release, nothing deleted
             + _release_lines(3.5, "bbb.", True)
             + _acquire_lines(3.6, "ccc.1", 300))
    p = tmp_path / "monitor.log"
    p.write_text("\n".join(lines) + "\n")
    r = audit.audit(str(p))
    assert r["acquires"] == 3
    assert len(r["touches"]) == 1 and r["touches"][0]["prefix"] == "aaa."
    assert len(r["late_writes"]) == 3
    h = audit.handoffs_by_fence(r)
    assert h[200] == ("expiry", 100)
    assert h[300] == ("release", 200)


def test_audit_clean_stream_has_no_touch(tmp_path):
    import audit
    lines = (_acquire_lines(1.0, "aaa.1", 100) + _renew_lines(1.3, "aaa.", True) + _release_lines(1.5, "aaa.", True)
             + _acquire_lines(1.6, "bbb.1", 200) + _renew_lines(1.9, "bbb.", True))
    p = tmp_path / "monitor.log"
    p.write_text("\n".join(lines) + "\n")
    r = audit.audit(str(p))
    assert r["touches"] == [] and r["late_writes"] == []
