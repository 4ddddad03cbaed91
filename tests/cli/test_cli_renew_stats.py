"""issue 25: `watchlock run --renew-interval` as a fraction of the TTL
(item 4), and the stats of a run (`run --verbose`, `--stats-json FILE`,
`watchlock stats`: item 5)."""
from __future__ import annotations

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
