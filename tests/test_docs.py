"""The README stays short and every command it shows works; no link in the docs points nowhere,
and every module path the docs name is a file of the tree.

A command in the README is checked against the real command tree (a renamed subcommand or flag,
or a value its option refuses, fails here), its make targets against the Makefile, and the quick
starts are run as written, on ports and paths of the test's own."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from nodeagent.agent.cli import main as agent_cli
from nodeagent.collector.cli import main as collector_cli
from tests.fakes.fleet import free_port_run
from tests.fakes.trees import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PACKAGING_README = REPO / "packaging" / "README.md"
MAX_README_BYTES = 10_000

PROGRAMS: dict[str, click.Group] = {"nodeagent": agent_cli.cli, "nodeagent-collector": collector_cli.cli}
ENTRY_POINTS = {
    "nodeagent": "nodeagent.agent.cli.main:main",
    "nodeagent-collector": "nodeagent.collector.cli.main:main",
}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path into the code from the repository root: a module (`agent/gpu/nvml_gpu.py`) or a folder
# (`tools/simulator/`). Not the tail of a longer path (`tests/core/test_layers.py`).
MODULE_PATH = re.compile(r"(?<![\w/.-])((?:agent|collector|core|tools)/(?:[\w-]+/)*(?:[\w-]+\.py)?)(?![\w/-])")


def test_readme_is_under_10_kb() -> None:
    assert len(README.read_bytes()) < MAX_README_BYTES


def test_readme_starts_with_make_demo_and_make_test() -> None:
    first = next(_sh_commands(README.read_text()))
    assert first == [["make", "demo"], ["make", "test"]]


def test_every_readme_command_is_a_real_command() -> None:
    commands = [argv for block in _sh_commands(README.read_text()) for argv in block]
    assert len(commands) >= 8
    for argv in commands:
        _check_command(argv)


def test_a_renamed_flag_or_subcommand_or_bad_value_is_caught() -> None:
    # The check itself can fail: each of these is what a stale README would show.
    for argv in (
        ["nodeagent", "sample", "--counts", "3"],
        ["nodeagent", "sampel"],
        ["nodeagent", "sample", "--count", "three"],
        ["nodeagent-collector", "serve", "--listen"],
        ["nodeagent", "run", "--collector", "127.0.0.1:50051", "extra"],
        ["make", "no-such-target"],
        ["curl", "-s", "127.0.0.1:9477/metrics"],
    ):
        with pytest.raises((AssertionError, click.UsageError, click.BadParameter)):
            _check_command(argv)


def test_the_programs_are_the_console_scripts() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == ENTRY_POINTS


def test_make_targets_run_the_tested_commands() -> None:
    targets = _make_targets()
    assert "nodeagent-collector demo" in targets["demo"][1]  # tests/test_demo.py runs it
    assert {"setup", "lint", "typecheck"} <= set(targets["test"][0].split())
    assert "pytest" in targets["test"][1]


def test_readme_quick_starts_run_as_written(tmp_path: Path) -> None:
    # serve's default worker ports follow its --listen port (one per CPU): all free, and not http's.
    grpc = free_port_run(1 + len(os.sched_getaffinity(0)) + 1)
    http = grpc + 1 + len(os.sched_getaffinity(0))
    swaps = {"127.0.0.1:50051": f"127.0.0.1:{grpc}", "127.0.0.1:9477": f"127.0.0.1:{http}", "/tmp/": f"{tmp_path}/"}
    blocks = list(_sh_commands(README.read_text()))[1:]  # the first is make demo / make test
    commands = [[_swap(arg, swaps) for arg in argv] for block in blocks for argv in block if argv[0] in PROGRAMS]
    text = README.read_text()
    assert all(text.count(old) for old in swaps), "the quick start's addresses or paths changed: update the swaps"
    serve = [argv for argv in commands if argv[:2] == ["nodeagent-collector", "serve"]]
    assert len(serve) == 1
    collector = subprocess.Popen(
        _python(serve[0]), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert collector.stdout is not None
        assert collector.stdout.readline().startswith("listening on"), collector.stderr
        assert collector.stdout.readline().startswith("http on")
        outputs = {}
        for argv in commands:
            if argv is serve[0]:
                continue
            done = subprocess.run(_python(argv), cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False)
            unhealthy_is_an_answer = argv[:2] == ["nodeagent", "diag"] and done.returncode == 1
            assert done.returncode == 0 or unhealthy_is_an_answer, f"{shlex.join(argv)}: {done.stderr[-2000:]}"
            outputs[shlex.join(argv[:3])] = done.stdout
    finally:
        collector.kill()
        collector.wait(timeout=30)
    assert re.match(r"(HEALTHY|UNHEALTHY) ", outputs["nodeagent diag"].splitlines()[-1])
    assert "8xH100-sxm-ib" in outputs["nodeagent diag --list-profiles"]
    nodes = next(out for name, out in outputs.items() if name.startswith("nodeagent-collector nodes"))
    states = {line.split()[0]: line.split()[3] for line in nodes.splitlines()[1:] if line.strip()}
    assert states["sim-1"] == "stopped" and set(states.values()) == {"stopped"}, nodes  # not down: they said goodbye
    alerts = next(out for name, out in outputs.items() if name.startswith("nodeagent-collector alerts"))
    assert re.search(r"^GPUDataStarved +sim-1 .*\(network\)", alerts, re.MULTILINE), alerts
    assert re.search(r"^NodeStopped +sim-1 ", alerts, re.MULTILINE) and "NodeDown" not in alerts, alerts


def test_every_relative_link_points_to_a_file_that_exists() -> None:
    broken = []
    for page in [README, *DOCS]:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path_part, _, anchor = target.partition("#")
            path = (page.parent / path_part).resolve() if path_part else page
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []
    assert len(DOCS) >= 10


def test_every_module_path_the_docs_name_exists() -> None:
    pages = [README, *DOCS, PACKAGING_README]
    named = {(page, path) for page in pages for path in _module_paths(page.read_text())}
    missing = sorted(f"{page.relative_to(REPO)}: {path}" for page, path in named if not (REPO / path).exists())
    assert missing == []
    assert len(named) >= 30  # the pattern still finds the paths the pages name


def test_a_moved_module_or_folder_is_caught() -> None:
    # What a page written before a move would name, and what the pattern must leave alone.
    text = (
        "`agent/gpu/nvml_gpu.py`, `collector/alerts/`, (core/quantities/rates.py) and tools/simulator/nosuch.py;\n"
        "not `tests/core/test_layers.py`, `nodeagent.agent`, `agent/diag/profiles/*.toml` only as a folder."
    )
    paths = _module_paths(text)
    expected = ["agent/gpu/nvml_gpu.py", "collector/alerts/", "core/quantities/rates.py", "tools/simulator/nosuch.py"]
    assert paths == [*expected, "agent/diag/profiles/"]
    assert [path for path in paths if not (REPO / path).exists()] == ["tools/simulator/nosuch.py"]


ARCHITECTURE = REPO / "docs" / "architecture.md"
PROGRAM_FOLDERS = ("agent", "collector", "core", "tools")


def test_every_room_says_what_it_owns_and_is_on_the_map() -> None:
    """Each package folder's ``__init__.py`` has a docstring, and docs/architecture.md names each
    package folder by its path (``agent/gpu/``). The modules are named in their room's docstring
    (tests/test_docstrings.py), which keeps the map to one screen."""
    page = ARCHITECTURE.read_text()
    silent, unnamed = [], []
    for top in PROGRAM_FOLDERS:
        for init in sorted((REPO / top).rglob("__init__.py")):
            if "__pycache__" in init.parts:
                continue
            if not ast.get_docstring(ast.parse(init.read_text())):
                silent.append(str(init.relative_to(REPO)))
            if not _on_the_map(page, init.parent.relative_to(REPO)):
                unnamed.append(f"{init.parent.relative_to(REPO)}/")
    assert silent == []
    assert unnamed == []


def test_a_room_missing_from_the_map_is_caught() -> None:
    page = "- `agent/gpu/`: NVML\n- `collector/alerts/sinks/`: log, webhook\n"
    assert _on_the_map(page, Path("agent/gpu"))
    assert _on_the_map(page, Path("collector/alerts/sinks"))
    assert not _on_the_map(page, Path("collector/alerts"))  # only its subfolder is named
    assert not _on_the_map(page, Path("agent"))


def test_the_map_fits_one_screen() -> None:
    """The map, not the rooms' inventory: a few hundred words, no cell a paragraph."""
    page = ARCHITECTURE.read_text()
    assert len(page.split()) < 700
    cells = [cell for line in page.splitlines() if line.startswith("|") for cell in line.strip("|").split("|")]
    assert max((len(cell.strip()) for cell in cells), default=0) <= 200


