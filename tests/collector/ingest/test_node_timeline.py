"""GPU time lost today across a collector restart: the day's count starts from the history.

The rule (docs/views.md): at start-up, before it accepts a report, the collector reads each
node's stored GPU-seconds lost on the UTC day of its newest stored minute, that minute too however
little of it was written; the count then adds what this run's detectors lose. Those verdicts
reach the history only after the read, so a minute that was in flight at the restart (partly
stored, completed afterwards) counts once: the day's figure equals the history's own sum.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history.minutes import MINUTE_SECONDS, NODE_ROW
from nodeagent.collector.history.node_history import OPEN_WRITE_SECONDS
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.ingest.node_timeline import NodeTimeline
from nodeagent.collector.store.database import StoreWriter
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.tools.simulator.simulation import DEFAULT_START_TIME, Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

DAY_SECONDS = 86_400.0
NODE = "sim-lost-today"
GPUS = 8
MIDNIGHT = DEFAULT_START_TIME  # 2026-01-01 00:00 UTC
assert MIDNIGHT % DAY_SECONDS == 0


def _reports(start: float, count: int) -> list[pb.NodeReport]:
    """A starved 8-GPU node, one report a second from ``start``."""
    sim = Simulation("ordinary-cloud", node_id=NODE, seed=1, start_time=start)
    out = []
    for seq in range(1, count + 1):
        report = sim.step(0.0 if seq == 1 else 1.0)
        report.epoch, report.seq = 1, seq
        if seq == 1:
            report.info.CopyFrom(sim.info())
        out.append(report)
    return out


class _Run:
    """One collector run on ``path``: an ingest whose clock stands at ``clock``."""

    def __init__(self, path: Path, clock: float) -> None:
        self.writer = StoreWriter(path)
        self.ingest = Ingest(self.writer, Alerting(AlertConfig(), []), clock=lambda: clock)
        self.stream = StreamHandle(NODE, "test")

    def feed(self, reports: list[pb.NodeReport], flush_every: int = 10) -> None:
        """A flush every ``flush_every`` reports and after the last, so all of them are durable;
        the open minute goes out with a flush every OPEN_WRITE_SECONDS of reports, as always."""
        self.ingest.attach(self.stream, pb.NodeInfo(node_id=NODE))

        async def run() -> None:
            for i, report in enumerate(reports):
                self.ingest.accept(self.stream, report, report.SerializeToString())
                if i % flush_every == flush_every - 1:
                    await self.ingest.flusher.flush()
            await self.ingest.flusher.flush()

        asyncio.run(run())

    @property
    def timeline(self) -> NodeTimeline:
        return self.ingest.nodes[NODE].timeline

    def stored_lost(self, since: float) -> float:
        """The history's GPU-seconds lost in the node's minutes from ``since``."""
        rows = self.writer.call_sync(self.writer.store.history.minutes, NODE, NODE_ROW, since, None)
        return sum(r.values.get("gpu_seconds_lost", 0.0) for r in rows)

    def settle(self) -> None:
        """Every open minute written, as a stopping collector writes them."""
        asyncio.run(self.ingest.flusher.flush(final=True))

    def stop(self, killed: bool = False) -> None:
        if not killed:
            self.settle()
        self.writer.close()  # killed: as a SIGKILL leaves the file


def _from_scratch(reports: list[pb.NodeReport]) -> float:
    """What a collector that never saw the node counts over ``reports`` (a new detector)."""
    detector, timeline = NodeDetector(NODE, DetectorConfig()), NodeTimeline()
    for report in reports:
        before = detector.verdict
        if detector.observe(report) is not before:
            timeline.record(detector)
    return timeline.lost_today_seconds


@pytest.mark.parametrize("killed", [False, True], ids=["stopped", "killed"])
def test_a_restart_in_the_middle_of_a_minute_counts_that_minute_once(tmp_path: Path, killed: bool) -> None:
    start = MIDNIGHT + 3600.0  # 01:00 UTC
    reports = _reports(start, 300)
    cut = 152  # the restart falls 32 s into the minute 01:02, just after the detector's lost grew
    assert reports[cut].time_unix_seconds % MINUTE_SECONDS == 32
    first = _Run(tmp_path / "c.db", clock=start + 300)
    first.feed(reports[: cut - 20])
    # Then every report durable at once (a busy collector's flushes), the open minute written
    # only every OPEN_WRITE_SECONDS: killed now, its row lags the stored reports.
    first.feed(reports[cut - 20 : cut], flush_every=1)
    counted_before = first.timeline.lost_today_seconds
    first.stop(killed)

    second = _Run(tmp_path / "c.db", clock=start + 300)
    seed = second.timeline.lost_today_seconds  # before any report of this run
    assert seed == pytest.approx(second.stored_lost(MIDNIGHT)) and seed > 0
    if killed:
        # The open minute's last seconds (less than OPEN_WRITE_SECONDS of reports) were never
        # written: what they lost is missing from the day, and nothing more.
        assert 0 < counted_before - seed <= GPUS * OPEN_WRITE_SECONDS
    else:
        assert seed == pytest.approx(counted_before)
    second.feed(reports[cut - 10 :])  # the agent sends again what it had no ack for (duplicates)
    second.settle()
    after = second.timeline.lost_today_seconds
    # Once: the history's own sum for the day, which holds the minute 01:02 whole ...
    assert after == pytest.approx(second.stored_lost(MIDNIGHT))
    # ... and is what was stored before the restart plus what this run's detector lost.
    assert after == pytest.approx(seed + _from_scratch(reports[cut:]))
    second.stop()


def test_midnight_starts_the_day_again_across_a_restart(tmp_path: Path) -> None:
    reports = _reports(MIDNIGHT - 200, 400)  # 23:56:40 to 00:03:19 UTC
    before_midnight = [r for r in reports if r.time_unix_seconds < MIDNIGHT]
    after_midnight = reports[len(before_midnight) :]

    # Restarted at 00:01:40: the seed is the new day's minutes only, none of yesterday's.
    first = _Run(tmp_path / "today.db", clock=MIDNIGHT + 100)
    first.feed(reports[:300])
    first.stop()
    second = _Run(tmp_path / "today.db", clock=MIDNIGHT + 100)
    assert second.stored_lost(MIDNIGHT - DAY_SECONDS) > second.stored_lost(MIDNIGHT) > 0
    assert second.timeline.lost_today_seconds == pytest.approx(second.stored_lost(MIDNIGHT))
    second.feed(reports[300:])
    second.settle()
    assert second.timeline.lost_today_seconds == pytest.approx(second.stored_lost(MIDNIGHT))
    second.stop()

    # Restarted before midnight: yesterday's seed, then midnight starts the count again.
    first = _Run(tmp_path / "yesterday.db", clock=MIDNIGHT - 10)
    first.feed(before_midnight[:150])
    first.stop()
    second = _Run(tmp_path / "yesterday.db", clock=MIDNIGHT - 10)
    seed = second.timeline.lost_today_seconds
    assert seed == pytest.approx(second.stored_lost(MIDNIGHT - DAY_SECONDS)) and seed > 0
    second.feed(reports[150:])
    second.settle()
    today = second.stored_lost(MIDNIGHT)
    assert second.timeline.lost_today_seconds == pytest.approx(today) and today > 0
    assert second.stored_lost(MIDNIGHT - DAY_SECONDS) - today > seed  # yesterday's went on after the restart
    second.stop()

    # A node with no rows today starts at 0: stored yesterday, the page shows nothing lost today
    # until it reports, then only what it loses today.
    first = _Run(tmp_path / "quiet.db", clock=MIDNIGHT - 10)
    first.feed(before_midnight)
    first.stop()
    second = _Run(tmp_path / "quiet.db", clock=MIDNIGHT + 200)
    assert second.timeline.lost_today_seconds_at(MIDNIGHT - 1) > 0  # yesterday's, as yesterday saw it
    assert second.timeline.lost_today_seconds_at(MIDNIGHT + 200) == 0.0
    later = after_midnight[60:]  # back after a minute's silence
    second.feed(later)
    lost = second.timeline.lost_today_seconds_at(MIDNIGHT + 200)
    assert lost == pytest.approx(_from_scratch(later)) and lost > 0
    second.stop()
