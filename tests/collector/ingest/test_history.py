"""The collector's history: per-minute rows written in the flush transaction, agreeing with a
replay of the same reports, pruned exactly at the retention, and kept across a SIGKILL."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.config import OPEN_WRITE_SECONDS, QUIET_MARGIN_SECONDS, HistoryConfig
from nodeagent.collector.history.minutes import NODE_ROW
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.replay import Replay
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.wire.trace import format_report
from nodeagent.tools.simulator.simulation import DEFAULT_START_TIME, Simulation
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.fleet import Agent, Collector, cli, free_port, processes, wait_for

NODE = "sim-history"
STEP_SECONDS = 2.0
# Two simulated hours of a node that starves for the network.
REPORTS = int(2 * 3600 / STEP_SECONDS)


def _reports(count: int) -> list[pb.NodeReport]:
    sim = Simulation("ordinary-cloud", node_id=NODE)
    out = []
    for seq in range(1, count + 1):
        report = sim.step(STEP_SECONDS)
        report.epoch, report.seq = 7, seq
        if seq == 1:
            report.info.CopyFrom(sim.info())
        out.append(report)
    return out


def _ingest(
    path: Path, config: HistoryConfig | None = None, clock: float = DEFAULT_START_TIME
) -> tuple[StoreWriter, Ingest]:
    """An ingest whose clock stands at ``clock`` (the simulated reports' own start by default):
    its retention sweep judges rows against that clock, as a collector judges fresh reports."""
    writer = StoreWriter(path)
    return writer, build_ingest(writer, Alerting(AlertConfig(), []), history=config, clock=lambda: clock)


def _stream(ingest: Ingest, reports: list[pb.NodeReport]) -> None:
    stream = StreamHandle(NODE, "test")
    ingest.attach(stream, reports[0].info)

    async def run() -> None:
        for i, report in enumerate(reports):
            ingest.accept(stream, report, report.SerializeToString())
            if i % 200 == 199:
                await ingest.flusher.flush()
        await ingest.flusher.flush(final=True)

    asyncio.run(run())


def test_minutes_agree_with_a_replay_of_the_same_reports(tmp_path: Path) -> None:
    reports = _reports(REPORTS)
    writer, ingest = _ingest(tmp_path / "c.db")
    _stream(ingest, reports)
    rows = writer.call_sync(writer.store.history.minutes, NODE, None, 0.0, None)
    writer.close()
    # What the minutes should say, from the reports and a replay over them.
    replay = Replay(DetectorConfig())
    util: dict[tuple[int, int], list[float]] = defaultdict(list)
    last_ratio: dict[tuple[int, int], float | None] = {}
    node_ratio: dict[int, float | None] = {}
    for report in reports:
        replay.observe(report)
        minute = int(report.time_unix_seconds // 60) * 60
        verdict = replay.nodes[NODE].detector.verdict
        for gpu in report.gpus:
            util[(gpu.index, minute)].append(gpu.utilization_gpu_ratio)
        for g in verdict.gpus:
            last_ratio[(g.index, minute)] = g.starvation_ratio
        node_ratio[minute] = verdict.starvation_ratio
    gpu_rows = {(r.gpu, r.minute): r for r in rows if r.gpu != NODE_ROW}
    node_rows = {r.minute: r for r in rows if r.gpu == NODE_ROW}
    assert set(gpu_rows) == set(util)
    assert len(node_rows) == len(node_ratio) >= 110  # two hours of minutes
    for key, values in util.items():
        row = gpu_rows[key]
        assert row.samples == len(values)
        assert row.values["utilization_mean"] == pytest.approx(sum(values) / len(values), abs=1e-9)
        assert row.values["utilization_min"] == pytest.approx(min(values))
        expected = last_ratio.get(key)
        if expected is None:
            assert "starvation_ratio" not in row.values
        else:
            assert row.values["starvation_ratio"] == pytest.approx(expected)
    for minute, expected in node_ratio.items():
        if expected is not None:
            assert node_rows[minute].values["starvation_ratio"] == pytest.approx(expected)
    # The node starves: its late minutes say so, with a cause and GPU time lost adding up to the
    # detector's own count.
    assert node_rows[max(node_rows)].state == "starved"
    assert node_rows[max(node_rows)].cause == "network"
    lost = sum(r.values.get("gpu_seconds_lost", 0.0) for r in node_rows.values())
    assert lost == pytest.approx(replay.nodes[NODE].detector.verdict.gpu_seconds_lost)
    assert lost > 0
    # Node rows of whole minutes carry the node's rates.
    whole = [r for r in node_rows.values() if r.samples == 60 / STEP_SECONDS]
    assert len(whole) >= 110
    assert all(r.values["nic_rx_bytes_per_second"] > 0 and 0 < r.values["cpu_busy_ratio"] <= 1 for r in whole)


def test_retention_prunes_exactly_what_is_older(tmp_path: Path) -> None:
    config = HistoryConfig(reports_seconds=300.0, retention_seconds=1800.0)
    writer, ingest = _ingest(tmp_path / "c.db", config)
    _stream(ingest, _reports(int(3600 / STEP_SECONDS)))
    store = writer.store
    before = writer.call_sync(store.history.minutes, NODE, None, 0.0, None)
    reports_before = writer.call_sync(store.history.reports, NODE, 0.0, None)
    # The flushes pruned as they went: nothing older than retention (plus the prune period) left.
    newest = max(r.time_unix_seconds for r in reports_before)
    assert min(r.minute for r in before) >= newest - 1800 - 60 - 30
    assert min(r.time_unix_seconds for r in reports_before) >= newest - 300 - 30
    minute_cut, report_cut = float(sorted({r.minute for r in before})[5]), newest - 120.0
    writer.call_sync(store.history.write, HistoryBatch(prune={NODE: (report_cut, minute_cut)}))
    after = writer.call_sync(store.history.minutes, NODE, None, 0.0, None)
    reports_after = writer.call_sync(store.history.reports, NODE, 0.0, None)
    writer.close()
    assert [(r.gpu, r.minute) for r in after] == [(r.gpu, r.minute) for r in before if r.minute >= minute_cut]
    assert [r.seq for r in reports_after] == [r.seq for r in reports_before if r.time_unix_seconds >= report_cut]
    # The stored reports are the reports themselves.
    assert pb.NodeReport.FromString(reports_after[-1].raw).seq == reports_before[-1].seq


def test_a_node_that_stopped_reporting_is_swept_by_the_collectors_clock(tmp_path: Path) -> None:
    config = HistoryConfig(reports_seconds=300.0, retention_seconds=1800.0)
    writer, ingest = _ingest(tmp_path / "c.db", config)
    _stream(ingest, _reports(int(1200 / STEP_SECONDS)))  # 20 minutes, then the node falls silent
    writer.close()
    # Later, another node's flushes run on a clock past the silent node's newest report: its rows
    # older than the retention (and its reports older than their window) go, though it sends nothing.
    later = DEFAULT_START_TIME + 1200 + 900
    writer, ingest = _ingest(tmp_path / "c.db", config, clock=later)
    store = writer.store
    minutes_before = writer.call_sync(store.history.minutes, NODE, None, 0.0, None)
    asyncio.run(ingest.flusher.flush())
    minutes_after = writer.call_sync(store.history.minutes, NODE, None, 0.0, None)
    reports_after = writer.call_sync(store.history.reports, NODE, 0.0, None)
    writer.close()
    assert minutes_before and min(r.minute for r in minutes_before) < later - 1800
    assert [(r.gpu, r.minute) for r in minutes_after] == [
        (r.gpu, r.minute) for r in minutes_before if r.minute >= later - 1800
    ]
    assert minutes_after and reports_after == []  # every stored report is older than later - 300


def test_history_survives_a_sigkill_and_is_served(tmp_path: Path) -> None:
    """Every stored report is in exactly one minute row, across a SIGKILL and restart."""
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        agent = Agent(
            ["--collector", collector.address, "--node-id", NODE, "--simulate", "ordinary-cloud",
             "--time-scale", "60", "--interval", "0.05", "--deadline", "120", "--spool-dir", str(tmp_path / "spool")]
        ).start(tmp_path / "agent.log")  # fmt: skip
        started.append(agent)
        # A report every 3 simulated seconds: 100 before the kill and 250 in all are 12.5 minutes.
        assert wait_for(lambda: collector.reports(NODE) > 100, 60, interval=0.3), agent.tail()
        collector.kill(signal.SIGKILL)
        time.sleep(1.0)
        collector.start()
        assert wait_for(lambda: collector.reports(NODE) > 250, 60, interval=0.3), agent.tail()
        agent.kill(signal.SIGTERM)
        time.sleep(0.5)
        stored = collector.reports(NODE)
        rows = json.loads(
            cli("collector", "history", NODE, "--since", "1d", "--json", "--collector", collector.address)
        )
        gpu0 = json.loads(
            cli("collector", "history", NODE, "--gpu", "0", "--since", "1d", "--step", "5m", "--json",
                "--collector", collector.address)
        )  # fmt: skip
        jobs = json.loads(cli("collector", "jobs", "--since", "1d", "--json", "--collector", collector.address))
        # The ledger over every minute (the simulated clock runs ahead of the wall's).
        span = ("--since", "1", "--until", str(int(time.time()) + 7 * 86400))
        ledger = json.loads(cli("collector", "ledger", *span, "--json", "--collector", collector.address))
    node_rows = [r for r in rows if r["gpu"] is None]
    # Per job: every GPU-minute that named it, the seconds of it the job held the GPU, and what
    # the ledger's split of those seconds lost, by category: one split, whichever view reads it.
    gpu_rows = [r for r in rows if r["gpu"] is not None and r["jobs"]]
    assert [j["job"] for j in jobs] == sorted({job for r in gpu_rows for job in r["jobs"]})
    # A single-node job: no live verdict of the job roll-up, the history's totals only.
    job = jobs[0]["history"]
    assert jobs[0]["state"] is None and jobs[0]["wait_ratio"] is None
    assert all(0 <= r["held_seconds"] <= 60 for r in gpu_rows), [r["held_seconds"] for r in gpu_rows]
    assert job["gpu_hours"] == pytest.approx(sum(r["held_seconds"] for r in gpu_rows) / 3600)
    [billed] = [row for row in ledger if row["job"] == jobs[0]["job"]]
    assert job["gpu_hours"] == pytest.approx(billed["gpu_hours_held"])
    assert job["gpu_hours_lost"] == pytest.approx(sum(billed["gpu_hours_lost"].values())) and job["gpu_hours_lost"] > 0
    assert job["gpu_hours_lost_by_cause"] == pytest.approx({c: h for c, h in billed["gpu_hours_lost"].items() if h})
    assert job["gpu_hours_lost_by_cause"]["network"] > 0  # ordinary-cloud starves for its network
    assert job["nodes"] == jobs[0]["nodes"] == [NODE]
    assert sum(r["samples"] for r in node_rows) == stored
    minutes = [r["time_unix_seconds"] for r in node_rows]
    assert minutes == list(range(int(minutes[0]), int(minutes[-1]) + 60, 60))  # none missing
    assert {r["gpu"] for r in gpu0} == {0}
    assert all(r["time_unix_seconds"] % 300 == 0 for r in gpu0)
    assert sum(r["samples"] for r in gpu0) == stored
    assert all(0 <= r["utilization_mean"] <= 1 for r in gpu0 if not math.isnan(r["utilization_mean"] or 0))


def test_a_restart_rebuilds_the_open_minute_from_the_stored_reports(tmp_path: Path) -> None:
    """Killed between two writes of its open minute, the collector loses none of its reports'
    values: the minutes after a restart equal those of a run that never stopped."""
    reports = _reports(200)
    writer, ingest = _ingest(tmp_path / "whole.db")
    _stream(ingest, reports)
    whole = writer.call_sync(writer.store.history.minutes, NODE, None, 0.0, None)
    writer.close()

    writer, ingest = _ingest(tmp_path / "killed.db")
    stream = StreamHandle(NODE, "test")
    ingest.attach(stream, reports[0].info)

    async def first_part() -> None:
        for report in reports[:137]:
            ingest.accept(stream, report, report.SerializeToString())
            await ingest.flusher.flush()  # each report durable, the open minute written only now and then

    asyncio.run(first_part())
    writer.close()  # no final flush: as a SIGKILL leaves it
    writer, ingest = _ingest(tmp_path / "killed.db")
    _stream(ingest, reports[130:])  # the agent sends again what it had no ack for
    again = writer.call_sync(writer.store.history.minutes, NODE, None, 0.0, None)
    writer.close()
    assert [(r.gpu, r.minute, r.samples) for r in again] == [(r.gpu, r.minute, r.samples) for r in whole]
    for a, b in zip(again, whole, strict=True):
        assert a.values["utilization_mean"] == pytest.approx(b.values["utilization_mean"])
        assert a.values["utilization_min"] == pytest.approx(b.values["utilization_min"])


def test_replay_of_stored_reports_is_the_replay_of_the_trace(tmp_path: Path) -> None:
    """`replay --node` runs the detector over the store's reports exactly as over a trace file,
    and its verdicts agree with the history's minutes."""
    reports = _reports(int(1800 / STEP_SECONDS))
    writer, ingest = _ingest(tmp_path / "c.db")
    _stream(ingest, reports)
    rows = writer.call_sync(writer.store.history.minutes, NODE, NODE_ROW, 0.0, None)
    writer.close()
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(format_report(r) + "\n" for r in reports))
    from_trace = json.loads(cli("collector", "replay", str(trace), "--json"))
    stored = json.loads(cli("collector", "replay", "--node", NODE, "--since", "1h", "--db", str(tmp_path / "c.db"),
                            "--json"))  # fmt: skip
    assert stored["nodes"] == from_trace["nodes"]
    final = stored["nodes"][0]["final_verdict"]
    assert final["state"] == rows[-1].state == "starved"
    assert rows[-1].values["starvation_ratio"] == pytest.approx(final["starvation_ratio"])


