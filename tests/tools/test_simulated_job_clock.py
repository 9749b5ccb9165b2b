"""A simulated multi-node job is compared by the collector at any ``--time-scale``: its nodes,
started at different moments as separate ``nodeagent run --simulate`` processes are, read the same
simulated time at the same wall-clock moment, so the job roll-up finds them at the same
evaluation step and names the node on the slow link (docs/jobs.md, "A simulated job").

The nodes here are ``SimulatedSampler``s on a wall clock the test moves, built as
``nodeagent run`` builds them, feeding a real ``Ingest``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.tools.simulator.source import JOB_ALIGN_SECONDS, SimulatedSampler, scaled_clock

JOB = "torch/run-e"
ClockFor = Callable[[Callable[[], float]], Callable[[], float]]
# One node on the 10 Gb/s link (starved of data), three on the fast cloud.
SCENARIOS = ("fast-cloud", "fast-cloud", "ordinary-cloud", "fast-cloud")
WALL = 1_800_000_030.0  # half a minute past a whole minute


def _run_job(
    tmp_path: Path, scale: float, interval: float, ticks: int, clock_for: ClockFor, start: float = WALL
) -> tuple[JobVerdict | None, set[tuple[str, str, str]]]:
    return asyncio.run(_job(tmp_path, interval, ticks, clock_for, start))


async def _job(
    tmp_path: Path, interval: float, ticks: int, clock_for: ClockFor, start: float = WALL
) -> tuple[JobVerdict | None, set[tuple[str, str, str]]]:
    wall = [start]
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: wall[0])
    nodes: dict[str, SimulatedSampler] = {}
    streams: dict[str, StreamHandle] = {}
    for tick in range(ticks):
        # Node k starts 0.7 s after node k-1, as processes started one after another do.
        for rank, scenario in enumerate(SCENARIOS):
            node_id = f"job-{rank}"
            if node_id not in nodes and wall[0] >= start + 0.7 * rank:
                clock = clock_for(lambda: wall[0])
                nodes[node_id] = SimulatedSampler(
                    scenario, node_id=node_id, clock=clock,
                    job_key=JOB, job_nodes=len(SCENARIOS), job_node_rank=rank,
                )  # fmt: skip
                streams[node_id] = StreamHandle(node_id, "test")
                ingest.attach(streams[node_id], nodes[node_id].info)
            if node_id in nodes:
                report = nodes[node_id].tick()
                ingest.accept(streams[node_id], report, report.SerializeToString())
        wall[0] += interval
        if tick % 50 == 0:
            await ingest.flusher.flush()
    await ingest.flusher.flush()
    verdict = ingest.jobs.verdict(JOB)
    firing = {(a.name, a.node_id, a.key) for a in writer.call_sync(alerting.recent, False)}
    writer.call_sync(alerting.close)
    writer.close()
    return verdict, firing


def _named_the_straggler(verdict: JobVerdict | None, firing: set[tuple[str, str, str]]) -> None:
    assert verdict is not None
    assert "one node: judged alone, no comparison" not in verdict.notes, verdict.notes
    assert verdict.nodes == ("job-0", "job-1", "job-2", "job-3")
    assert (verdict.state, verdict.straggler_nodes, verdict.cause) == ("slowed", ("job-2",), "network")
    assert ("JobStraggler", "job-2", JOB) in firing


@pytest.mark.parametrize("scale", [30.0, 1.0])
def test_a_simulated_job_started_node_by_node_is_compared_at_any_time_scale(tmp_path: Path, scale: float) -> None:
    """As ``nodeagent run --simulate ... --set job_nodes=4`` builds its clock without an anchor:
    at 30x (0.1 s a report, 25 s) the nodes' clocks meet the wall clock at the same whole minute;
    at 1x (1 s a report, 150 s) they are the wall clock."""
    interval, run = (0.1, 25.0) if scale > 1 else (1.0, 150.0)
    verdict, firing = _run_job(
        tmp_path, scale, interval, round(run / interval),
        lambda wall: scaled_clock(scale, run, wall, align_seconds=JOB_ALIGN_SECONDS),
    )  # fmt: skip
    _named_the_straggler(verdict, firing)


def test_nodes_given_one_anchor_are_compared_even_across_a_whole_minute(tmp_path: Path) -> None:
    """Started on either side of the minute the default would round to, nodes given the same
    ``--time-scale-anchor`` still share their clock."""
    start = WALL + 4.5  # 25 s later the nodes' runs end either side of the minute
    verdict, firing = _run_job(
        tmp_path, 30.0, 0.1, 250, lambda wall: scaled_clock(30.0, 25.0, wall, anchor=start + 25.0), start
    )
    _named_the_straggler(verdict, firing)
