"""Imports only go down: wire <- core <- agent | collector <- tools (docs/architecture.md).

Every module's imports are read with ast (top-level and inside functions, absolute and relative),
so an import that runs only on one path counts as much as one at the top.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.fakes.trees import REPO

# The layers, bottom first, by package; a module belongs to the longest package that contains it.
LAYERS = {
    "nodeagent.v1": "wire",
    "nodeagent.prompb": "wire",
    "nodeagent": "wire",  # the root package: only the version
    "nodeagent.core": "core",
    "nodeagent.agent": "agent",
    "nodeagent.collector": "collector",
    "nodeagent.tools": "tools",
}
# What each layer may import from nodeagent, besides itself.
ALLOWED = {
    "wire": {"wire"},
    "core": {"wire"},
    "agent": {"wire", "core"},
    "collector": {"wire", "core"},
    "tools": {"wire", "core", "agent", "collector"},
}
# The command lines may offer the tools (`nodeagent run --simulate`, `nodeagent record --simulate`,
# `nodeagent-collector demo|loadgen`): these modules, and only these, reach up to them.
TOOLS_FROM_COMMAND_LINES = {
    "nodeagent.agent.cli.record",
    "nodeagent.agent.cli.run",
    "nodeagent.agent.cli.top",
    "nodeagent.collector.cli.demo",
}


def package_dirs() -> dict[str, Path]:
    """pyproject's package-dir: import package -> folder."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {package: REPO / folder for package, folder in mapping.items()}


def modules(dirs: dict[str, Path]) -> dict[str, Path]:
    """Every module of the distribution by its import name."""
    found: dict[str, Path] = {}
    for package, folder in sorted(dirs.items(), key=lambda item: len(item[0])):
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            if any(part in {"__pycache__"} for part in parts):
                continue
            found[".".join((package, *parts))] = path
    return found


