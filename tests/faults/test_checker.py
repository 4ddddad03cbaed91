"""Self-test of the history checker: it must find what is planted, and
nothing in a clean history. Run: python3 -m pytest tests/faults/test_checker.py"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import audit  # noqa: E402
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
    fence_log = log((f1, True, "c1:1"), (f2, True, "py1:1"), (f1, False, "c1:1"))
    # with the audit's grant times, or with tokens read as the clock, the same
    events = a.events + b.events
    audited = checker.check(events, {LOCK: {"counter": 3, "fence_log": fence_log}},
                            grants={f1: int(99.8 * MS) + RT_OFF, f2: int(499.8 * MS) + RT_OFF})
    assert audited["summary"]["violations"] == 1
    r = run(a, b, counter=3, fence_log=fence_log)
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


def cli_exit79_then_py1(spawn_ms, start_ms, op_ms, release_call_ms, exit_ms, next_ms, next_srv_ms):
    """cli1's hold (watchlock spawned, its job's start, one access, the job's
    release call, watchlock's exit 79), then py1's, granted at next_srv_ms."""
    c = H("cli1", "cli")
    c.ev("cli_spawn", spawn_ms, hold=1, lock=LOCK, pid=50)
    h1, f1 = c.acquire(start_ms)
    c.rmw(h1, op_ms, 0, f1)
    c.ev("release_call", release_call_ms, hold=h1, lock=LOCK)
    c.ev("cli_exit", exit_ms, hold=h1, lock=LOCK, code=79)
    b = H("py1", "python")
    h2, f2 = b.acquire(next_ms, srv_ms=next_srv_ms)
    b.rmw(h2, next_ms + 10, 1, f2)
    b.release(h2, next_ms + 50)
    return run(c, b, counter=2, fence_log=log((f1, True, "cli1:1"), (f2, True, "py1:1")))


def test_cli_exit_79_counts_as_told():
    r = cli_exit79_then_py1(90, 100, 110, 150, 1000, 1050, 1040)
    assert checker.failures(r) == [], r
    (loss,) = r["losses"]
    assert loss["how"] == "exit79" and loss["told_before"] and abs(loss["margin_ms"] - 40) < 0.01


def test_a_release_held_up_past_the_lease_is_no_late_telling():
    """A clean-clone run beside a CPU hog (scenario b): `watchlock run`'s COMMAND
    made its last access at 9418 ms and exited (release_call 9476); watchlock
    was held up, the lease ran out, py1 took over at 10223 and watchlock said
    exit 79 at 11561. Its owner had asked for the release before the takeover
    and did nothing after: released late, not a loss told late. The same
    history with an access after the release call still fails."""
    def history(last_op_ms):
        return cli_exit79_then_py1(8079, 9214, last_op_ms, 9476, 11561, 10224, 10223)
    r = history(9416)
    assert checker.failures(r) == [], r
    (loss,) = r["losses"]
    assert loss["class"] == "released late" and abs(loss["release_call_before_ms"] - 747) < 0.01
    assert r["summary"]["losses_running"] == 0 and r["summary"]["losses_released_late"] == 1
    r = history(9500)  # an access after its own release call: judged as a running holder's
    assert r["losses"][0]["class"] == "running" and checker.failures(r), r


def test_holds_are_ordered_by_their_grants_not_by_late_starts():
    """A clean-clone run (h-tree): a `watchlock run` was granted at 1000 ms, its
    COMMAND recorded its start only at 2400 (a stalled machine), after py1's hold
    granted at 2000 once the first lease ran out. By the server's grants (the
    audit) the tokens increase and py1's hold is nobody's takeover; ordered by
    the starts, the first hold's token came out of order and py1's hold looked
    taken over by it (before the checker ordered by grants)."""
    c, b = H("cli1", "cli"), H("py1", "python")
    c.ev("cli_spawn", 900, hold=1, lock=LOCK, pid=50)
    h1, f1 = c.acquire(2400, srv_ms=1000)
    c.told(h1, 1990, how="sigterm", reason="sigterm")
    c.ev("release_call", 2450, hold=h1, lock=LOCK)
    c.ev("cli_exit", 2500, hold=h1, lock=LOCK, code=79)
    h2, f2 = b.acquire(2001, srv_ms=2000)
    b.rmw(h2, 2010, 0, f2)
    b.release(h2, 2100)
    grants = {f1: int(1000 * MS) + RT_OFF, f2: int(2000 * MS) + RT_OFF}
    r = checker.check(c.events + b.events, {LOCK: {"counter": 1, "fence_log": log((f2, True, "py1:1"))}},
                      grants=grants)
    assert checker.failures(r) == [], r
    assert r["fence_order_errors"] == []
    (loss,) = r["losses"]
    assert loss["hold"] == "cli1:1" and loss["next"] == "py1:1" and loss["told_before"], loss


def test_a_token_a_few_numbers_above_a_seed_is_no_clock():
    """Without an audit, a token is read as the server's clock only where it
    seeded the counter. A waiter that called at 50 ms and got in at 300 ms,
    after c1's release, has c1's seed + 3 (numbers spent by contended
    attempts): read as a clock it is c1's grant time, inside the waiter's
    call, which would make c1 "taken over" at its own start."""
    a, b = H("c1"), H("c2")
    h1, f1 = a.acquire(100)
    a.rmw(h1, 110, 0, f1)
    a.release(h1, 290)
    b.hold += 1
    b.ev("acquired", 300, hold=b.hold, lock=LOCK, fence=f1 + 3, t_call=int(50 * MS))
    b.rmw(b.hold, 310, 1, f1 + 3)
    b.release(b.hold, 400)
    r = run(a, b, counter=2, fence_log=log((f1, True, "c1:1"), (f1 + 3, True, "c2:1")))
    assert checker.failures(r) == [] and r["losses"] == [], r["losses"]
    # with the audit's grant time (after c1's release), the same
    r = checker.check(a.events + b.events, {LOCK: {"counter": 2, "fence_log": log((f1, True, "c1:1"),
                                                                                   (f1 + 3, True, "c2:1"))}},
                      grants={f1 + 3: int(295 * MS) + RT_OFF, f1: int(99.8 * MS) + RT_OFF})
    assert checker.failures(r) == [] and r["losses"] == [], r["losses"]


# ---- the server-side audit (audit.py): MONITOR aligned with the replication stream

K, F = "watchlock:{L}", "watchlock:{L}:fence"
SEED = 1_000_000_000_000_100


class Streams:
    """Builds an audit directory: what MONITOR showed, what was replicated
    (the writes that took effect, as Redis rewrites them) and the markers."""

    def __init__(self, snapshot=None):
        self.ts = 1.0
        self.mon = ["# connect"]
        self.rep = ["# connect"]
        self.markers = []
        self.marker(snapshot or {})

    def _m(self, src, *args):
        self.ts += 0.001
        self.mon.append(f"{self.ts:.6f} [0 {src}] " + " ".join(f'"{a}"' for a in args))

    def _r(self, *args):
        self.rep.append(json.dumps([str(a) for a in args]))

    def at(self, px, back=0):
        """The replicated absolute expiry of a command back lines ago with a lease of px ms."""
        ts = float(self.mon[-1 - back].split(" ", 1)[0])
        return int(ts * 1000) + px

    def marker(self, snapshot):
        n = str(len(self.markers) + 1)
        self._m("127.0.0.1:9", "EVAL", "body", "1", audit.MARKER_KEY, n)
        self._m("lua", "SET", audit.MARKER_KEY, n)
        self._r("SET", audit.MARKER_KEY, n)
        self.markers.append({"n": n, "keys": dict(snapshot)})

    def fast(self, src, ident, got, fence_set=False):
        """The fast acquire's pipeline: SET NX, SET fence 0 NX, INCR."""
        self._m(src, "SET", K, ident, "NX", "PX", "1000")
        if got:
            self._r("SET", K, ident, "PXAT", self.at(1000))
        self._m(src, "SET", F, "0", "NX", "PX", "86400000")
        if fence_set:
            self._r("SET", F, "0", "PXAT", self.at(86400000))
        self._m(src, "INCR", F)
        self._r("INCR", F)

    def acquire_script(self, src, ident, got):
        self._m(src, "EVALSHA", "sha1", "2", K, F, ident, "1000", "86400000")
        self._m("lua", "SET", K, ident, "NX", "PX", "1000")
        if not got:
            self._m("lua", "GET", K)
            self._m("lua", "PTTL", K)
            return
        self._m("lua", "INCR", F)
        self._r("MULTI")
        self._r("SET", K, ident, "PXAT", self.at(1000, 1))
        self._r("INCR", F)
        self._r("EXEC")

    def renew(self, src, ident, wrote):
        self._m(src, "EVALSHA", "sha2", "1", K, ident, "1", "1000")
        self._m("lua", "MGET", K)
        if wrote:
            self._m("lua", "PEXPIRE", K, "1000")
            self._r("PEXPIREAT", K, self.at(1000))

    def release(self, src, prefix, deleted):
        self._m(src, "EVALSHA", "sha3", "1", K, prefix, "watchlock:{L}:released", "PUBLISH")
        self._m("lua", "GET", K)
        if deleted:
            self._m("lua", "DEL", K)
            self._m("lua", "PUBLISH", "watchlock:{L}:released", "")
            self._r("MULTI")
            self._r("DEL", K)
            self._r("PUBLISH", "watchlock:{L}:released", "")
            self._r("EXEC")

    def expired(self, key=K):
        self._r("DEL", key)

    def write(self, d):
        self.marker({})                              # Auditor.stop's last marker
        (d / "monitor.log").write_text("\n".join(self.mon) + "\n")
        (d / "replica.log").write_text("\n".join(self.rep) + "\n")
        (d / "markers.jsonl").write_text("".join(json.dumps(m) + "\n" for m in self.markers))
        return audit.audit(str(d))


