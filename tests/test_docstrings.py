"""Every module a docstring names exists, and every room's docstring names its modules.

docs/architecture.md is the map: one line per room (package). What each room holds is said by its
package docstring (its ``__init__.py``), module by module, so a docstring is where a stale name
would hide. The convention that makes a name checkable:

- a path in backticks, ``name.py``, ``sub/name.py`` or a folder ``sub/``, is read from the
  docstring's own folder or any folder above it (so ``history/split.py`` from ``collector/ledger/``
  and ``core/quantities/rates.py`` from anywhere), and must be a file or folder there;
- a dotted ``nodeagent.x.y`` is a module, or an attribute of one;
- in a package docstring, a bare lowercase name in double backticks, ``name``, is a module or
  subpackage of the package or an attribute the package defines, and ``name.attr`` is an
  attribute of its module ``name``.

Other names are written so that they cannot be taken for a module: a command with its program
(``nodeagent-collector serve``), a config section in brackets (``[prices]``), a class or message
in CamelCase, a file with its extension (``state.json``)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.trees import REPO

PROGRAM_FOLDERS = ("agent", "collector", "core", "tools")
# In backticks, single or double: a path to a module or folder, or a dotted module path.
_BACKTICKED = re.compile(r"``([^`\s]+)``|(?<!`)`([^`\s]+)`(?!`)")
_PATH = re.compile(r"^(?:[\w-]+/)*(?:[\w-]+\.py|[\w-]+/)$")
_DOTTED = re.compile(r"^nodeagent(?:\.\w+)+$")
_BARE = re.compile(r"^[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?$")
# ``name.ext``: a file of another kind, not a module and its attribute.
_FILE_EXTENSIONS = {"json", "toml", "lock", "md", "proto", "txt", "db", "yaml", "sock", "log", "generation"}


def test_every_module_a_docstring_names_exists() -> None:
    stale = [problem for path, module in _modules() for problem in unresolved_names(module, path)]
    assert stale == []


def test_every_room_names_its_modules() -> None:
    """What the map used to list: each module of a room (and each room inside it) is named in
    the room's docstring, as ``name``, ``name.py`` or ``name/``."""
    unnamed = []
    for init in _package_inits():
        named = _named_stems(ast.get_docstring(ast.parse(init.read_text())) or "")
        for child in sorted(init.parent.iterdir()):
            stem = _member_stem(child)
            if stem is not None and stem not in named:
                unnamed.append(str(child.relative_to(REPO)))
    assert unnamed == []


def test_a_name_that_is_gone_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The checker itself can fail: a package written before a module moved.
    package = tmp_path / "housepkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text('"""A subpackage."""\n')
    (package / "__init__.py").write_text(
        '"""A room: ``here`` (its ``here.helper``), ``here.py``, ``sub``, ``sub/``, ``build``, '
        "``nodeagent.core.wire``, ``nodeagent.core.wire.trace.read_trace``, ``state.json``, "
        "``Anything``, ``[section]``, ``program serve``; and the stale ones: ``gone``, "
        '``gone.py``, ``sub/gone.py``, ``here.nothing``, ``nodeagent.core.nosuch``."""\n\n\n'
        "def build() -> None:\n    pass\n"
    )
    (package / "here.py").write_text(
        '"""Beside ``sub/``, and ``gone/``; ``elsewhere`` is not checked here."""\n\n\n'
        "def helper() -> None:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        problems = unresolved_names("housepkg", package / "__init__.py", root=tmp_path)
        assert problems == [
            "housepkg/__init__.py: ``gone``",
            "housepkg/__init__.py: ``gone.py``",
            "housepkg/__init__.py: ``sub/gone.py``",
            "housepkg/__init__.py: ``here.nothing``",
            "housepkg/__init__.py: ``nodeagent.core.nosuch``",
        ]
        assert unresolved_names("housepkg.here", package / "here.py", root=tmp_path) == ["housepkg/here.py: ``gone/``"]
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "housepkg"]:
            del sys.modules[name]


def test_a_module_missing_from_its_room_is_caught() -> None:
    named = _named_stems("The room: ``spool`` and `sender.py`, ``checks/``, ``collector/store/nodes.py``, `/metrics`.")
    assert {"spool", "sender", "checks", "nodes"} <= named
    assert "recovery" not in named and "metrics" not in named


# ---- the checker ----


def unresolved_names(module: str, path: Path, *, root: Path = REPO) -> list[str]:
    """The names in ``module``'s docstring (``path`` its file) that are no module, folder or
    attribute: ``"<path from root>: ``name``"`` each, in the order they appear."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    folders = [path.parent, *path.parent.parents]
    folders = folders[: folders.index(root) + 1] if root in folders else folders
    problems = []
    for name in _names(doc, bare=is_package):
        if not _resolves(name, package, folders):
            problems.append(f"{path.relative_to(root)}: ``{name}``")
    return problems


def _names(doc: str, *, bare: bool) -> Iterator[str]:
    """The checkable names of a docstring: paths and ``nodeagent.`` paths in backticks, and bare
    names in double backticks where ``bare``."""
    for match in _BACKTICKED.finditer(doc):
        text = (match[1] or match[2]).split("(", 1)[0]
        if _PATH.match(text) or _DOTTED.match(text) or (bare and match[1] and _is_bare_module(text)):
            yield text


def _is_bare_module(text: str) -> bool:
    return bool(_BARE.match(text)) and text.rpartition(".")[2] not in _FILE_EXTENSIONS


def _resolves(name: str, package: str, folders: list[Path]) -> bool:
    if _PATH.match(name):
        return any((folder / name).exists() for folder in folders)
    if _DOTTED.match(name):
        return _importable(name)
    head, _, attr = name.partition(".")
    here = folders[0]
    if not attr:
        module_here = (here / f"{head}.py").exists() or (here / head / "__init__.py").exists()
        return module_here or _importable(f"{package}.{head}")
    return _importable(f"{package}.{head}.{attr}")


def _importable(dotted: str) -> bool:
    """A module, or an attribute of the module before its last dot."""
    try:
        if importlib.util.find_spec(dotted) is not None:
            return True
    except (ImportError, ValueError):
        pass
    parent, _, attr = dotted.rpartition(".")
    try:
        return hasattr(importlib.import_module(parent), attr)
    except ImportError:
        return False


def _named_stems(doc: str) -> set[str]:
    """Each backticked module name's last part: ``spool``, ``sender.py``, ``checks/``, a path's
    file (not ``/metrics``, ``state.json`` or ``--flag``)."""
    names = set()
    for match in _BACKTICKED.finditer(doc):
        text = match[1] or match[2]
        if _PATH.match(text) or _BARE.match(text):
            names.add(text.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py"))
    return names


def _member_stem(child: Path) -> str | None:
    """The name a room gives ``child`` (a module or a subpackage), or None when it is neither."""
    if child.suffix == ".py" and child.name not in ("__init__.py", "__main__.py"):
        return child.stem
    if child.is_dir() and (child / "__init__.py").exists():
        return child.name
    return None


def _package_inits() -> list[Path]:
    inits = (path for top in PROGRAM_FOLDERS for path in (REPO / top).rglob("__init__.py"))
    return sorted(path for path in inits if "__pycache__" not in path.parts)


def _modules() -> Iterator[tuple[Path, str]]:
    """Every module file of the programs and the tools, with its import name; and the root."""
    yield REPO / "proto" / "nodeagent" / "__init__.py", "nodeagent"
    for top in PROGRAM_FOLDERS:
        for path in sorted((REPO / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield path, ".".join(("nodeagent", *parts))
