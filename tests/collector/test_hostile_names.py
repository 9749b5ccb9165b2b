"""Any printable job key, account and namespace (commas, quotes, ``=``, spaces, unicode) goes in
through a collector's ingest and comes out of every output as one intact value: ``ledger`` (table,
``--json``, ``--csv``, by job, account and namespace), ``jobs`` (table and ``--json``),
``history`` (``--json`` and ``--csv``), the fleet page's JSON and the ledger page, and
``/metrics``. A CSV cell that would start a formula is neutralised and reads back exactly
(``core/program/safe_text.py``); no table line holds a control character or is split in two.

One collector serves every example (its event loop on a thread of its own); each example is
two new nodes of one new job, fed half a minute of reports and flushed, then every output read.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.collector.cli.main import cli
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.ledger.prices import NO_PRICES_LINE
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.views.fleet_table import short
from nodeagent.core.program.safe_text import FORMULA_STARTS, csv_value, escape_controls
from tests.fakes.job_reports import FakeNode, JobPart, stream

T = TypeVar("T")
SECONDS = 30  # of reports per node and example: the history's minute, the roll-up's first steps
EXAMPLES = 40
# What the outputs were asked, by output: the counts the test reports.
CHECKED: Counter[str] = Counter()

_NASTY = ["=", "+", "-", "@", ",", '"', "'", "=1+1", "+cmd|x", "-2+3", "@SUM(A1)", " ", ";", "\\", "torch/run,x"]
_PRINTABLE = st.text(
    alphabet=st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), min_size=1, max_size=24
).filter(str.isprintable)
NAMES = st.one_of(_PRINTABLE, st.builds(lambda head, rest: head + rest, st.sampled_from(_NASTY), _PRINTABLE))


class Collector:
    """A collector whose event loop runs on its own thread; examples feed it and ask it."""

    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = ServerConfig(listen="127.0.0.1:0", db_path=tmp / "c.db", http_listen="127.0.0.1:0", flush_seconds=3600)
        self.server = CollectorServer(config)
        self.run(self.server.start())
        assert self.server.http is not None
        self.target = f"127.0.0.1:{self.server.port}"
        self.base = f"http://{self.server.http.address}"
        self.examples = 0
        self.seen: set[str] = set()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=60)

    def feed(self, nodes: list[FakeNode], start: float) -> None:
        async def feeding() -> None:
            handles: dict[str, StreamHandle] = {}
            for report in stream(nodes, SECONDS, start=start):
                handle = handles.get(report.node_id)
                if handle is None:
                    handle = handles[report.node_id] = StreamHandle(report.node_id, "test")
                    self.server.ingest.attach(handle, report.info)  # a node's first report carries its hello
                self.server.ingest.accept(handle, report, report.SerializeToString())
            await self.server.ingest.flusher.flush(final=True)

        self.run(feeding())

    def close(self) -> None:
        self.run(self.server.stop(0.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    shared = Collector(tmp_path_factory.mktemp("hostile"))
    try:
        yield shared
    finally:
        shared.close()
        print(f"\nhostile names: {shared.examples} examples, {sum(CHECKED.values())} outputs checked: {dict(CHECKED)}")


@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(job=NAMES, account=NAMES, namespace=NAMES)
@example(job="torch/run,x", account="+cmd|x", namespace="=1+1")  # issue 47's
@example(job="'=1", account="'", namespace='"a, b"')  # a quote of its own reads back as itself
def test_any_printable_name_reads_back_whole_from_every_output(
    collector: Collector, job: str, account: str, namespace: str
) -> None:
    assume(job not in collector.seen)  # each example's job is a new one: its rows are its own
    collector.seen.add(job)
    collector.examples += 1
    index = collector.examples
    nodes = [
        FakeNode(f"hostile-{index}-{n}", [JobPart(job, (0, 1), (2 * n, 2 * n + 1), 4, "torch", account, namespace)],
                 gpus=2)
        for n in range(2)
    ]  # fmt: skip
    start = time.time() - SECONDS
    collector.feed(nodes, start)
    span = ["--since", str(start - 120), "--until", str(time.time() + 120)]
    ask = _asker(collector.target)
    _ledger_by_job(ask, span, job, account, namespace)
    for by, owner in (("account", account), ("namespace", namespace)):
        _ledger_by_owner(ask, span, by, owner, job)
    _jobs(ask, job)
    _history(ask, nodes[0].node_id, job)
    _pages(collector.base, span, nodes[0].node_id, job)
    _metrics(collector.base, nodes[0].node_id, job)


def _asker(target: str) -> Callable[..., str]:
    runner = CliRunner()

    def ask(*args: str) -> str:
        done = runner.invoke(cli, [*args, "--collector", target])
        assert done.exit_code == 0, (args, done.output)
        return done.stdout  # the JSON or CSV alone: notes such as "no prices" go to stderr

    return ask


def _check(name: str) -> None:
    CHECKED[name] += 1


def _ledger_by_job(ask: Callable[..., str], span: list[str], job: str, account: str, namespace: str) -> None:
    everyone = json.loads(ask("ledger", "--by", "job", "--json", *span))
    rows = [r for r in everyone if r["job"] == job]
    assert len(rows) == 1 and (rows[0]["account"], rows[0]["namespace"]) == (account, namespace), rows
    assert len(rows[0]["nodes"]) == 2, rows  # the job's hours are the job's: none split off to a part of its key
    _check("ledger --json")
    lines = _csv_rows(ask("ledger", "--by", "job", "--csv", *span))
    mine = [line for line in lines if csv_value(line["job"]) == job]
    assert len(mine) == 1, (job, lines)
    assert (csv_value(mine[0]["account"]), csv_value(mine[0]["namespace"])) == (account, namespace)
    _check("ledger --csv")
    _table_row(ask("ledger", "--by", "job", *span), job, "ledger table", lines=2 + len(everyone))


def _ledger_by_owner(ask: Callable[..., str], span: list[str], by: str, owner: str, job: str) -> None:
    everyone = json.loads(ask("ledger", "--by", by, "--json", *span))
    rows = [r for r in everyone if r[by] == owner]
    assert len(rows) == 1 and job in rows[0]["jobs"], (by, owner, rows)
    _check(f"ledger --by {by} --json")
    lines = [line for line in _csv_rows(ask("ledger", "--by", by, "--csv", *span)) if csv_value(line[by]) == owner]
    assert len(lines) == 1 and job in json.loads(csv_value(lines[0]["jobs"])), (by, owner, lines)
    _check(f"ledger --by {by} --csv")
    _table_row(ask("ledger", "--by", by, *span), owner, f"ledger --by {by} table", lines=2 + len(everyone))


def _jobs(ask: Callable[..., str], job: str) -> None:
    rows = [r for r in json.loads(ask("jobs", "--json")) if r["job"] == job]
    assert len(rows) == 1 and rows[0]["live"] and rows[0]["history"] is not None, rows
    assert len(rows[0]["nodes"]) == 2
    _check("jobs --json")
    _table_row(ask("jobs"), job, "jobs table", width=24)


def _history(ask: Callable[..., str], node_id: str, job: str) -> None:
    rows = [r for r in json.loads(ask("history", node_id, "--json")) if r["gpu"] is not None and r["jobs"]]
    assert rows and all(r["jobs"] == [job] for r in rows), rows
    _check("history --json")
    lines = [line for line in _csv_rows(ask("history", node_id, "--csv")) if line["gpu"] and line["jobs"] != "[]"]
    assert lines and all(json.loads(csv_value(line["jobs"])) == [job] for line in lines), lines
    _check("history --csv")


def _pages(base: str, span: list[str], node_id: str, job: str) -> None:
    jobs = [j for j in _get_json(f"{base}/api/jobs")["jobs"] if j["job"] == job]
    assert len(jobs) == 1, jobs
    _check("page /api/jobs")
    assert _get_json(f"{base}/api/job/{urllib.parse.quote(job, safe='')}")["job"] == job
    _check("page /api/job/<job>")
    [node] = [n for n in _get_json(f"{base}/api/fleet")["nodes"] if n["node_id"] == node_id]
    assert node["jobs"] == [job], node
    _check("page /api/fleet")
    query = urllib.parse.urlencode({"by": "job", "since": span[1], "until": span[3]})
    rows = [r for r in _get_json(f"{base}/api/ledger?{query}")["rows"] if r["job"] == job]
    assert len(rows) == 1, rows
    _check("page /api/ledger")
    with urllib.request.urlopen(f"{base}/ledger?{query}", timeout=10) as reply:
        texts = _Texts()
        texts.feed(reply.read().decode())
    assert job in texts.cells, (job, texts.cells[:20])
    _check("page /ledger")


def _metrics(base: str, node_id: str, job: str) -> None:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    # The parser reads the label values back unescaped: the job's own series, and the node's
    # GPU time held by the job (a counter: the family's name without ``_total``).
    named = {
        (family.name, sample.labels.get("node", ""))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("job_name") == job
    }
    assert ("nodeagent_job_state", "") in named, sorted(named)
    assert ("nodeagent_gpu_seconds", node_id) in named, sorted(named)
    _check("/metrics")


def _csv_rows(text: str) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for cell in row.values():
            # A text cell that starts a formula is neutralised; only a plain number may start with "-".
            assert not cell.startswith(FORMULA_STARTS) or _is_number(cell), cell
    return rows


def _table_row(text: str, name: str, what: str, width: int | None = None, lines: int | None = None) -> None:
    """The table has no control character and a line per row (``lines``: the title, the header
    and the rows, beside the ledger's one line saying it has no prices); the name's row starts with
    it, escaped and cut to the column as ``short`` cuts it."""
    assert all(line.isprintable() for line in text.splitlines()), what
    rows = [line for line in text.splitlines() if line != NO_PRICES_LINE]
    assert lines is None or len(rows) == lines, (what, lines, text)
    shown = escape_controls(name)
    cut = short(shown, width) if width else shown
    starts = [line for line in text.splitlines() if line.startswith((cut, short(shown, 32)))]
    assert starts, (what, name, text)
    _check(what)


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


class _Texts(HTMLParser):
    """The text of every element of a page, as a browser shows it (entities unescaped)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: list[str] = []

    def handle_data(self, data: str) -> None:
        self.cells.append(data)
