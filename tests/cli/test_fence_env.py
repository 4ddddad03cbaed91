"""issue 31 item 3: one environment variable name for the fencing token,
WATCHLOCK_FENCING_TOKEN, under `watchlock run` and `watchlock exec` (the
preload shim); WATCHLOCK_FENCE, the shim's first name, is an alias both set."""
from __future__ import annotations

import os
import subprocess
import uuid

from test_cli import LONG, cli_exe

SHOW = 'echo "${WATCHLOCK_FENCING_TOKEN:-unset} ${WATCHLOCK_FENCE:-unset}"'


def _env(redis_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHLOCK_") and k != "LD_PRELOAD"}
    env["WATCHLOCK_URL"] = redis_url
    return env


def _tokens(stdout):
    token, alias = stdout.split()
    assert token == alias and token.isdigit() and int(token) > 0, stdout
    return int(token)


def test_run_sets_the_token_under_both_names(redis_url):
    name = f"fence-env:{uuid.uuid4().hex[:8]}"
    env = dict(_env(redis_url), WATCHLOCK_FENCE="stale", WATCHLOCK_FENCING_TOKEN="stale")
    first = subprocess.run([cli_exe(), "run", name, "--", "sh", "-c", SHOW], env=env, capture_output=True,
                           text=True, timeout=LONG)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([cli_exe(), "run", name, "--", "sh", "-c", SHOW], env=env, capture_output=True,
                            text=True, timeout=LONG)
    assert second.returncode == 0, second.stderr
    assert _tokens(second.stdout) > _tokens(first.stdout)


def test_exec_sets_the_token_under_both_names(redis_url, tmp_path):
    lockdir = tmp_path / "locks"
    lockdir.mkdir()
    r = subprocess.run([cli_exe(), "exec", "--paths", f"{lockdir}/*", "--", "flock", "-n", str(lockdir / "job.lock"),
                        "-c", SHOW], env=_env(redis_url), capture_output=True, text=True, timeout=LONG)
    assert r.returncode == 0, r.stderr
    _tokens(r.stdout)
