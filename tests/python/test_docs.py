"""The Python and C examples of README.md and docs/c.md run as written
against a throwaway redis-server (the Lua ones: tests/lua/test_docs.lua).

Every ```python and ```c block is an example. A ```text block right after
one (blank lines between at most) is what it prints: compared line by line
with its stdout, `…` standing for any text within a line, and a line that
is only `…` for any number of lines; an example without one must print
nothing. A block preceded by `<!-- not run: REASON -->` is left out (none
is today; the reason is required).

C examples are whole programs: compiled with -std=c11 -Wall -Wextra -Werror
against core/include and the built libwatchlock.so ($WATCHLOCK_LIB, the
library or its directory; default build/core, where scripts/test builds
it), then run with WATCHLOCK_URL set to the test server. Python examples run
in a subprocess of this interpreter (the installed package), with the
names they leave to the reader (`db`, `order`) defined before them and a
tail that calls what they define. A literal "redis://127.0.0.1:6379[/0]" in
an example is replaced by the test server's URL.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_URL = re.compile(r'"redis://127\.0\.0\.1:6379(/0)?"')
FILES = {"README.md": {"python": 3, "c": 2}, "docs/c.md": {"c": 11}}  # blocks expected per file


@dataclass
class Example:
    file: str
    lang: str
    heading: str
    line: int
    code: str
    output: Optional[List[str]]  # None: prints nothing
    skip: Optional[str]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line} ({self.heading})"


def examples(file: str) -> List[Example]:
    with open(os.path.join(ROOT, file), encoding="utf-8") as f:
        lines = f.read().split("\n")
    found: List[Example] = []
    heading, i = "", 0
    blocks = []  # (start line index, lang, body lines, end line index)
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            assert j < len(lines), f"{file}:{i + 1}: unclosed code block"
            blocks.append((i, m.group(1), lines[i + 1:j], j, heading))
            i = j + 1
            continue
        if lines[i].startswith("#"):
            heading = lines[i].lstrip("#").strip()
        i += 1
    for k, (start, lang, body, end, head) in enumerate(blocks):
        if lang not in ("python", "c"):
            continue
        prev = next((lines[n] for n in range(start - 1, -1, -1) if lines[n].strip()), "")
        skip = None
        m = re.match(r"^<!--\s*not run:\s*(.*?)\s*-->$", prev.strip())
        if m:
            assert m.group(1), f"{file}:{start + 1}: <!-- not run: --> needs a reason"
            skip = m.group(1)
        output = None
        if k + 1 < len(blocks):
            nstart, nlang, nbody, _, _ = blocks[k + 1]
            if nlang == "text" and all(not ln.strip() for ln in lines[end + 1:nstart]):
                output = nbody
        found.append(Example(file, lang, head, start + 1, "\n".join(body) + "\n", output, skip))
    return found


ALL = [e for f in FILES for e in examples(f)]


def test_every_file_has_its_examples():
    """The parser finds what the files hold (no example silently dropped)."""
    for file, want in FILES.items():
        got = {}
        for e in ALL:
            if e.file == file:
                got[e.lang] = got.get(e.lang, 0) + 1
        assert got == want, (file, got)
    assert not [e.id for e in ALL if e.skip], "an example is marked not run"


def output_regex(expected: List[str]) -> "re.Pattern[str]":
    parts = []
    for line in expected:
        if line.strip() == "…":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("…")) + r"\n")
    return re.compile("".join(parts))


def check_output(e: Example, stdout: str, stderr: str) -> None:
    if e.output is None:
        assert stdout == "", f"{e.id} prints, but the doc shows no output:\n{stdout}"
        return
    assert output_regex(e.output).fullmatch(stdout), (
        f"{e.id}: output differs from the doc\n--- doc:\n" + "\n".join(e.output)
        + f"\n--- got:\n{stdout}--- stderr:\n{stderr}")


def with_url(e: Example, url: str) -> str:
    """The example's code with a literal localhost URL replaced by url."""
    return DEFAULT_URL.sub('"' + url + '"', e.code)


# ---- C -----------------------------------------------------------------------

def libwatchlock() -> str:
    lib = os.environ.get("WATCHLOCK_LIB") or os.path.join(ROOT, "build", "core")
    if os.path.isdir(lib):
        lib = os.path.join(lib, "libwatchlock.so")
    if not os.path.isfile(lib):
        pytest.fail(f"{lib} not found: build the C library (README) or set WATCHLOCK_LIB")
    return os.path.abspath(lib)


