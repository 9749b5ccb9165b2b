"""One order of stages for ingest and replay (``collector/ingest/report_stages.py``): a lab trace fed to a real
``Ingest`` (its store, alert book and job roll-up) and replayed offline gives the same node
verdicts, the same job verdicts and the same alerts; and a restarted agent (a new epoch) gets a
new detector in both."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.replay import Replay
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.tools.lab_traces import cluster_traces
from nodeagent.v1 import nodeagent_pb2 as pb

DATA = Path(__file__).resolve().parents[1] / "data" / "lab_cluster"
TRACES = {t.name: t for t in cluster_traces(DATA)}


@pytest.mark.parametrize("scenario", ["network", "two-jobs"])
def test_a_lab_trace_through_ingest_and_through_replay_gets_the_same_verdicts_and_alerts(
    tmp_path: Path, scenario: str
) -> None:
    trace = TRACES[scenario]
    reports = list(trace.reports())
    replayed = Replay(trace.config)
    for report in reports:
        replayed.observe(report)
    live = asyncio.run(_ingest(tmp_path, trace.config, reports))
    ingest, alerts = live
    for node_id, node in replayed.nodes.items():
        detector = ingest.nodes[node_id].detector
        assert detector is not None
        assert detector.verdict.to_plain() == node.detector.verdict.to_plain(), node_id
    # The same verdicts, but for the GPU time lost: with a history the roll-up adds up the ledger's
    # split of its GPUs' seconds (one figure everywhere), replay (no store) the detectors' count.
    live_jobs, replayed_jobs = ingest.jobs.verdicts(), replayed.rollup.verdicts()
    assert [replace(v, gpu_seconds_lost=0.0) for v in live_jobs] == [
        replace(v, gpu_seconds_lost=0.0) for v in replayed_jobs
    ]
    assert all(v.gpu_seconds_lost > 0 for v in (*live_jobs, *replayed_jobs) if v.straggler_nodes)
    # Every alert the live book raised, replay raised (and resolved) the same way.
    plain = replayed.to_plain()
    replay_alerts = {(a["name"], a["node_id"], a["key"], a["status"]) for n in plain["nodes"] for a in n["alerts"]} | {
        (a["name"], a["node_id"], a["key"], a["status"]) for j in plain["jobs"] for a in j["alerts"]
    }
    assert alerts <= {(n, node, k) for n, node, k, _ in replay_alerts}, (alerts, replay_alerts)
    fired = {(n, node, k) for n, node, k, s in replay_alerts if s == "firing"}
    assert fired == alerts


async def _ingest(
    tmp_path: Path, config: DetectorConfig, reports: list[pb.NodeReport]
) -> tuple[Ingest, set[tuple[str, str, str]]]:
    now = [reports[0].time_unix_seconds]
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, detector_config=config, clock=lambda: now[0])
    streams: dict[str, StreamHandle] = {}
    for report in reports:
        stream = streams.get(report.node_id)
        if stream is None:
            stream = streams[report.node_id] = StreamHandle(report.node_id, "test")
            ingest.attach(stream, report.info)
        now[0] = report.time_unix_seconds
        ingest.accept(stream, report, report.SerializeToString())
        await ingest.flusher.flush()
    # Every alert that fired at some point, from the book's recent list.
    alerts = {(a.name, a.node_id, a.key) for a in writer.call_sync(alerting.recent, True)}
    writer.close()
    return ingest, alerts


def test_a_node_that_fails_over_keeps_its_links_from_its_hello(tmp_path: Path) -> None:
    """A node that came over from another collector sends its topology in its hello only (its
    epoch's first report went to the collector it left): its detector still knows its links, so
    a network-starved node is named `network`, not `unknown`."""
    asyncio.run(_failed_over(tmp_path))


async def _failed_over(tmp_path: Path) -> None:
    from nodeagent.tools.simulator import Simulation

    sim = Simulation("ordinary-cloud", node_id="moved", seed=1, start_time=1_800_000_000.0)
    now = [1_800_000_000.0]
    writer = StoreWriter(tmp_path / "c.db")
    ingest = build_ingest(writer, Alerting(AlertConfig(), []), clock=lambda: now[0])
    stream = StreamHandle("moved", "test")
    ingest.attach(stream, sim.info())
    for seq in range(1, 151):
        report = sim.step(0.0 if seq == 1 else 1.0)
        report.epoch, report.seq = 1, 1000 + seq  # the epoch's first reports went elsewhere
        report.ClearField("info")
        now[0] = report.time_unix_seconds
        ingest.accept(stream, report, report.SerializeToString())
        await ingest.flusher.flush()
    detector = ingest.nodes["moved"].detector
    assert detector is not None
    assert (detector.verdict.state, detector.verdict.cause) == ("starved", "network")
    writer.close()