def test_audit_finds_a_late_renewal_that_touched_the_next_hold(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)                 # fence SEED+1
    s.renew("a:2", "aaa.1", wrote=True)
    s.fast("b:1", "bbb.1", got=False)                # held by aaa: its SET NX did nothing (SEED+2 spent)
    s.acquire_script("b:1", "bbb.1", got=False)
    s.expired()                                      # aaa's key ran out
    s.acquire_script("b:1", "bbb.1", got=True)       # fence SEED+3
    s.renew("a:2", "aaa.1", wrote=False)             # late, did nothing: fine
    s.renew("a:2", "aaa.1", wrote=True)              # late, and it wrote: the bug
    s.release("a:3", "aaa.", deleted=False)          # late release, nothing deleted
    s.release("b:2", "bbb.", deleted=True)
    s.fast("c:1", "ccc.1", got=True)                 # fence SEED+4
    r = s.write(tmp_path)
    assert r["errors"] == [] and r["overwrites"] == [] and r["segments"] == 2
    assert r["acquires"] == 3
    assert len(r["touches"]) == 1 and r["touches"][0]["prefix"] == "aaa." and r["touches"][0]["kind"] == "renew"
    assert len(r["late_writes"]) == 3
    assert r["fence_of"] == {"aaa.": SEED + 1, "bbb.": SEED + 3, "ccc.": SEED + 4}
    h = audit.handoffs_by_fence(r)
    assert h[SEED + 3] == ("expiry", SEED + 1)
    assert h[SEED + 4] == ("release", SEED + 3)


