"""Hours whose split nobody can measure: a GPU whose wait share is unknown (its verdict's
``wait_unknown_reason``, or the job roll-up's share it could not measure) bills them
``unmeasured``, neither computing nor lost; the parts still add up to held, from the split through
the store and ``Query.Ledger`` to the table, the CSV, ``/ledger`` and ``/metrics``; the money lost
is a range, lost to lost plus unmeasured."""

from __future__ import annotations

import csv
import functools
import io
import math
import re
import sqlite3
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.cli.jobs import job_rows, render_jobs
from nodeagent.collector.cli.ledger import ledger_csv, render_ledger
from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.merge import merge_ledger
from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.minutes import NODE_ROW, MinuteRow
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import ledger_answer
from nodeagent.collector.query.jobs import job_totals
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import Store, StoreWriter
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.collector.store.reader import ReadContext
from nodeagent.collector.views.ledger_page import LedgerPage, ledger_plain
from nodeagent.collector.views.metrics_fleet import FleetMetrics
from nodeagent.core.detector.verdict import GpuVerdict, NodeVerdict
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

NODE = "a100-0"
JOB = "torch/llm"
T0 = 1_800_000_000.0  # a minute's start
WINDOW = 20.0
REASON = "power is the last second's mean: it cannot separate 0.5 s phases"
PRICES = Prices("USD", 2.0)
UNMEASURED = split.INDEX["unmeasured"]


def _gpu(
    index: int, state: str, cause: str | None = None, ratio: float | None = None, **evidence: float | str
) -> GpuVerdict:
    return GpuVerdict(
        index=index, uuid=f"GPU-{index}", state=state, cause=cause, tier=None, starvation_ratio=ratio,
        interconnect_ratio=None, idle_ratio=ratio, gpu_seconds_lost=0.0, jobs=(JOB,), evidence=evidence,
    )  # fmt: skip


def _verdict(time: float, gpus: tuple[GpuVerdict, ...], node: str = NODE) -> NodeVerdict:
    return NodeVerdict(node, time, gpus[0].state, None, None, None, None, 0.0, (JOB,), None, {}, gpus)


def _report(time: float, gpus: int, node: str = NODE) -> pb.NodeReport:
    report = pb.NodeReport(node_id=node, epoch=1, seq=int(time), time_unix_seconds=time)
    for i in range(gpus):
        report.gpus.add(index=i, utilization_gpu_ratio=0.9)
    return report


# The unknown cell: a waiting GPU whose wait share nothing measured, a straggler starved on the
# network whose own data share is measured (the rest not), a GPU of a job-wide slowdown whose
# share the roll-up could not measure, and a clean GPU beside them.
UNKNOWN_CELL = (
    _gpu(0, "waiting", waiting_on="a100-3", waiting_job=JOB, wait_unknown_reason=REASON),
    _gpu(1, "starved", "network", 0.3, wait_unknown_reason=REASON),
    split.with_share(_gpu(2, "busy"), split.JobShare(None, "waiting", REASON)),
    _gpu(3, "busy"),
)


def _run(steps: list[tuple[float, tuple[GpuVerdict, ...]]]) -> tuple[NodeHistory, list[MinuteRow]]:
    """Every row the flushes wrote, the last write of each minute winning."""
    history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
    written: dict[tuple[int, int], MinuteRow] = {}
    for t, gpus in steps:
        history.observe(_report(t, len(gpus)), b"", _verdict(t, gpus), WINDOW)
        for row in history.take(0.0).minutes:
            written[(row.minute, row.gpu)] = row
    for row in history.take(math.inf).minutes:
        written[(row.minute, row.gpu)] = row
    return history, list(written.values())


