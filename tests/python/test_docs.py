"""Every code block of README.md and docs/*.md runs as pasted (issue 31
item 4) against a throwaway redis-server, or is marked as one that does not:

- ```python: run in a fresh interpreter (the installed package), nothing
  defined before it or called after it;
- ```c: whole programs, compiled with -std=c11 -Wall -Wextra -Werror
  against core/include and the built libwatchlock.so ($WATCHLOCK_LIB, the
  library or its directory; default build/core, where scripts/test builds
  it), then run with WATCHLOCK_URL set to the test server;
- ```sh: run by bash in an empty directory, the built `watchlock` CLI
  ($WATCHLOCK_CLI) first on PATH, WATCHLOCK_URL set to the test server;
  it must exit 0 (what it prints is not compared);
- ```lua: run by tests/lua/test_docs.lua (LUA_BLOCKS below lists them);
- ```text: not code (synopses, output, trees, crontab lines);
- a block preceded by `<!-- not run: REASON -->` is left out (the reason is
  required; NOT_RUN below counts them per file): builds and installs (the
  suite's own steps), and commands for a fleet (three masters, a cron host).

A block without a language fails the test: mark it. A ```text block right
after a python or c example (blank lines between at most) is what it prints:
compared line by line with its stdout, `…` standing for any text within a
line, and a line that is only `…` for any number of lines; a python or c
example without one must print nothing. A literal
"redis://127.0.0.1:6379[/0]" (or redis://127.0.0.1:6379 in sh) in an
example is replaced by the test server's URL: that is the server a reader
runs it against.
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
SH_URL = re.compile(r'redis://127\.0\.0\.1:6379(/0)?\b')
DOCS = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
LANGS = ("python", "c", "sh", "lua", "text")
#: blocks expected per file and language that run (the parser drops none silently)
FILES = {
    "README.md": {"python": 3, "c": 2, "sh": 0, "lua": 2},
    "docs/c.md": {"c": 11, "sh": 0},
    "docs/cli.md": {"sh": 2},
    "docs/lua.md": {"lua": 2, "sh": 0},
    "docs/python.md": {"python": 8, "sh": 0},
    "docs/reliability.md": {"sh": 0},
}
#: blocks marked <!-- not run: ... --> per file
NOT_RUN = {"README.md": 5, "docs/c.md": 1, "docs/cli.md": 2, "docs/lua.md": 5, "docs/python.md": 2,
           "docs/reliability.md": 1}
#: the ```lua blocks tests/lua/test_docs.lua runs: (file, the text its example() looks after)
LUA_BLOCKS = {("README.md", "## Lua"), ("README.md", "## Fair lock, semaphore, read-write lock"),
              ("docs/lua.md", "## Quick start"), ("docs/lua.md", "**A dropped lock is not an unlock.**")}


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
        if lang == "text":
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


ALL = [e for f in DOCS for e in examples(f)]


def test_every_block_is_marked_and_every_file_has_its_examples():
    """Every block has a language (text for what is not code); the parser
    finds what the files hold (no example silently dropped)."""
    unmarked = [e.id for e in ALL if e.lang not in LANGS]
    assert not unmarked, f"blocks without a known language (mark them, e.g. text): {unmarked}"
    got: dict = {}
    skipped: dict = {}
    for e in ALL:
        if e.skip:
            skipped[e.file] = skipped.get(e.file, 0) + 1
        else:
            got.setdefault(e.file, {}).setdefault(e.lang, 0)
            got[e.file][e.lang] += 1
    for file in DOCS:
        want = {lang: n for lang, n in FILES.get(file, {}).items() if n}
        assert got.get(file, {}) == want, (file, got.get(file))
    assert skipped == NOT_RUN, skipped


def lua_block_after(file: str, after: str) -> int:
    """The line of the first ```lua block after `after` (as test_docs.lua's example())."""
    with open(os.path.join(ROOT, file), encoding="utf-8") as f:
        lines = f.read().split("\n")
    at = next(i for i, ln in enumerate(lines) if after in ln)
    return next(i for i in range(at, len(lines)) if lines[i] == "```lua") + 1


def test_every_lua_block_is_run_by_the_lua_docs_test():
    ran = {(file, lua_block_after(file, after)) for file, after in LUA_BLOCKS}
    blocks = {(e.file, e.line) for e in ALL if e.lang == "lua" and not e.skip}
    assert blocks == ran, blocks ^ ran
    with open(os.path.join(ROOT, "tests", "lua", "test_docs.lua"), encoding="utf-8") as f:
        lua = f.read()
    for file, after in LUA_BLOCKS:
        assert f'example("{file}", "{after}")' in lua, (file, after)


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

PY_EXAMPLES = [e for e in ALL if e.lang == "python" and not e.skip]


@pytest.mark.parametrize("e", PY_EXAMPLES, ids=[e.id for e in PY_EXAMPLES])
def test_python_example_runs_as_pasted(e, redis_server, tmp_path):
    code = with_url(e, redis_server.url)
    if "Client(" in e.code or "from_url(" in e.code:  # (a block may only define, e.g. the Prometheus collector)
        assert code != e.code, f"{e.id} connects elsewhere than redis://127.0.0.1:6379"
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["WATCHLOCK_URL"] = redis_server.url
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, f"{e.id} failed:\n{r.stdout}\n{r.stderr}"
    check_output(e, r.stdout, r.stderr)


# ---- shell -------------------------------------------------------------------

SH_EXAMPLES = [e for e in ALL if e.lang == "sh" and not e.skip]


def cli_dir() -> str:
    cli = os.environ.get("WATCHLOCK_CLI") or os.path.join(ROOT, "build", "cli", "watchlock")
    if not os.access(cli, os.X_OK):
        pytest.fail(f"{cli} not found: build the CLI or set WATCHLOCK_CLI")
    return os.path.dirname(os.path.abspath(cli))


@pytest.mark.parametrize("e", SH_EXAMPLES, ids=[e.id for e in SH_EXAMPLES])
def test_sh_example_runs_as_pasted(e, redis_server, tmp_path):
    code = SH_URL.sub(redis_server.url, e.code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHLOCK_")}
    env.update(WATCHLOCK_URL=redis_server.url, PATH=cli_dir() + os.pathsep + env.get("PATH", ""))
    r = subprocess.run(["bash", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{e.id} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