def test_audit_tells_a_fast_acquire_that_got_the_key_from_one_that_did_not(tmp_path):
    # the same MONITOR lines; only the replication stream differs
    for got in (True, False):
        s = Streams({F: str(SEED)})
        s.fast("a:1", "aaa.1", got=got)
        s.release("a:1", "aaa.", deleted=got)
        d = tmp_path / str(got)
        d.mkdir()
        r = s.write(d)
        assert r["errors"] == [] and r["touches"] == []
        assert r["acquires"] == (1 if got else 0)
        assert r["fence_of"] == ({"aaa.": SEED + 1} if got else {})


def test_audit_tells_a_retry_from_the_attempt_that_found_the_key_held(tmp_path):
    """A waiter's attempts carry the same identity; only the replicated
    absolute expiry (the server's clock) tells which one took the key."""
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)                 # SEED+1
    s.acquire_script("b:1", "bbb.1", got=False)      # held: nothing replicated
    s.ts += 1.0                                      # aaa's holder is frozen: nothing else happens
    s.expired()
    t_retry = s.ts + 0.001
    s.acquire_script("b:1", "bbb.1", got=True)       # the same command, 1 s later: SEED+2
    r = s.write(tmp_path)
    assert r["errors"] == [] and r["overwrites"] == []
    g = audit.grants_by_fence(r)
    assert abs(g[SEED + 2] / 1e9 - t_retry) < 1e-6  # the retry's time
    assert g[SEED + 2] - g[SEED + 1] > 0.9e9
    assert audit.handoffs_by_fence(r)[SEED + 2] == ("expiry", SEED + 1)


def test_audit_finds_a_release_of_another_hold(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)
    s.release("b:1", "bbb.", deleted=True)           # bbb never held it: must not delete
    r = s.write(tmp_path)
    assert [(t["prefix"], t["kind"]) for t in r["touches"]] == [("bbb.", "release")]