# ---- helpers ----


def _module_paths(markdown: str) -> list[str]:
    """Every path into agent/, collector/, core/ or tools/ that the text names, code blocks too."""
    return [match[1] for match in MODULE_PATH.finditer(markdown)]


def _sh_commands(markdown: str) -> Iterator[list[list[str]]]:
    """Each ```sh block's command lines, as argv lists (comments dropped, continuations joined)."""
    for lang, body in FENCE.findall(markdown):
        if lang != "sh":
            continue
        joined = body.replace("\\\n", " ")
        block = [shlex.split(line, comments=True) for line in joined.splitlines()]
        yield [argv for argv in block if argv]


def _check_command(argv: list[str]) -> None:
    program, *args = argv
    assert not {"|", "&&", ";", ">", "&"} & set(args), f"{shlex.join(argv)}: one plain command per line"
    if program == ".":
        # The environment the make targets set up.
        assert args == [".venv/bin/activate"]
        assert re.search(r"^VENV\s*:?=\s*\.venv$", (REPO / "Makefile").read_text(), re.MULTILINE)
        return
    if program == "make":
        assert len(args) == 1 and args[0] in _make_targets(), f"no make target {args}"
        return
    assert program in PROGRAMS, f"{program}: not a program of this project"
    command: click.Command = PROGRAMS[program]
    ctx = click.Context(command, info_name=program)
    while isinstance(command, click.Group):
        assert args and not args[0].startswith("-"), f"{shlex.join(argv)}: no subcommand"
        sub = command.get_command(ctx, args[0])
        assert sub is not None, f"{shlex.join(argv)}: no subcommand {args[0]!r}"
        command, args = sub, args[1:]
        ctx = click.Context(command, info_name=sub.name, parent=ctx)
    # Parse as click would (unknown flags, missing values), then convert every value by its type.
    values, rest, order = command.make_parser(ctx).parse_args(list(args))
    for param in order:
        if param.name is not None and param.name in values:
            param.type_cast_value(ctx, values[param.name])
    positional = [p for p in command.params if isinstance(p, click.Argument)]
    assert not rest or positional, f"{shlex.join(argv)}: unexpected {rest}"


def _make_targets() -> dict[str, list[str]]:
    """Makefile target -> [prerequisites, recipe lines joined]."""
    targets: dict[str, list[str]] = {}
    current = ""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("\t") and current:
            targets[current][1] += line.strip() + "\n"
        elif match := re.match(r"^([A-Za-z][\w-]*):(?!=)(.*)$", line):
            current = match[1]
            targets[current] = [match[2].strip(), ""]
        else:
            current = ""
    return targets


def _python(argv: list[str]) -> list[str]:
    """The console script's own entry point, run by this interpreter."""
    module, func = ENTRY_POINTS[argv[0]].split(":")
    code = f"import sys; sys.argv[0] = {argv[0]!r}; from {module} import {func}; {func}()"
    return [sys.executable, "-c", code, *argv[1:]]


def _swap(arg: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        arg = arg.replace(old, new)
    return arg


def _prose(markdown: str) -> str:
    return FENCE.sub("", markdown)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", _prose(page.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def _on_the_map(page: str, folder: Path) -> bool:
    """Whether ``page`` names the package ``folder`` by its path from the root, in backticks."""
    return f"`{folder.as_posix()}/`" in page
