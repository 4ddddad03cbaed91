"""The modules of python/watchlock depend on each other in one direction
only (issue 20): no circle of imports, and no module reaching into another
module's private members except those of _runtime.py, the module that holds
what Client and Lock share (the native handle, the closed flag, the lost-event
dispatcher).

Read from the source with `ast` (not by importing it), so that it checks the
tree as it is:

- the import graph between the package's modules (``from . import x``,
  ``from .x import y``, ``import watchlock.x``) has no cycle. Imports under
  ``if TYPE_CHECKING:`` are left out: they never run, they only name types
  for annotations (_lock.py names Client for ``Lock.client``'s type);
- a module imports no underscore name from a sibling module, except from
  _runtime.py (and the SWIG modules _native/__native, which are the C API);
- a module uses no private attribute (``obj._name``, not on self/cls) that
  another module defines (``self._name = ...``, ``def _name``, ``__slots__``,
  a class-level annotation) and it does not define itself, except the
  attributes _runtime.py declares.
"""
from __future__ import annotations

import ast
import os
import pathlib
from typing import Dict, List, Optional, Set

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "watchlock"
HANDLE_MODULE = "_runtime"
NATIVE = {"_native", "__native"}  # the SWIG modules: the C API, not Python layers


def module_name(path: pathlib.Path) -> str:
    return path.stem


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_nodes(tree: ast.AST) -> List[ast.AST]:
    """Every node of `tree` except those under `if TYPE_CHECKING:`."""
    out: List[ast.AST] = []
    todo: List[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def sibling(module: Optional[str], level: int, package_names: Set[str]) -> Optional[str]:
    """The package module an import refers to, or None."""
    if level == 1 and module:
        first = module.split(".")[0]
        return first if first in package_names else None
    if level == 0 and module and module.startswith("watchlock."):
        first = module.split(".")[1]
        return first if first in package_names else None
    return None


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_privates(tree: ast.AST) -> Set[str]:
    """Private attribute names a module's classes define."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and private(item.name):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and private(item.target.id):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    for t in item.targets:
                        if isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(item.value, (ast.Tuple, ast.List)):
                            names.update(e.value for e in item.value.elts
                                         if isinstance(e, ast.Constant) and isinstance(e.value, str) and private(e.value))
        targets: List[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls") and private(sub.attr)):
                    names.add(sub.attr)
    return names


def layering_problems(package: pathlib.Path) -> List[str]:
    files = {module_name(p): p for p in sorted(package.glob("*.py"))}
    names = set(files) | NATIVE
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in files.items()}
    owned = {m: defined_privates(t) for m, t in trees.items()}
    problems: List[str] = []
    graph: Dict[str, Set[str]] = {m: set() for m in files}

    for m, tree in trees.items():
        for node in runtime_nodes(tree):
            if isinstance(node, ast.ImportFrom):
                target = sibling(node.module, node.level, names)
                if node.level == 1 and node.module is None:  # from . import a, b
                    for alias in node.names:
                        if alias.name in files and alias.name != m:
                            graph[m].add(alias.name)
                    continue
                if target is None or target in NATIVE:
                    continue
                if target != m:
                    graph[m].add(target)
                if target != HANDLE_MODULE:
                    for alias in node.names:
                        if private(alias.name):
                            problems.append(f"{m}.py:{node.lineno}: imports private {alias.name} from {target}.py "
                                            f"(only {HANDLE_MODULE}.py's private names may be shared)")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = sibling(alias.name, 0, names)
                    if target is not None and target not in NATIVE and target != m:
                        graph[m].add(target)
            elif (isinstance(node, ast.Attribute) and private(node.attr)
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                if node.attr in owned[m] or node.attr in owned.get(HANDLE_MODULE, set()):
                    continue
                others = sorted(o for o, attrs in owned.items() if o != m and node.attr in attrs)
                if others:
                    problems.append(f"{m}.py:{node.lineno}: uses {node.attr}, a private member of "
                                    f"{', '.join(o + '.py' for o in others)}")

    problems.sort(key=lambda p: (p.split(":")[0], int(p.split(":")[1])))
    # Cycles: depth-first search, reporting each cycle once by its path.
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                problems.append("import cycle: " + " -> ".join(c + ".py" for c in cycle))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return problems


def test_package_modules_form_layers() -> None:
    assert (PACKAGE / f"{HANDLE_MODULE}.py").is_file(), os.listdir(PACKAGE)
    problems = layering_problems(PACKAGE)
    assert not problems, "python/watchlock layering broken:\n  " + "\n  ".join(problems)


def test_the_check_sees_a_cycle_and_a_private_use(tmp_path: pathlib.Path) -> None:
    """The check itself: a planted cycle and a reach into a sibling's privates are found."""
    (tmp_path / "_runtime.py").write_text("class R:\n    def __init__(self):\n        self.h = 1\n")
    (tmp_path / "a.py").write_text("from . import b\nclass A:\n    def __init__(self):\n        self._x = 1\n")
    (tmp_path / "b.py").write_text("from .a import A\nfrom .a import _helper\n"
                                   "def f(a: A) -> int:\n    return a._x\n")
    problems = layering_problems(tmp_path)
    assert "import cycle: a.py -> b.py -> a.py" in problems, problems
    assert any("b.py:2: imports private _helper from a.py" in p for p in problems), problems
    assert any("b.py:4: uses _x, a private member of a.py" in p for p in problems), problems
