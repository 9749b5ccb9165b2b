"""The docs' checkable claims, checked: every command they show, what a profile is said to
check, the one place a room's docstring gives a mechanism, the .deb's size said the same
everywhere, what pyproject says a dependency is for, and promtool's lints the metrics page lists.

A claim here is read from the page itself, so a page that drifts from the code fails."""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from pathlib import Path

import click
import pytest

from nodeagent.agent.diag.profile import load_profile
from nodeagent.core.exposition.dcgm import GPU_FAMILIES
from tests.fakes.trees import REPO
from tests.test_docs import FENCE, PROGRAMS

DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "packaging" / "README.md", REPO / "README.md"]
DOC_IDS = [p.relative_to(REPO).as_posix() for p in DOCS]
SHIPPED = ("agent", "collector", "core", "tools")


def _flat(page: Path) -> str:
    return " ".join(page.read_text().split())


def _modules() -> list[Path]:
    return [p for top in SHIPPED for p in (REPO / top).rglob("*.py") if "_pb2" not in p.name]


# ---- commands ------------------------------------------------------------------------------------


def _doc_commands(page: Path) -> list[list[str]]:
    """Each ```sh block's lines that run one of the programs (continuations joined)."""
    commands = []
    for lang, body in FENCE.findall(page.read_text()):
        if lang != "sh":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] in PROGRAMS:
                commands.append(argv)
    return commands


@pytest.mark.parametrize("page", DOCS, ids=DOC_IDS)
def test_every_command_a_page_shows_is_a_real_command(page: Path) -> None:
    """Its subcommands and every flag it names exist, in a synopsis (``[--count N]``, ``A|B``)
    too; the README's commands are also run through click's parser (tests/test_docs.py)."""
    for argv in _doc_commands(page):
        _check_names(argv)


def test_a_synopsis_with_a_renamed_flag_is_caught() -> None:
    with pytest.raises(AssertionError):
        _check_names(["nodeagent", "sample", "[--counts", "N]"])
    with pytest.raises(AssertionError):
        _check_names(["nodeagent-collector", "sever", "[--listen", "HOST:PORT]"])


def test_the_docs_show_commands_to_check() -> None:
    assert sum(len(_doc_commands(page)) for page in DOCS) >= 30


def _check_names(argv: list[str]) -> None:
    command: click.Command = PROGRAMS[argv[0]]
    ctx = click.Context(command, info_name=argv[0])
    words = argv[1:]
    if words and re.fullmatch(r"[a-z][\w-]*(\|[a-z][\w-]*)+", words[0]):  # `nodes|alerts`: each of them
        for alternative in words[0].split("|"):
            _check_names([argv[0], alternative, *words[1:]])
        return
    while isinstance(command, click.Group) and words and re.fullmatch(r"[a-z][\w-]*", words[0]):
        sub = command.get_command(ctx, words[0])
        assert sub is not None, f"{shlex.join(argv)}: no subcommand {words[0]!r}"
        command, words = sub, words[1:]
        ctx = click.Context(command, info_name=sub.name, parent=ctx)
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    named = {flag for word in words for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w.-]*)", word)}
    unknown = sorted(flag for flag in named if flag not in known and flag != "--help")
    assert not unknown, f"{shlex.join(argv)}: no such flag {unknown}"


# ---- profiles ------------------------------------------------------------------------------------

# The README's words for what a profile checks -> the profile settings that check it.
PROFILE_WORDS = {
    "GPU count": ("gpu", "count"), "model": ("gpu", "model"), "NVLink links per GPU": ("gpu", "nvlinks_per_gpu"),
    "RDMA ports": ("rdma", "ports"), "rate": ("rdma", "rate"), "link layer": ("rdma", "link_layer"),
    "NIC speed": ("nic", "speed"), "mounts": ("storage", "mounts"),
}  # fmt: skip


