"""The layers of `vcamd/` are contracts a tool checks, not a convention: import-linter's contracts in
pyproject.toml (`[tool.importlinter]`) must hold with no import let off, and no import cycle may join
two modules or two top-level packages (issue 40: the last cycles went when what closed them moved).

Imports under TYPE_CHECKING and inside functions count in both checks: a cycle hidden there is still
a cycle for a reader and for a type checker."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def strongly_connected(nodes: Iterable[str], successors: Callable[[str], Iterable[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(successors(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(successors(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("vcamd", exclude_type_checking_imports=False, cache_dir=None)


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_layer_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(PYPROJECT), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_contract_ignores_an_import() -> None:
    """An upward import is moved where it belongs, not listed as an exception (issue 40: the last
    eleven went when what they imported moved below them)."""
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    assert [entry for contract in contracts for entry in contract.get("ignore_imports", [])] == []


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    assert strongly_connected(graph.modules, graph.find_modules_directly_imported_by) == set()


def test_no_import_cycle_between_top_level_packages() -> None:
    graph = _graph()
    tops = {_top(m) for m in graph.modules if m != "vcamd"}
    arrows: dict[str, set[str]] = {t: set() for t in tops}
    for module in graph.modules - {"vcamd"}:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported != "vcamd" and _top(imported) != _top(module):
                arrows[_top(module)].add(_top(imported))
    assert strongly_connected(tops, arrows.__getitem__) == set()


def test_the_cycle_finder_finds_a_cycle_it_is_given() -> None:
    arrows = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert strongly_connected(arrows, arrows.__getitem__) == {frozenset({"a", "b", "c"})}
    assert _top("vcamd.live.output.publisher") == "vcamd.live"