def _parts(rows: list[MinuteRow], gpu: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for row in rows:
        if row.gpu == gpu and row.split is not None:
            for name, value in zip(split.CATEGORIES, row.split, strict=True):
                if value:
                    out[name] = out.get(name, 0.0) + value
    return out


def _assert_parts_equal_held(rows: list[MinuteRow]) -> None:
    for row in rows:
        assert row.split is not None
        held = (
            row.held_seconds
            if row.gpu != NODE_ROW
            else sum(r.held_seconds or 0.0 for r in rows if r.minute == row.minute and r.gpu != NODE_ROW)
        )
        assert sum(row.split) == pytest.approx(held), row


def test_an_unknown_wait_share_bills_the_rest_of_the_seconds_unmeasured() -> None:
    assert split.losses(UNKNOWN_CELL[0], False) == ((UNMEASURED, 1.0),)
    assert split.losses(UNKNOWN_CELL[1], False) == (
        (split.INDEX["network"], 0.3), (split.INDEX["interconnect"], 0.0), (UNMEASURED, pytest.approx(0.7)),
    )  # fmt: skip
    assert split.losses(UNKNOWN_CELL[2], False) == ((UNMEASURED, 1.0),)
    assert UNKNOWN_CELL[2].evidence[split.WAIT_UNKNOWN] == REASON
    # Its own losses stay its own: all of an idle GPU's idle, a throttled GPU's idle share throttled.
    assert split.losses(_gpu(0, "idle", wait_unknown_reason=REASON), False) == ((split.INDEX["idle"], 1.0),)
    throttled = split.losses(_gpu(0, "throttled", ratio=0.25, wait_unknown_reason=REASON), False)
    assert throttled == ((split.INDEX["throttled"], 0.25), (UNMEASURED, 0.75))
    # A waiting GPU whose share is known is as it was.
    assert split.losses(_gpu(0, "waiting", wait_ratio=0.4), False) == ((split.INDEX["waiting"], 0.4),)
    # Unmeasured is not lost: the GPU-seconds lost leave it out.
    parts = split.shares(UNKNOWN_CELL[1], False)
    assert split.lost_seconds(parts) == pytest.approx(0.3) and sum(parts) == pytest.approx(1.0)


def test_the_unknown_cells_minutes_bill_unmeasured_and_their_parts_equal_held() -> None:
    _history, rows = _run([(T0 + s, UNKNOWN_CELL) for s in range(90)])
    _assert_parts_equal_held(rows)
    held = sum(r.held_seconds or 0.0 for r in rows if r.gpu == 0)
    assert held == pytest.approx(89.0)
    assert _parts(rows, 0) == {"unmeasured": pytest.approx(held)}
    assert _parts(rows, 1) == {"network": pytest.approx(0.3 * held), "unmeasured": pytest.approx(0.7 * held)}
    assert _parts(rows, 2) == {"unmeasured": pytest.approx(held)}
    assert _parts(rows, 3) == {"computing": pytest.approx(held)}


def test_a_verdict_whose_share_is_unknown_takes_the_busy_seconds_of_its_window() -> None:
    """As a state entered does: the busy seconds before it, inside its window, were not known to
    compute; so they are unmeasured, and the counters never go down while they move."""
    busy = (_gpu(0, "busy"),)
    unknown = (_gpu(0, "waiting", waiting_on="a100-3", wait_unknown_reason=REASON),)
    steps = [(T0 + s, busy) for s in range(30)] + [(T0 + 30 + s, unknown) for s in range(20)]
    history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
    before = split.empty()
    for t, gpus in steps:
        history.observe(_report(t, 1), b"", _verdict(t, gpus), WINDOW)
        now = history.gpu_seconds().get(JOB, split.empty())
        assert all(b <= n + 1e-9 for b, n in zip(before, now, strict=True))
        before = now
    _history, rows = _run(steps)
    _assert_parts_equal_held(rows)
    # Held 49 s: 29 busy, 20 waiting. The verdict at T0+30 judges [T0+10, T0+30]: the 19 busy
    # seconds in it become unmeasured; the 10 before stay computing.
    assert _parts(rows, 0) == {"computing": pytest.approx(10.0), "unmeasured": pytest.approx(19.0 + 20.0)}


def _ledger(
    tmp_path: Path, by: str, rows: list[MinuteRow], compact: tuple[tuple[str, int], ...] = ()
) -> pb.LedgerResponse:
    store = Store(tmp_path / "c.db")
    try:
        nodes = [NodeRow(node_id=n, first_seen=1.0, last_seen=2.0) for n in sorted({r.node_id for r in rows})]
        batch = HistoryBatch(minutes=rows, compact=list(compact))
        store.write(nodes, before_commit=functools.partial(store.history.write, batch))
    finally:
        store.close()
    conn = sqlite3.connect(tmp_path / "c.db")
    try:
        request = pb.LedgerRequest(by=by)
        return ledger_answer(ReadContext(conn), request, PRICES, 1000, 1 << 20)
    finally:
        conn.close()


def _unknown_cell_rows() -> list[MinuteRow]:
    """Two hours of the unknown cell (a report every 10 s), the first summed into its hour."""
    hour = int(T0) // 3600 * 3600 + 3600
    _history, rows = _run([(hour + s, UNKNOWN_CELL) for s in range(0, 2 * 3600, 10)])
    return rows


def test_the_ledger_of_an_unknown_cell_unmeasured_hours_parts_equal_held_and_a_money_range(tmp_path: Path) -> None:
    rows = _unknown_cell_rows()
    hour = min(r.minute for r in rows)
    for compact in ((), ((NODE, hour),)):  # from the minutes alone, and from a summed hour and the minutes
        run = tmp_path / str(len(compact))
        run.mkdir()
        (row,) = _ledger(run, "job", rows, compact).rows
        held = sum(r.held_seconds or 0.0 for r in rows if r.gpu >= 0) / 3600
        assert row.gpu_hours_held == pytest.approx(held)
        # Per GPU a quarter of the held hours: GPU 0 and 2 all unmeasured, GPU 1 70% of it.
        assert row.gpu_hours_unmeasured == pytest.approx(held / 4 * (1 + 0.7 + 1))
        assert dict(row.gpu_hours_lost) == pytest.approx({"network": held / 4 * 0.3})
        assert row.gpu_hours_computing == pytest.approx(held / 4)
        parts = row.gpu_hours_computing + sum(row.gpu_hours_lost.values()) + row.gpu_hours_unmeasured
        assert parts == pytest.approx(row.gpu_hours_held, rel=1e-12)
        # The money lost is a range: lost, or lost plus the unmeasured hours' price.
        assert row.cost == pytest.approx(held * 2.0)
        assert row.cost_lost == pytest.approx(held / 4 * 0.3 * 2.0)
        assert row.cost_unmeasured == pytest.approx(row.gpu_hours_unmeasured * 2.0)
        plain = ledger_plain(row, "job")
        assert plain["cost_lost_max"] == pytest.approx(row.cost_lost + row.cost_unmeasured)
        assert plain["gpu_hours_unmeasured"] == row.gpu_hours_unmeasured
        assert "unmeasured" not in plain["gpu_hours_lost"]


def test_the_table_and_the_csv_bill_unmeasured_and_the_money_as_a_range(tmp_path: Path) -> None:
    clean = MinuteRow("l40s-0", 0, int(T0), samples=1, jobs=("clean",), held_seconds=60.0, split=split.empty())
    assert clean.split is not None
    clean.split[split.INDEX["computing"]] = 60.0
    response = _ledger(tmp_path, "job", [*_unknown_cell_rows(), clean])
    rows = [ledger_plain(r, "job") for r in response.rows]
    table = render_ledger(rows, "job", T0, T0 + 7200)
    head, llm, other = table.splitlines()[1:4]
    assert head.split()[:8] == ["JOB", "GPU-H", "COMPUTE", "NETWORK", "UNMEAS", "COST", "LOST", "LOST"]
    cells = llm.split()
    assert cells[0] == JOB and cells[3:5] == ["7.5%", "67.5%"]  # network 0.3/4, unmeasured 2.7/4
    lost, lost_max = float(cells[6]), float(cells[7])
    assert lost_max == pytest.approx(lost + response.rows[0].cost_unmeasured, abs=0.01) and lost_max > lost
    assert other.split()[4] == "0.0%"  # a job with nothing unmeasured reads 0 there
    assert "UNMEAS: held hours" in table and "the money lost is LOST to LOST MAX" in table
    # The CSV: a column of its own, and parts that add up to held.
    lines = list(csv.DictReader(io.StringIO(ledger_csv(rows, "job"))))
    llm_line = next(line for line in lines if line["job"] == JOB)
    parts = float(llm_line["gpu_hours_computing"]) + float(llm_line["gpu_hours_unmeasured"])
    parts += sum(float(v) for k, v in llm_line.items() if k.startswith("gpu_hours_lost_"))
    assert parts == pytest.approx(float(llm_line["gpu_hours_held"]), abs=1e-3)
    assert float(llm_line["cost_lost_max"]) == pytest.approx(
        float(llm_line["cost_lost"]) + 2.0 * float(llm_line["gpu_hours_unmeasured"]), abs=0.01
    )
    # Nothing unmeasured anywhere: the table as before, no column for it.
    plain = render_ledger([r for r in rows if r["job"] == "clean"], "job", T0, T0 + 60)
    assert "UNMEAS" not in plain and "LOST MAX" not in plain


def test_the_page_draws_the_unmeasured_hours_last_and_the_money_lost_as_a_range(tmp_path: Path) -> None:
    response = _ledger(tmp_path, "job", _unknown_cell_rows())
    (row,) = response.rows
    reply = LedgerPage(lambda _r: response, clock=lambda: T0 + 7200).route("/ledger", "")
    assert reply is not None and reply[0] == "200 OK"
    text = reply[2].decode()
    rects = re.findall(r"<rect class='cat-(\w+)' [^>]*data-gpu-hours='([\d.]+)'", text)
    assert [c for c, _h in rects] == ["computing", "network", "unmeasured"]
    assert sum(float(h) for _c, h in rects) == pytest.approx(row.gpu_hours_held, rel=1e-5)
    assert f"<td data-category='unmeasured'>{row.gpu_hours_unmeasured:.2f} h · {row.cost_unmeasured:.2f}</td>" in text
    assert f"<td class='cost-lost'>{row.cost_lost:.2f} – {row.cost_lost + row.cost_unmeasured:.2f}</td>" in text
    assert "id='unmeasured'" in text
    job = LedgerPage(lambda _r: response, clock=lambda: T0 + 7200).route("/ledger", f"job={JOB}")
    assert job is not None
    body = job[2].decode()
    lines = dict(re.findall(r"<tr data-category='(\w+)' data-gpu-hours='([\d.]+)'>", body))
    assert sum(float(v) for v in lines.values()) == pytest.approx(row.gpu_hours_held, rel=1e-5)
    assert float(lines["unmeasured"]) == pytest.approx(row.gpu_hours_unmeasured, rel=1e-5)
    assert f"money lost: {row.cost_lost:.2f} – {row.cost_lost + row.cost_unmeasured:.2f} USD" in body


def test_metrics_count_unmeasured_seconds_and_the_parts_equal_held(tmp_path: Path) -> None:
    """``nodeagent_gpu_seconds_total{category="unmeasured"}`` on the collector's /metrics."""
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: T0 + 200)
    try:
        sim = Simulation("fast-cloud", node_id=NODE, seed=1)
        ingest.attach(StreamHandle(NODE, "test"), sim.info())
        # The node's history as the ingest path keeps it, fed the unknown cell's verdicts.
        history = ingest.nodes[NODE].history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
        for s in range(180):
            t = T0 + s
            history.observe(_report(t, 4), b"", _verdict(t, UNKNOWN_CELL), WINDOW)
        page = FleetMetrics(ingest).render()
    finally:
        writer.call_sync(alerting.close)
        writer.close()
    (family,) = [f for f in text_string_to_metric_families(page) if f.name == "nodeagent_gpu_seconds"]
    parts = {s.labels["category"]: s.value for s in family.samples if s.labels["node"] == NODE}
    assert set(parts) == set(split.CATEGORIES)
    held = 4 * 179.0
    accs = [*history.open.values(), *(a for m in history.settling.values() for a in m.values())]
    forming = sum(sum(a.provisional) for a in accs if a.gpu >= 0 and a.provisional is not None)
    assert sum(parts.values()) == pytest.approx(held - forming)
    # Only the clean GPU's busy seconds may still be judged; the unknown cell's are settled.
    assert forming <= 179.0
    assert parts["unmeasured"] == pytest.approx((1 + 0.7 + 1) * 179.0)
    assert parts["network"] == pytest.approx(0.3 * 179.0)