def test_what_the_readme_says_a_profile_checks_is_what_it_sets() -> None:
    sentence = (
        r"`--profile ([\w-]+)`(?: \(or your own TOML\))? checks (.*?) that were rented"
        r"(?:; (.*?) go in your own TOML)?"
    )
    said = re.search(sentence, _flat(REPO / "README.md"))
    assert said is not None, "the README's sentence on --profile changed: update this test"
    name, checked, left = said[1], said[2], said[3] or ""
    tables = tomllib.loads((REPO / "agent" / "diag" / "profiles" / f"{name}.toml").read_text())
    load_profile(name)  # and it is a profile diag takes
    claimed = {word for word in PROFILE_WORDS if word in checked}
    assert claimed, checked
    for word in claimed:
        table, key = PROFILE_WORDS[word]
        assert key in tables.get(table, {}), f"the README says {name} checks {word}; it sets no [{table}] {key}"
    for word in PROFILE_WORDS.keys() - claimed:
        if word in left:
            table, key = PROFILE_WORDS[word]
            assert key not in tables.get(table, {}), f"{name} sets [{table}] {key}, which the README says it leaves"


# ---- the one place of each mechanism (the room's package docstring) -----------------------------


def _room_docstring(folder: str) -> str:
    """The package docstring of ``folder`` (from the repository root), its lines joined."""
    return " ".join((ast.get_docstring(ast.parse((REPO / folder / "__init__.py").read_text())) or "").split())