def test_audit_finds_an_acquire_over_a_held_key_and_its_own_loss_of_track(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)
    s.fast("b:1", "bbb.1", got=True)                 # a SET NX that took a held key
    s._r("SET", "other", "x")                        # a write no command explains
    r = s.write(tmp_path)
    assert len(r["overwrites"]) == 1 and r["overwrites"][0]["by"] == "bbb.1"
    assert len(r["errors"]) == 1 and "other" in r["errors"][0]


def test_audit_checks_its_model_against_the_next_marker(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)
    s.marker({K: "aaa.1", F: str(SEED + 1)})         # agrees
    s.renew("a:2", "aaa.1", wrote=True)
    s.marker({K: "zzz.1", F: str(SEED + 1)})         # the server says otherwise
    r = s.write(tmp_path)
    assert r["segments"] == 4
    assert len(r["errors"]) == 1 and "zzz.1" in r["errors"][0]


def test_audit_starts_afresh_after_a_gap(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)
    s.mon.append("# connect")                        # the server restarted: both streams reconnect
    s.rep.append("# connect")
    s.mon.append('0.5 [0 127.0.0.1:7] "GET" "x"')   # before the next marker: not audited
    s.marker({K: "aaa.1", F: str(SEED + 1)})         # the hold survived (AOF)
    s.renew("a:2", "aaa.1", wrote=True)
    s.release("a:2", "aaa.", deleted=True)
    s.fast("b:1", "bbb.1", got=True)
    r = s.write(tmp_path)
    assert r["errors"] == [] and r["touches"] == [] and r["segments"] == 3 and r["unaudited"] == 1
    assert audit.handoffs_by_fence(r)[SEED + 2] == ("release", SEED + 1)


def test_audit_hand_off_unseen_in_a_gap(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)                 # SEED+1
    s.mon.append("# connect")
    s.rep.append("# connect")
    s.marker({K: "bbb.1", F: str(SEED + 2)})         # bbb got in while the audit was away
    s.release("b:1", "bbb.", deleted=True)
    s.fast("c:1", "ccc.1", got=True)                 # SEED+3
    r = s.write(tmp_path)
    assert r["errors"] == [] and r["touches"] == []
    assert r["handoffs"]["bbb."] == ("aaa.", "gap")
    assert audit.handoffs_by_fence(r)[SEED + 3] == ("release", None)  # bbb's fence was not seen


def test_audit_clean_stream_has_no_touch(tmp_path):
    s = Streams({F: str(SEED)})
    s.fast("a:1", "aaa.1", got=True)
    s.renew("a:2", "aaa.1", wrote=True)
    s.release("a:1", "aaa.", deleted=True)
    s.fast("b:1", "bbb.1", got=True)
    s.renew("b:2", "bbb.1", wrote=True)
    s.marker({K: "bbb.1", F: str(SEED + 2)})
    r = s.write(tmp_path)
    assert r["touches"] == [] and r["late_writes"] == [] and r["errors"] == [] and r["overwrites"] == []
    assert r["acquires"] == 2 and r["renewals"] == 2 and r["releases"] == 1


def test_audit_follows_a_real_server(tmp_path):
    """The streams of a real redis-server: fast and scripted acquires of the
    library, an expiry, and a planted buggy renewal (no identity check) that
    extends the next holder's key."""
    import watchlock
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
    from redis_server import RedisServer
    from common import Redis
    srv = RedisServer().start()
    au = None
    try:
        au = audit.Auditor(srv.port, str(tmp_path)).start()
        with watchlock.Client(srv.url) as c:
            for _ in range(3):                       # the first acquire of a name is scripted, then fast
                with c.lock("L"):
                    pass
            a = c.lock("L", ttl=0.2, auto_renew=False)
            assert a.acquire()                       # left to run out
            b = c.lock("L", ttl=5)
            assert b.acquire(timeout=5)              # gets in after the expiry
            ident = Redis(srv.port).call("GET", K)
            # a renewal without the identity check, by a hold that is not the owner
            buggy = ("local v = redis.call('MGET', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1")
            Redis(srv.port).call("EVAL", buggy, 1, K, "f" * 32 + ".1", 1, 5000)
            b.release()
        au.stop()
        au = None
        r = audit.audit(str(tmp_path))
    finally:
        if au is not None:
            au.close()
        srv.stop()
    assert r["errors"] == [] and r["overwrites"] == [] and r["unaudited"] == 0, r
    assert r["acquires"] == 5 and r["releases"] == 4
    assert [(t["prefix"], t["owner"]) for t in r["touches"]] == [("f" * 32 + ".", ident)]
    h = audit.handoffs_by_fence(r)
    fences = sorted(h)
    assert len(fences) == 5 and all(f >= 10 ** 15 for f in fences)
    assert [h[f][0] for f in fences] == ["first", "release", "release", "release", "expiry"]