def test_an_older_store_gains_the_column_and_its_rows_read_nothing_unmeasured(tmp_path: Path) -> None:
    """A database written before ``unmeasured``: its minutes gain the column NULL (read as 0 in a
    row with a split), its summed hours gain it as 0, and an hour summed again names its columns."""
    hour = int(T0) // 3600 * 3600
    db = tmp_path / "c.db"
    old_columns = [c for c in split.COLUMNS if c != "unmeasured_seconds"]
    with sqlite3.connect(db) as conn:  # the tables as the version before made them
        conn.execute(
            "CREATE TABLE history_ledger (node_id TEXT NOT NULL, hour INTEGER NOT NULL, jobs TEXT NOT NULL,"
            f" waiting_on TEXT NOT NULL, {', '.join(f'{c} REAL NOT NULL' for c in old_columns)},"
            " first_minute INTEGER NOT NULL, last_minute INTEGER NOT NULL,"
            " PRIMARY KEY (node_id, hour, jobs, waiting_on)) WITHOUT ROWID"
        )
        values = [60.0 if c == "computing_seconds" else 0.0 for c in old_columns]
        conn.execute(
            f"INSERT INTO history_ledger VALUES (?, ?, ?, '', {', '.join('?' * len(old_columns))}, ?, ?)",
            ("old", hour - 3600, JOB, *values, hour - 3600, hour - 3600),
        )
    store = Store(db)
    try:
        columns = [row[1] for row in store.conn.execute("PRAGMA table_info(history_ledger)")]
        assert columns[-1] == "unmeasured_seconds"  # added at the end, by ALTER
        # A minute of the older version: a split with no unmeasured column value.
        store.conn.execute(
            "INSERT INTO history_minutes (node_id, gpu, minute, samples, state, cause, jobs, last_time,"
            " held_seconds, computing_seconds, network_seconds) VALUES ('old', 0, ?, 1, 'busy', '', ?, ?, 60, 50, 10)",
            (hour, JOB, hour + 59.0),
        )
        [minute] = store.history.minutes("old", 0, 0, None)
        assert minute.split is not None and minute.split[UNMEASURED] == 0.0 and sum(minute.split) == 60.0
        # Summing an hour again (an older table: columns in another order) keeps each in its place.
        rows = _unknown_cell_rows()
        new_hour = min(r.minute for r in rows)
        store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(minutes=rows)))
        store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(compact=[(NODE, new_hour)])))
        summed = store.conn.execute(
            "SELECT TOTAL(unmeasured_seconds), TOTAL(network_seconds), MIN(first_minute) FROM history_ledger"
            " WHERE node_id=?",
            (NODE,),
        ).fetchone()
        in_hour = [r for r in rows if r.gpu >= 0 and new_hour <= r.minute < new_hour + 3600]
        assert summed[0] == pytest.approx(sum(r.split[UNMEASURED] for r in in_hour if r.split is not None))
        assert summed[1] == pytest.approx(sum(r.split[split.INDEX["network"]] for r in in_hour if r.split is not None))
        assert summed[2] == new_hour
        (old,) = [g for g in store.history.ledger.groups(0.0, None) if g[1] == "old"][:1]
        assert old[3 + UNMEASURED] == 0.0 and old[3] == 60.0
    finally:
        store.close()


