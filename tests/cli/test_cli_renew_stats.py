"""issue 25: `watchlock run --renew-interval` as a fraction of the TTL
(item 4), and the stats of a run (`run --verbose`, `--stats-json FILE`,
`watchlock stats`: item 5)."""
from __future__ import annotations

import json

import pytest

from test_cli import EX_USAGE, LONG, Cli, cli, name, one_error_line, renewals_seen, wait_for  # noqa: F401


@pytest.mark.parametrize("form", ["1/200", "0.5%"])
def test_renew_interval_as_a_fraction_of_the_ttl(cli, name, tmp_path, form):
    """1/200 (0.5%) of a 20 s TTL: every 100 ms; the default (TTL/3) would
    not renew within the 5 s allowed."""
    log = tmp_path / "err"
    proc = cli.popen_logged("run", "-v", "--renew-interval", form, "--ttl", "20s", name, "--",
                            "sh", "-c", "while [ ! -e stop ]; do sleep 0.05; done", cwd=tmp_path, log=log)
    try:
        wait_for(lambda: renewals_seen(log) >= 3 or proc.poll() is not None, "three renewals", timeout=5)
        assert proc.poll() is None, log.read_text()
    finally:
        (tmp_path / "stop").touch()
        proc.communicate(timeout=LONG)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("value, words", [
    ("3/3", "the fraction must be above 0 and below 1"),
    ("100%", "below 100%"),
    ("0/4", "the fraction must be above 0 and below 1"),
    ("a/4", "a fraction is whole numbers"),
])
def test_bad_renew_fraction_is_a_usage_error(cli, name, tmp_path, value, words):
    marker = tmp_path / "marker"
    r = cli.run("run", "--renew-interval", value, name, "--", "touch", str(marker))
    assert r.returncode == EX_USAGE, r.stderr
    line = one_error_line(r.stderr)
    assert f"--renew-interval {value}" in line and words in line, line
    assert not marker.exists()


# ---- item 5: the stats of a run -------------------------------------------------------


def saved(path):
    return json.loads(path.read_text())


def test_run_saves_and_prints_its_stats(cli, name, tmp_path):
    out = tmp_path / "stats.json"
    r = cli.run("run", "-v", "--ttl", "600ms", "--stats-json", str(out), name, "--", "sleep", "0.7")
    assert r.returncode == 0, r.stderr
    s = saved(out)
    assert s["format"] == "watchlock-stats-1"
    assert (s["acquires"], s["contended_acquires"], s["acquire_timeouts"], s["release_retries"]) == (1, 0, 0, 0)
    assert s["lost"] == {"taken": 0, "expired": 0, "max_renewals": 0, "max_hold": 0, "connection": 0}
    assert s["renewals"] >= 2 and s["renew_rtt"]["count"] == s["renew_rounds"] >= 2
    assert s["wait_time"]["count"] == 1 and sum(s["wait_time"]["buckets"]) == 1
    hold = s["hold_time"]
    assert hold["count"] == 1 and hold["sum_us"] >= 700_000
    # the hold (0.7 s and a bit) is in the 262 ms .. 1.05 s bucket
    assert hold["buckets"][s["bucket_bounds_us"].index(1048576)] == 1
    assert s["bucket_bounds_us"][0] == 64 and s["bucket_bounds_us"][-1] is None
    # --verbose prints the same at exit
    assert "watchlock: stats of this run:" in r.stderr
    assert "\nwatchlock: acquires            1\n" in r.stderr
    # `watchlock stats` shows the saved file
    shown = cli.run("stats", str(out))
    assert shown.returncode == 0 and "acquires            1\n" in shown.stdout
    assert "hold_time           count 1," in shown.stdout
    as_json = cli.run("stats", "--json", str(out))
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == s


def test_run_stats_count_a_timeout_and_a_loss(cli, name, tmp_path, redis_url):
    import watchlock  # installed in the test venv (scripts/test)
    out = tmp_path / "timeout.json"
    with watchlock.Client(redis_url) as client:
        with client.lock(name):
            r = cli.run("run", "-n", "--stats-json", str(out), name, "--", "true")
            assert r.returncode != 0
    s = saved(out)
    assert (s["acquires"], s["acquire_timeouts"], s["wait_time"]["count"]) == (0, 1, 0)
    lost = tmp_path / "lost.json"
    r = cli.run("run", "--ttl", "1s", "--max-renewals", "1", "--stats-json", str(lost), name, "--", "sleep", "30")
    assert r.returncode == 79, r.stderr
    s = saved(lost)
    assert s["lost"] == {"taken": 0, "expired": 0, "max_renewals": 1, "max_hold": 0, "connection": 0}
    assert s["acquires"] == 1 and s["hold_time"]["count"] == 0  # a lost hold is counted as a loss


def test_stats_command_errors(cli, tmp_path):
    assert cli.run("stats").returncode == EX_USAGE
    assert cli.run("stats", "--bogus", "x").returncode == EX_USAGE
    assert cli.run("stats", str(tmp_path / "missing.json")).returncode == 66
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": "else"}\n')
    r = cli.run("stats", str(bad))
    assert r.returncode == 65 and "not a stats file" in one_error_line(r.stderr)
    assert cli.run("stats", "--help").returncode == 0