# ---- queued kinds (issues 22, 23): checker.check_family -----------------------


def fam_hold(h, t_ms, end_ms, **meta):
    """A hold of a queued kind from t_ms to end_ms: acquired (with the kind's
    fields), one GET at the start and one at the end, released."""
    hold, fence = h.acquire(t_ms)
    h.events[-1].update({"base": LOCK, **meta})
    h.ev("op", t_ms + 0.2, hold=hold, lock=LOCK, op="get", t0=int(t_ms * MS), t1=int((t_ms + 0.2) * MS), read=0)
    h.ev("op", end_ms, hold=hold, lock=LOCK, op="get", t0=int((end_ms - 0.2) * MS), t1=int(end_ms * MS), read=0)
    h.release(hold, end_ms + 0.1)
    return hold


def test_family_semaphore_permits():
    a, b, c = H("a"), H("b"), H("c")
    fam_hold(a, 100, 200, kind="sem", permits=2, of=3)
    fam_hold(b, 120, 180, kind="sem", permits=1, of=3)  # 2 + 1 = 3: fine
    out = checker.check_family(a.events + b.events + c.events)
    assert out["permit_violations"] == [] and out["max_permits_in_use"] == 3
    fam_hold(c, 150, 170, kind="sem", permits=1, of=3)  # 2 + 1 + 1 = 4 > 3
    out = checker.check_family(a.events + b.events + c.events)
    assert len(out["permit_violations"]) == 1 and out["permit_violations"][0]["in_use"] == 4
    assert checker.family_failures(out)


def test_family_rwlock_sides():
    a, b, c = H("a"), H("b"), H("c")
    fam_hold(a, 100, 200, kind="rw", side="read")
    fam_hold(b, 120, 180, kind="rw", side="read")  # readers overlap: fine
    fam_hold(c, 300, 350, kind="rw", side="write")
    out = checker.check_family(a.events + b.events + c.events)
    assert out["shared_violations"] == [] and out["max_readers"] == 2
    d = H("d")
    fam_hold(d, 320, 330, kind="rw", side="read")  # a reader inside the writer's hold
    out = checker.check_family(a.events + b.events + c.events + d.events)
    assert len(out["shared_violations"]) == 1
    assert out["shared_violations"][0]["earlier_side"] == "write"


def test_family_fair_order():
    a, b, c = H("a"), H("b"), H("c")
    fam_hold(a, 100, 200, kind="fair")
    b.ev("acquire_failed", 60, lock=LOCK, t_call=50 * MS, status="timeout", detail="")  # not b's first call
    fam_hold(b, 201, 300, kind="fair")
    b.events[-5]["t_call"] = 110 * MS  # b asked at 110, c at 150: b first
    fam_hold(c, 301, 400, kind="fair")
    c.events[-5]["t_call"] = 150 * MS
    out = checker.check_family(a.events + b.events + c.events)
    assert out["fifo_inversions"] == [] and out["fifo_checked"] >= 1
    b.events[-5]["t_call"], c.events[-5]["t_call"] = 150 * MS, 110 * MS  # c asked first, b got it first
    # c's first acquire call: it opened its connections, 40 ms is within the first call's margin
    out = checker.check_family(a.events + b.events + c.events)
    assert out["fifo_inversions"] == []
    c.ev("acquire_failed", 50, lock=LOCK, t_call=40 * MS, status="timeout", detail="")  # an earlier call of c
    out = checker.check_family(a.events + b.events + c.events)
    assert len(out["fifo_inversions"]) == 1 and out["fifo_inversions"][0]["older"] == "c:1"
    # a fault on the older waiter while it waited excuses it
    fault = {"ev": "fault", "w": "runner", "t": 120 * MS, "kind": "sigstop", "target": "c", "t0": 120 * MS,
             "t1": 140 * MS}
    out = checker.check_family(a.events + b.events + c.events + [fault])
    assert out["fifo_inversions"] == []


# ---- time bounds derived in the run (issue 31.6): common.LagProbe, bound_check ----

import common  # noqa: E402


def probe_with(samples):
    p = common.LagProbe()
    p.samples = [(int(t * MS), int(lag * MS)) for t, lag in samples]
    return p


