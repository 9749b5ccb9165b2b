"""Sizes a reader can hold in their head (issue 46 item 7; docs/STYLE: "under ~400 lines"): modules
of the packages (agent/, collector/, core/) at most 400 lines, at most 4 modules loose at the top of
collector/, and at most 3 functions over 60 lines.

Lines are the file's lines; a function's run from its ``def`` to its last line (its decorators
aside: a click command's options are not its body).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.fakes.trees import REPO

PACKAGES = ("agent", "collector", "core")
MAX_MODULE_LINES = 400
MAX_LOOSE_COLLECTOR_MODULES = 4
MAX_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 3


def test_no_module_is_over_400_lines() -> None:
    over = {name: n for name, n in module_lines(REPO).items() if n > MAX_MODULE_LINES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_at_most_4_modules_are_loose_in_collector() -> None:
    loose = loose_modules(REPO / "collector")
    assert len(loose) <= MAX_LOOSE_COLLECTOR_MODULES, f"{len(loose)} modules loose in collector/: {loose}"


def test_at_most_3_functions_are_over_60_lines() -> None:
    long = long_functions(REPO)
    assert len(long) <= MAX_LONG_FUNCTIONS, f"{len(long)} functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_checker_catches_an_oversized_function_and_module(tmp_path: Path) -> None:
    package = tmp_path / "core"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "big.py").write_text(f"def short():\n    return 1\n\n\n@decorated\ndef too_long():\n{body}\n")
    (package / "fits.py").write_text("def fits():\n" + "\n".join(f"    y{i} = {i}" for i in range(59)) + "\n")
    (package / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_functions(tmp_path) == {"core/big.py:too_long": MAX_FUNCTION_LINES + 1}
    assert {name: n for name, n in module_lines(tmp_path).items() if n > MAX_MODULE_LINES} == {"core/long.py": 401}
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("")
    assert loose_modules(package) == ["big.py", "fits.py", "long.py"]


# ---- the checker ----


def module_lines(root: Path) -> dict[str, int]:
    """Lines of each module of the packages under ``root``, by its path there."""
    return {_name(root, path): len(path.read_text().splitlines()) for path in _modules(root)}


def long_functions(root: Path) -> dict[str, int]:
    """``path:function`` -> lines, for every function (or method) over ``MAX_FUNCTION_LINES``."""
    out = {}
    for path in _modules(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out[f"{_name(root, path)}:{node.name}"] = lines
    return out


def loose_modules(folder: Path) -> list[str]:
    """The modules at the top of a package folder, its ``__init__`` and ``__main__`` aside."""
    return sorted(p.name for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def _modules(root: Path) -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def _name(root: Path, path: Path) -> str:
    return str(path.relative_to(root))
