"""Silent nodes rest (``collector/ingest/resting.py``): past ``[alerts] node_down_seconds``, with
their history written, a node keeps what ``nodes``, the page and ``/metrics`` show and lets go of
its detector's windows, its alert rules, its job-stage state and its history; ``/metrics`` keeps
two lines of it. A node that reports again starts a new detector and a history seeded from the
open minute it had, as after a restart. In process, on the collector's own clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import DAY_SECONDS, NODE_ROW
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.ingest.shown_state import node_shown_state
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.views.metrics_fleet import FleetMetrics
from nodeagent.tools.simulator import Simulation

DOWN_SECONDS = 60.0


class _Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _feed(ingest: Ingest, clock: _Clock, sims: list[Simulation], epoch: int, seqs: range) -> list[StreamHandle]:
    streams = [StreamHandle(sim.node_id, "test") for sim in sims]
    for sim, stream in zip(sims, streams, strict=True):
        ingest.attach(stream, sim.info())
    for seq in seqs:
        clock.now += 1.0
        for sim, stream in zip(sims, streams, strict=True):
            report = sim.step(1.0)
            report.epoch, report.seq, report.time_unix_seconds = epoch, seq, clock.now
            if seq == seqs.start:
                report.info.CopyFrom(sim.info())
            ingest.accept(stream, report, report.SerializeToString())
    return streams


def _stored_lost_today(writer: StoreWriter, node: str, now: float) -> float:
    """The split's GPU-seconds lost in the node's stored minutes of the day of ``now``."""
    rows = writer.call_sync(writer.store.history.minutes, node, NODE_ROW, now // DAY_SECONDS * DAY_SECONDS, None)
    return sum(split.lost_seconds(list(r.split)) for r in rows if r.split is not None)


def _lines(text: str, node: str) -> list[str]:
    return [line for line in text.splitlines() if f'node="{node}"' in line]


def test_a_silent_node_rests_and_comes_back_whole(tmp_path: Path) -> None:
    clock = _Clock()
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(node_down_seconds=DOWN_SECONDS), [])
    ingest = build_ingest(writer, alerting, clock=clock)
    gone, live = Simulation("ordinary-cloud", node_id="gone", seed=1), Simulation("fast-cloud", node_id="live", seed=1)
    try:
        streams = _feed(ingest, clock, [gone, live], 1, range(1, 121))
        asyncio.run(ingest.flusher.flush())
        node = ingest.nodes["gone"]
        detector = node.detector
        assert detector is not None and detector.verdict.state == "starved"
        last_verdict, heard = detector.verdict, node.row.last_seen
        full = len(_lines(FleetMetrics(ingest).render(), "gone"))

        ingest.detach(streams[0])  # it hangs up; the other goes on reporting
        streams[1:] = _feed(ingest, clock, [live], 1, range(121, 121 + int(DOWN_SECONDS) + 2))

        async def flushes() -> None:
            await ingest.flusher.flush(final=True)  # its open minute written, as once it is quiet
            clock.now += 1.0
            await ingest.flusher.flush()

        asyncio.run(flushes())
        assert node.resting and not ingest.nodes["live"].resting
        # Its GPU time lost today (the ledger's split) is kept whole: what the store holds of its day.
        lost = node.lost_today_seconds(clock.now)
        assert lost > 0 and lost == pytest.approx(_stored_lost_today(writer, "gone", clock.now))
        # What the views read is kept: the last verdict, the row, the latest report, the state.
        assert node.detector is detector and detector.rested and detector.verdict is last_verdict
        assert not detector._tracks and detector._info.ByteSize() == 0
        assert node_shown_state(node, clock.now, DOWN_SECONDS) == "down"
        assert node.row.last_seen == heard and node.latest is not None
        # What only reporting needs is let go: rules, job stage, history (its open minute kept as seed).
        assert "gone" not in alerting.rules and "live" in alerting.rules
        assert "gone" not in ingest.jobs.nodes._detectors
        assert node.history is None
        seed_rows, _reports = ingest.resting.seeds["gone"]
        assert {row.gpu for row in seed_rows} >= {0, 1, 2, 3, 4, 5, 6, 7}

        # /metrics: the resting node's state and last report time, nothing else.
        text = FleetMetrics(ingest).render()
        resting_lines = _lines(text, "gone")
        assert len(resting_lines) == 2 < full
        assert any(line.startswith("nodeagent_node_state{") and 'state="down"' in line for line in resting_lines)
        assert any(line.startswith("nodeagent_node_last_report_timestamp_seconds{") for line in resting_lines)
        assert len(_lines(text, "live")) > 2
        assert list(text_string_to_metric_families(text))  # still a valid page

        # It comes back: a new detector (a new epoch or not), its history seeded, its rules anew.
        _feed(ingest, clock, [gone], 1, range(200, 260))
        assert not node.resting
        assert node.detector is not None and node.detector is not detector and not node.detector.rested
        assert node.detector.verdict.time_unix_seconds > last_verdict.time_unix_seconds
        assert node.history is not None and "gone" not in ingest.resting.seeds
        assert "gone" in alerting.rules
        assert node_shown_state(node, clock.now, DOWN_SECONDS) != "down"
        assert len(_lines(FleetMetrics(ingest).render(), "gone")) > 2
        asyncio.run(ingest.flusher.flush(final=True))  # its history writes again
        # ... and its day goes on from there, the reopened minute counted once.
        again = node.lost_today_seconds(clock.now)
        assert again > lost and again == pytest.approx(_stored_lost_today(writer, "gone", clock.now))
    finally:
        writer.call_sync(alerting.close)
        writer.close()


def test_a_node_whose_open_minute_is_not_written_does_not_rest(tmp_path: Path) -> None:
    clock = _Clock()
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(node_down_seconds=DOWN_SECONDS), [])
    ingest = build_ingest(writer, alerting, clock=clock)
    try:
        streams = _feed(ingest, clock, [Simulation("healthy", node_id="quiet", seed=1)], 1, range(1, 30))
        ingest.detach(streams[0])
        node = ingest.nodes["quiet"]
        assert node.history is not None
        node.history.touched = True  # its open minute waits for a flush that has not come
        ingest.flusher._history_pending.add("quiet")
        clock.now += DOWN_SECONDS + 1
        ingest.resting.check(ingest.nodes, clock.now, ingest.flusher._history_pending)
        assert not node.resting and node.history is not None
    finally:
        writer.call_sync(alerting.close)
        writer.close()