def test_slack_grows_with_the_measured_delay_but_never_reaches_the_cap():
    p = probe_with([(100, 1), (200, 2), (300, 150), (400, 1), (2000, 5000)])
    assert p.worst_ms(0, 150 * MS) == 2  # the first wake-up after the window counts too
    assert p.worst_ms(150 * MS, 250 * MS) == 150  # (it was due at 150 and slept through the window)
    assert p.slack_ms(0, 150 * MS, 200, 900) == 200 + 4 * 2  # idle: about the base
    assert p.slack_ms(250 * MS, 350 * MS, 200, 900) == 200 + 4 * 150  # loaded: the scheduling delay seen
    assert p.slack_ms(1500 * MS, 2500 * MS, 200, 900) == 900  # never the cap's worth
    assert checker._slack(None, 0, 1, 5, 100) == 5  # no probe: the fixed base


def test_a_takeover_that_waits_an_extra_lease_fails_however_loaded():
    lease = 1000
    p = probe_with([(t, 10_000) for t in range(0, 5000, 5)])  # a machine frozen for seconds
    bound = lease + p.slack_ms(0, 5000 * MS, 200, 0.9 * lease)
    desc, ok = common.bound_check("takeover", [(1618.0, bound)], "derived")
    assert ok, desc  # the loaded run of the last session: within its derived bound
    desc, ok = common.bound_check("takeover", [(900.0, bound), (2 * lease + 5, bound)], "derived")
    assert not ok and "1 over" in desc  # a whole extra lease: still a failure
    assert not common.bound_check("takeover", [], "derived")[1]  # nothing measured is no pass


def test_family_fair_order_margin_follows_the_measured_delay():
    a, b, c = H("a"), H("b"), H("c")
    fam_hold(a, 100, 200, kind="fair")
    for h in (b, c):  # earlier calls: the ones below are not their first
        h.ev("acquire_failed", 20, lock=LOCK, t_call=10 * MS, status="timeout", detail="")
    fam_hold(b, 201, 300, kind="fair")
    b.events[-5]["t_call"] = 150 * MS
    fam_hold(c, 301, 400, kind="fair")
    c.events[-5]["t_call"] = 110 * MS  # c asked 40 ms before b, b got it first
    events = a.events + b.events + c.events
    assert len(checker.check_family(events)["fifo_inversions"]) == 1
    # c's thread was descheduled 30 ms right after its call: its request may have come after b's
    loaded = probe_with([(t, 30 if 110 <= t <= 120 else 0) for t in range(0, 500, 5)])
    assert checker.check_family(events, slack=loaded.slack_ms)["fifo_inversions"] == []
    idle = probe_with([(t, 0.1) for t in range(0, 500, 5)])
    assert len(checker.check_family(events, slack=idle.slack_ms)["fifo_inversions"]) == 1


def test_told_late_only_by_the_measured_delay_passes():
    """`watchlock run`'s COMMAND records its SIGTERM when its handler runs: 8 ms after
    the takeover beside a CPU hog (short mode, scenario b). Within the scheduling delay
    measured there it counts as told late on a stalled machine (not a failure); on an
    idle machine, or 300 ms late, it fails."""
    def history(told_ms):
        a, b = H("cli1", "cli"), H("py1", "python")
        h1, f1 = a.acquire(100)
        a.rmw(h1, 110, 0, f1)
        a.told(h1, told_ms, how="sigterm", reason="sigterm")
        h2, f2 = b.acquire(1031, srv_ms=1030)
        b.rmw(h2, 1040, 1, f2)
        b.release(h2, 1100)
        return a.events + b.events, {LOCK: {"counter": 2, "fence_log": log((f1, True, "cli1:1"),
                                                                          (f2, True, "py1:1"))}}
    loaded = probe_with([(t, 20 if 1000 <= t <= 1100 else 0.1) for t in range(0, 2000, 5)])
    idle = probe_with([(t, 0.1) for t in range(0, 2000, 5)])
    events, res = history(1038)
    r = checker.check(events, res, slack=loaded.slack_ms)
    assert checker.failures(r) == [] and r["losses"][0]["stalled_late_ms"] == 8, r["losses"]
    assert r["summary"]["told_late_stalled"] == 1 and r["summary"]["told_before"] == 0
    assert checker.failures(checker.check(events, res, slack=idle.slack_ms))
    assert checker.failures(checker.check(events, res))  # no measurement: no allowance
    events, res = history(1330)  # told at the expiry's side, not before it
    assert checker.failures(checker.check(events, res, slack=loaded.slack_ms))