def test_replay_needs_a_trace_or_a_stored_node(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "replay", "--node", "nobody", "--db", str(tmp_path / "none.db")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "none.db" in done.stderr


def test_a_1_hz_node_has_its_open_minute_written_every_5_s_and_once_it_goes_quiet() -> None:
    """The open minute goes out every OPEN_WRITE_SECONDS of reports, not with every report of a
    node whose reports come a second apart; a node that stops has it written once its silence
    passes its usual gap by QUIET_MARGIN_SECONDS."""
    sim = Simulation("healthy", node_id=NODE)
    history = NodeHistory(NODE, HistoryConfig())
    wall, writes, reports = 1000.0, 0, 30
    for seq in range(1, reports + 1):
        report = sim.step(1.0)
        report.epoch, report.seq = 1, seq
        history.observe(report, report.SerializeToString(), None)
        wall += 1.0
        for flush in range(20):  # the report's flush, then the flushes before the next report
            batch = history.take(wall + 0.01 + flush * 0.05)
            writes += bool(batch.minutes)
    # Every 5 s of reports (the first report's write among them), and a minute that closed.
    assert writes <= reports / OPEN_WRITE_SECONDS + 2
    assert history.pending
    assert not history.take(wall + 1.0 + QUIET_MARGIN_SECONDS - 0.1).minutes  # the next report may be on its way
    assert history.take(wall + 1.0 + QUIET_MARGIN_SECONDS + 0.1).minutes  # quiet: written
    assert not history.pending