def test_several_collectors_sum_their_unmeasured_hours_and_money() -> None:
    def row(unmeasured: float) -> pb.LedgerRow:
        return pb.LedgerRow(
            key=JOB, gpu_hours_held=2.0 + unmeasured, gpu_hours_computing=1.0, cost=2 * (2.0 + unmeasured),
            cost_lost=2.0, gpu_hours_unmeasured=unmeasured, cost_unmeasured=2 * unmeasured, currency="USD",
            gpu_hours_lost={"network": 1.0},
        )  # fmt: skip

    answers = [
        Answer("a:1", pb.LedgerResponse(rows=[row(3.0)]), ""),
        Answer("b:2", pb.LedgerResponse(rows=[row(1.0)]), ""),
    ]
    merged = merge_ledger(answers)
    assert isinstance(merged, pb.LedgerResponse)
    (total,) = merged.rows
    assert (total.gpu_hours_unmeasured, total.cost_unmeasured, total.cost_lost) == (4.0, 8.0, 4.0)
    parts = total.gpu_hours_computing + sum(total.gpu_hours_lost.values()) + total.gpu_hours_unmeasured
    assert parts == total.gpu_hours_held


def test_jobs_gives_the_same_unmeasured_hours_as_the_ledger_and_its_hours_lost_as_a_range(tmp_path: Path) -> None:
    rows = _unknown_cell_rows()
    (ledger_row,) = _ledger(tmp_path, "job", rows).rows
    conn = sqlite3.connect(tmp_path / "c.db")
    try:
        totals = job_totals(ReadContext(conn), pb.JobsRequest(last_seconds=3 * 3600), 1000)
    finally:
        conn.close()
    (total,) = totals.jobs
    assert total.gpu_hours_unmeasured == pytest.approx(ledger_row.gpu_hours_unmeasured)
    assert total.gpu_hours_lost == pytest.approx(sum(ledger_row.gpu_hours_lost.values()))
    table = render_jobs(job_rows([], totals), 86400.0)
    line = next(line for line in table.splitlines() if line.startswith(JOB))
    lost, unmeasured = total.gpu_hours_lost, total.gpu_hours_unmeasured
    assert f"{lost:.2f}..{lost + unmeasured:.2f}" in line
    assert "A..B where some hours are unmeasured" in table