def layer_of(module: str) -> str | None:
    for package in sorted(LAYERS, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return LAYERS[package]
    return None


def imported(module: str, path: Path) -> tuple[tuple[int, str], ...]:
    """(line, module) for every import in the file, relative ones resolved."""
    return _imported(module, path.read_text(), str(path), path.name == "__init__.py")


@functools.cache  # the tests here read the same ~400 files: each is parsed once (by its text)
def _imported(module: str, source: str, filename: str, is_package: bool) -> tuple[tuple[int, str], ...]:
    return tuple(_walk_imports(module, ast.parse(source, filename), is_package))


def _walk_imports(module: str, tree: ast.Module, is_package: bool) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from nodeagent import agent` imports the package agent
                yield node.lineno, f"{target}.{alias.name}"


def violations(found: dict[str, Path]) -> list[str]:
    """One line per import that goes up or sideways."""
    problems = []
    for module, path in sorted(found.items()):
        mine = layer_of(module)
        assert mine is not None, module
        for line, target in imported(module, path):
            theirs = layer_of(target)
            if theirs is None or theirs == mine or theirs in ALLOWED[mine]:
                continue
            if theirs == "tools" and module in TOOLS_FROM_COMMAND_LINES:
                continue
            where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
            problems.append(f"{where}:{line}: {mine} module {module} imports {theirs} ({target})")
    return problems


def test_imports_only_go_down() -> None:
    found = modules(package_dirs())
    assert len(found) > 100  # the walk saw the whole distribution, not an empty folder
    assert {layer_of(m) for m in found} == {"wire", "core", "agent", "collector", "tools"}
    assert violations(found) == []


def test_the_modules_that_offer_the_tools_are_exactly_the_listed_ones() -> None:
    # A command moved out of a listed module (or a listed one that no longer offers a tool)
    # leaves the list wider than what it allows.
    found = modules(package_dirs())
    offering = {
        module
        for module, path in found.items()
        if layer_of(module) != "tools" and any(layer_of(target) == "tools" for _line, target in imported(module, path))
    }
    assert offering == TOOLS_FROM_COMMAND_LINES


def test_a_crossing_import_is_caught(tmp_path: Path) -> None:
    """The checker itself: each forbidden direction fails, a permitted one passes."""
    cases = {
        "nodeagent.collector.x": ("from nodeagent.agent.delivery import sender\n", True),
        "nodeagent.agent.y": ("def f():\n    import nodeagent.collector.cli.main\n", True),
        "nodeagent.core.z": ("from ..agent import cli\n", True),
        "nodeagent.core.w": ("from nodeagent import collector\n", True),
        "nodeagent.agent.gpu.v": ("from ..delivery import spool\nfrom nodeagent.core.quantities import units\n", False),
        "nodeagent.agent.u": ("from nodeagent.tools import simulator\n", True),
    }
    assert_caught(tmp_path, cases, violations)


# The one package that touches SQLite (docs/architecture.md): its file, tables, reads and writes.
SQLITE_OWNER = "nodeagent.collector.store"
# Module, source, and whether it breaks that rule.
SQLITE_CASES = {
    "nodeagent.collector.alerts.x": ("import sqlite3\n", True),
    "nodeagent.collector.y": ("def f():\n    from sqlite3 import connect\n", True),
    "nodeagent.collector.storefront": ("import sqlite3\n", True),  # a name that only starts like the store's
    "nodeagent.collector.z": ("from nodeagent.collector.store.alert_tables import AlertTables\n", False),
    "nodeagent.collector.store.w": ("import sqlite3\n", False),
}


def in_store(module: str) -> bool:
    return module == SQLITE_OWNER or module.startswith(SQLITE_OWNER + ".")


def sqlite_importers(found: dict[str, Path]) -> list[str]:
    """One line per import of sqlite3 outside the store."""
    return [
        f"{path.name}:{line}: {module} imports {target}"
        for module, path in sorted(found.items())
        if not in_store(module)
        for line, target in imported(module, path)
        if target.partition(".")[0] == "sqlite3"
    ]


def test_only_the_store_imports_sqlite() -> None:
    found = modules(package_dirs())
    store = {module: path for module, path in found.items() if in_store(module)}
    assert f"{SQLITE_OWNER}.database" in store  # the prefix names the package the store is
    assert any(target == "sqlite3" for module, path in store.items() for _, target in imported(module, path))
    assert sqlite_importers(found) == []


def test_a_sqlite_import_elsewhere_is_caught(tmp_path: Path) -> None:
    assert_caught(tmp_path, SQLITE_CASES, sqlite_importers)


def assert_caught(
    tmp_path: Path, cases: dict[str, tuple[str, bool]], checker: Callable[[dict[str, Path]], list[str]]
) -> None:
    """Each case is a module's name and source, and whether ``checker`` must report it."""
    for module, (source, bad) in cases.items():
        path = tmp_path / f"{module}.py"
        path.write_text(source)
        problems = checker({module: path})
        assert bool(problems) is bad, (module, problems)


# Within a program, subpackages import each other one way only (docs/architecture.md): a cycle
# between them, of any length, means none of them can be read, tested or moved without the others.
# A program's loose module (``nodeagent.collector.replay``) is a node of its own, and an import
# under ``TYPE_CHECKING`` counts as any other (``imported`` reads every import in the file): a type
# two rooms share lives in a room both import downward.
PROGRAMS = ("nodeagent.agent", "nodeagent.collector", "nodeagent.core", "nodeagent.tools")
# The command line offers the demo (``nodeagent-collector demo``), which drives a collector.
ALLOWED_CYCLES = {frozenset({"nodeagent.collector.cli", "nodeagent.tools.demo"})}


def subpackage_of(module: str, packages: set[str]) -> str | None:
    """The program's subpackage or loose module that holds ``module`` (``nodeagent.collector.views``,
    ``nodeagent.collector.replay``); None for a program itself or a module outside the programs."""
    for program in PROGRAMS:
        if module.startswith(program + "."):
            candidate = ".".join(module.split(".")[:3])
            return candidate if candidate in packages or module == candidate else None
    return None


def subpackage_edges(found: dict[str, Path]) -> dict[str, set[str]]:
    """Which subpackage (or loose module) imports which other, by any import of any of its modules."""
    packages = {module for module, path in found.items() if path.name == "__init__.py"}
    edges: dict[str, set[str]] = {}
    for module, path in found.items():
        mine = subpackage_of(module, packages)
        if mine is None:
            continue
        for _line, target in imported(module, path):
            # ``from nodeagent.collector import replay`` names the module ``...collector.replay``.
            if target not in found and target.rpartition(".")[0] not in found:
                continue
            theirs = subpackage_of(target, packages)
            if theirs is not None and theirs != mine:
                edges.setdefault(mine, set()).add(theirs)
    return edges


def subpackage_cycles(found: dict[str, Path]) -> set[frozenset[str]]:
    """Each strongly connected component of more than one subpackage: every set of subpackages
    each of which imports (through the others) every other one."""
    edges = subpackage_edges(found)
    reach = {node: _reachable(node, edges) for node in edges}
    return {
        frozenset(other for other in reach[node] if node in reach.get(other, ())) | {node}
        for node in reach
        if any(node in reach.get(other, ()) for other in reach[node] if other != node)
    }


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_subpackages_import_each_other_one_way() -> None:
    cycles = subpackage_cycles(modules(package_dirs()))
    assert cycles - ALLOWED_CYCLES == set()


def test_a_subpackage_cycle_is_caught(tmp_path: Path) -> None:
    """The checker itself: a cycle of three subpackages, one edge of it under ``TYPE_CHECKING``
    and one through a loose module, is one component; a chain is none."""
    found: dict[str, Path] = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        found[f"nodeagent.collector.{name}"] = tmp_path / name / "__init__.py"
    found["nodeagent.collector.a.x"] = tmp_path / "a" / "x.py"
    found["nodeagent.collector.b.y"] = tmp_path / "b" / "y.py"
    found["nodeagent.collector.loose"] = tmp_path / "loose.py"
    for path in found.values():
        path.write_text("")
    found["nodeagent.collector.a.x"].write_text("from nodeagent.collector.b.y import f\n")
    found["nodeagent.collector.b.y"].write_text("def f():\n    from nodeagent.collector import loose\n")
    assert subpackage_cycles(found) == set()
    found["nodeagent.collector.loose"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nodeagent.collector.a.x import X\n"
    )
    names = {"nodeagent.collector.a", "nodeagent.collector.b", "nodeagent.collector.loose"}
    assert subpackage_cycles(found) == {frozenset(names)}
