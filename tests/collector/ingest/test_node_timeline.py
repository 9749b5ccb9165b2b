"""GPU time lost today across a collector restart: the day's count starts from the history.

The rule (docs/views.md): the figure is the ledger's split. At start-up, before it accepts a
report, the collector reads each node's stored GPU-seconds lost by the split on the UTC day of
its newest stored minute, that minute too however little of it was written; the node's new
history reopens that minute (taken out of the base: it is the history's now) and counts what
comes after. So a minute that was in flight at the restart (partly stored, completed
afterwards) counts once: the day's figure equals the history's own sum of the day's node rows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history import split
from nodeagent.collector.history.config import OPEN_WRITE_SECONDS
from nodeagent.collector.history.minutes import MINUTE_SECONDS, NODE_ROW
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
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
        self.ingest = build_ingest(self.writer, Alerting(AlertConfig(), []), clock=lambda: clock)
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

    def lost_today(self, now: float | None = None) -> float:
        """The node's GPU-seconds lost today (by the collector's clock, or ``now``), as the page shows them."""
        return self.ingest.nodes[NODE].lost_today_seconds(self.ingest.clock() if now is None else now)

    def stored_lost(self, since: float) -> float:
        """The history's GPU-seconds lost by the split in the node's minutes from ``since``."""
        rows = self.writer.call_sync(self.writer.store.history.minutes, NODE, NODE_ROW, since, None)
        return sum(split.lost_seconds(list(r.split)) for r in rows if r.split is not None)

    def stored_day(self, midnight: float) -> float:
        return self.stored_lost(midnight) - self.stored_lost(midnight + DAY_SECONDS)

    def settle(self) -> None:
        """Every open minute written, as a stopping collector writes them."""
        asyncio.run(self.ingest.flusher.flush(final=True))

    def stop(self, killed: bool = False) -> None:
        if not killed:
            self.settle()
        self.writer.close()  # killed: as a SIGKILL leaves the file


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
    counted_before = first.lost_today()
    first.stop(killed)

    second = _Run(tmp_path / "c.db", clock=start + 300)
    seed = second.lost_today()  # before any report of this run
    assert seed == pytest.approx(second.stored_lost(MIDNIGHT)) and seed > 0
    if killed:
        # The open minute's last seconds (less than OPEN_WRITE_SECONDS of reports) were never
        # written: what they lost is missing from the day, and nothing more.
        assert 0 < counted_before - seed <= GPUS * OPEN_WRITE_SECONDS
    else:
        assert seed == pytest.approx(counted_before)
    second.feed(reports[cut - 10 :])  # the agent sends again what it had no ack for (duplicates)
    second.settle()
    after = second.lost_today()
    # Once: the history's own sum for the day, which holds the minute 01:02 whole, and more than
    # before the restart (148 s more of a starved node's 8 GPUs).
    assert after == pytest.approx(second.stored_lost(MIDNIGHT))
    assert after - seed > GPUS * 30
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
    assert second.lost_today() == pytest.approx(second.stored_lost(MIDNIGHT))
    second.feed(reports[300:])
    second.settle()
    assert second.lost_today() == pytest.approx(second.stored_lost(MIDNIGHT))
    second.stop()

    # Restarted before midnight: yesterday's seed, then midnight starts the count again.
    first = _Run(tmp_path / "yesterday.db", clock=MIDNIGHT - 10)
    first.feed(before_midnight[:150])
    first.stop()
    second = _Run(tmp_path / "yesterday.db", clock=MIDNIGHT - 10)
    seed = second.lost_today()
    assert seed == pytest.approx(second.stored_lost(MIDNIGHT - DAY_SECONDS)) and seed > 0
    second.feed(reports[150:])
    second.settle()
    today = second.stored_lost(MIDNIGHT)
    assert second.lost_today(MIDNIGHT + 200) == pytest.approx(today) and today > 0
    # Yesterday's went on after the restart, and is read whole as yesterday's.
    assert second.stored_day(MIDNIGHT - DAY_SECONDS) > seed
    assert second.lost_today(MIDNIGHT - 10) == pytest.approx(second.stored_day(MIDNIGHT - DAY_SECONDS))
    second.stop()

    # A node with no rows today starts at 0: stored yesterday, the page shows nothing lost today
    # until it reports, then only what it loses today.
    first = _Run(tmp_path / "quiet.db", clock=MIDNIGHT - 10)
    first.feed(before_midnight)
    first.stop()
    second = _Run(tmp_path / "quiet.db", clock=MIDNIGHT + 200)
    assert second.lost_today(MIDNIGHT - 1) > 0  # yesterday's, as yesterday saw it
    assert second.lost_today(MIDNIGHT + 200) == 0.0
    later = after_midnight[60:]  # back after a minute's silence
    second.feed(later)
    second.settle()
    lost = second.lost_today(MIDNIGHT + 200)
    assert lost == pytest.approx(second.stored_day(MIDNIGHT)) and lost > 0
    second.stop()