def _counter_deltas(path: Path, root: Path = REPO) -> list[str]:
    """``a.X - b.X`` where X is a counter (``*_total``, ``counters[...]``): a counter's increase
    worked out by hand."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
            continue
        left, right = node.left, node.right
        if not all(isinstance(side, ast.Attribute | ast.Subscript) for side in (left, right)):
            continue
        if _without_root(left) != _without_root(right) or ast.unparse(left) == ast.unparse(right):
            continue
        text = ast.unparse(left)
        if re.search(r"_total\b|\bcounters\[", text):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def _without_root(node: ast.expr) -> str:
    class Root(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.Name:
            return ast.Name(id="_", ctx=name.ctx)

    return ast.dump(Root().visit(ast.parse(ast.unparse(node), mode="eval")))


def test_counters_become_rates_in_one_place() -> None:
    assert "``rates`` (counters to rates" in _room_docstring("core/quantities")
    rates = REPO / "core" / "quantities" / "rates.py"
    by_hand = [line for path in _modules() if path != rates for line in _counter_deltas(path)]
    assert by_hand == [], "counter increases outside core/quantities/rates.py (use delta, rate, ...)"


def test_the_check_finds_a_counter_worked_out_by_hand(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(a, b):\n    return a.reads_total - b.reads_total, a.time - b.time\n")
    assert _counter_deltas(module, root=tmp_path) == ["m.py:2: a.reads_total - b.reads_total"]


def test_one_toml_reader_and_one_link_rate_parser() -> None:
    assert "``readers`` (the one TOML reader of every config file" in _room_docstring("core/settings")
    readers = REPO / "core" / "settings" / "readers.py"
    units = REPO / "core" / "quantities" / "units.py"
    toml = [p for p in _modules() if re.search(r"^\s*import tomllib|^\s*from tomllib", p.read_text(), re.M)]
    assert toml == [readers]
    parsers = [p for p in _modules() if "parse_link_rate(" in p.read_text() and p not in (readers, units)]
    assert parsers == [], "link rates parsed outside core/settings/readers.py (use link_rate)"


# ---- sizes, dependencies, lints ------------------------------------------------------------------


def test_the_deb_size_is_said_the_same_everywhere() -> None:
    """The number itself is held to the built package by tests/packaging/test_packaging_deb.py."""
    sizes = {
        page.name: re.findall(r"The package is about (\d+(?:\.\d+)?) MB", _flat(page))
        for page in (REPO / "packaging" / "README.md", REPO / "docs" / "agent.md")
    }
    assert all(sizes.values()) and len({s for found in sizes.values() for s in found}) == 1, sizes


def test_what_pyproject_says_prometheus_client_is_for() -> None:
    text = (REPO / "pyproject.toml").read_text()
    comment = text.split('"prometheus-client', 1)[0].rsplit('",\n', 1)[1]
    users = sorted(
        p.relative_to(REPO).as_posix()
        for p in _modules()
        if re.search(r"^\s*(from|import) prometheus_client", p.read_text(), re.M)
    )
    assert users == ["agent/gpu/dcgm_page.py", "collector/views/metrics.py", "collector/workers/front_metrics.py"]
    assert all(user in comment for user in users), comment
    assert "written directly (core/exposition/text.py)" in comment, comment


def test_the_metrics_page_lists_every_lint_promtool_is_allowed_to_draw() -> None:
    page = _flat(REPO / "docs" / "metrics.md")
    listed = page.split("**promtool:**", 1)[1].split("Everything else passes", 1)[0]
    counters = [name for name, kind, *_ in GPU_FAMILIES if kind == "counter"]
    missing = [name for name in counters if f"`{name}`" not in listed]
    assert missing == [], f"counters promtool flags that metrics.md does not list: {missing}"
    # The kinds tests/promtool_lint.py lets through, each said on the page.
    for kind in ('"_total"', "type 'counter'", "camelCase (`modelName`, `Hostname`)", "node_memory_MemFree_bytes"):
        assert kind in listed, kind


# ---- samples of program output ---------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _same_screen_line(page_line: str, screen_line: str) -> bool:
    """The same words and units, every number within 15% (or 1) of the screen's: a simulated node
    drifts a little from run to run, a unit or a figure 8 times off does not."""
    if _NUMBER.sub("#", page_line) != _NUMBER.sub("#", screen_line):
        return False
    pairs = zip(_NUMBER.findall(page_line), _NUMBER.findall(screen_line), strict=True)
    return all(abs(float(a) - float(b)) <= max(1.0, 0.15 * abs(float(b))) for a, b in pairs)


def test_the_top_sample_in_views_md_is_what_top_draws() -> None:
    """docs/views.md's 80-column `top` sample against `nodeagent top --simulate ordinary-cloud
    --once` drawn 80 columns wide: each line of the page is a line of the screen (the page
    elides GPUs 1-7, and its footer adds the CPU times the interactive view prints)."""
    from click.testing import CliRunner

    from nodeagent.agent.cli.main import cli

    text = (REPO / "docs" / "views.md").read_text()
    sample = next(body for _lang, body in FENCE.findall(text) if body.startswith("nodeagent top · "))
    drawn = CliRunner().invoke(cli, ["top", "--simulate", "ordinary-cloud", "--once"], env={"COLUMNS": "80"})
    assert drawn.exit_code == 0, drawn.output
    screen = [line.rstrip() for line in drawn.output.splitlines()]
    for line in sample.splitlines():
        if line.strip().startswith("..."):
            continue
        said = line.split(" · CPU tick", 1)[0]
        assert any(_same_screen_line(said, shown) for shown in screen), f"not on the screen: {said!r}\n{drawn.output}"


def test_the_demo_sample_in_collector_md_shows_the_skew_the_page_says() -> None:
    """The demo waits for the rentals' sped-up clocks to catch up (``CAUGHT_UP_SECONDS``), and the
    page's sample and its prose say the same: not "a few seconds behind" beside -26.1 s."""
    from nodeagent.tools.demo import CAUGHT_UP_SECONDS

    text = (REPO / "docs" / "collector.md").read_text()
    assert f"within {CAUGHT_UP_SECONDS:g} s of the collector's" in " ".join(text.split())
    sample = next(body for _lang, body in FENCE.findall(text) if body.startswith("collector  127.0.0.1:"))
    skews = {line.split()[0]: line.split()[-2] for line in sample.splitlines() if line.startswith("rental-")}
    assert len(skews) == 2
    for node, skew in skews.items():
        assert -CAUGHT_UP_SECONDS <= float(skew.removesuffix("s")) <= 0, (node, skew)


# ---- the suite -----------------------------------------------------------------------------------

COUNTS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def test_the_testing_page_shows_make_tests_passes_and_counts_the_alone_tests() -> None:
    """docs/testing.md gives each pytest pass as the Makefile runs it, and the number of tests
    marked ``alone`` (one per decorator: none of them is parametrized)."""
    page = _flat(REPO / "docs" / "testing.md")
    passes = re.findall(r"^\t\$\(BIN\)/(pytest\b.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert len(passes) == 2 and all(f"`{command}`" in page for command in passes), passes
    marked = sum(
        len(re.findall(r"^@pytest\.mark\.alone\b", path.read_text(), re.MULTILINE))
        for path in (REPO / "tests").rglob("test_*.py")
    )
    said = re.search(r"the (\w+) tests marked `alone`", page)
    assert said is not None and said[1] in COUNTS, "docs/testing.md: say how many tests are marked alone"
    assert COUNTS.index(said[1]) == marked, f"docs/testing.md says {said[1]}, the tests mark {marked}"