def compile_c(e: Example, code: str, tmp_path) -> str:
    src, exe = tmp_path / "example.c", tmp_path / "example"
    src.write_text(code)
    lib = libwatchlock()
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread",
           "-I" + os.path.join(ROOT, "core", "include"), str(src), "-o", str(exe),
           lib, "-Wl,-rpath," + os.path.dirname(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{e.id} does not compile:\n{' '.join(cmd)}\n{r.stderr}"
    return str(exe)


def run_c(e: Example, exe: str, url: str, *args: str) -> None:
    env = dict(os.environ, WATCHLOCK_URL=url)
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, f"{e.id} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    check_output(e, r.stdout, r.stderr)


C_EXAMPLES = [e for e in ALL if e.lang == "c" and not e.skip]


@pytest.mark.parametrize("e", C_EXAMPLES, ids=[e.id for e in C_EXAMPLES])
def test_c_example_compiles_and_prints_what_the_doc_shows(e, redis_server, tmp_path):
    code = with_url(e, redis_server.url)
    if e.file == "README.md":
        assert code != e.code, f"{e.id} connects elsewhere than redis://127.0.0.1:6379"
    exe = compile_c(e, code, tmp_path)
    run_c(e, exe, redis_server.url)


def test_c_url_example_runs_unchanged_on_tls_sentinel_and_cluster(tmp_path):
    """docs/c.md says its URL example runs as it is against every topology."""
    from cluster import RedisCluster
    from redis_server import RedisServer
    from sentinel import SentinelGroup
    from tls import make_certs

    (e,) = [e for e in C_EXAMPLES if e.file == "docs/c.md" and e.heading.startswith("URLs")]
    exe = compile_c(e, e.code, tmp_path)
    certs = make_certs(str(tmp_path / "certs"))
    with RedisServer(tls=certs) as srv:
        assert srv.url.startswith("rediss://")
        run_c(e, exe, "unused", srv.url)
    with SentinelGroup() as group:
        assert group.url().startswith("redis-sentinel://")
        run_c(e, exe, "unused", group.url())
    with RedisCluster() as cluster:
        assert cluster.url().startswith("redis-cluster://")
        run_c(e, exe, "unused", cluster.url())


# ---- Python ------------------------------------------------------------------

# Per example (file, heading): what runs before it (the names it leaves to
# the reader) and after it (calls of what it defines, and checks).
PY_HARNESS = {
    ("README.md", "Python"): (
        "import types\n"
        "class FakeDB:\n"
        "    def __init__(self):\n"
        "        self.writes = []\n"
        "    def write(self, order, fencing_token):\n"
        "        self.writes.append((order, fencing_token))\n"
        "db, order = FakeDB(), types.SimpleNamespace(id=42)\n",
        "import asyncio\n"
        "assert len(db.writes) == 1 and db.writes[0][1] > 0, db.writes   # the with block ran with a token\n"
        "assert not lock.owned() and not client.lock('orders:42').locked()\n"
        "assert build_report(7) is None                          # ran under report:7\n"
        "assert asyncio.run(send_invoice(order)) is None         # under invoice:42, default client\n"
        "assert not client.lock('report:7').locked() and not client.lock('invoice:42').locked()\n"
        "client.close()\n"),
    ("README.md", "Multi-lock"): (
        "",
        "assert len(tokens) == 2 and all(t > 0 for t in tokens)\n"
        "assert reserve() is None and not client.lock('stock:7').locked()\n"
        "client.close()\n"),
    ("README.md", "Fair lock, semaphore, read-write lock"): (
        "",
        "assert not jobs.owned() and client.name_info('encoders').in_use == 0\n"
        "assert client.name_info('catalog').holders == 0 and client.name_info('deploy').holders == 0\n"
        "client.close()\n"),
}

PY_EXAMPLES = [e for e in ALL if e.lang == "python" and not e.skip]


@pytest.mark.parametrize("e", PY_EXAMPLES, ids=[e.id for e in PY_EXAMPLES])
def test_python_example_runs(e, redis_server, tmp_path):
    assert (e.file, e.heading) in PY_HARNESS, f"{e.id}: a new Python example: give it a harness here"
    before, after = PY_HARNESS[(e.file, e.heading)]
    code = with_url(e, redis_server.url)
    assert code != e.code, f"{e.id} connects elsewhere than redis://127.0.0.1:6379"
    script = tmp_path / "example.py"
    # The example's own lines keep their line numbers in tracebacks: the
    # preamble goes on one line ahead of it.
    script.write_text("exec(" + repr(before) + ")\n" + code + after)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["WATCHLOCK_URL"] = redis_server.url
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, f"{e.id} failed:\n{r.stdout}\n{r.stderr}"
    check_output(e, r.stdout, r.stderr)
