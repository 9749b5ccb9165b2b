"""The simulator behind the sampler's interface, so ``nodeagent run --simulate`` can stand in
for any node: each tick steps the simulation by the time since the previous one, on the wall
clock or on a sped-up one (``scaled_clock``) that never runs ahead of it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Final

from nodeagent.agent.sampling.report_source import ReportSequence
from nodeagent.tools.simulator.simulation import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

# How long a sped-up run lasts, in wall-clock seconds, when nothing says (no --deadline, no
# --max-reports): its clock starts that far back, times the speed-up.
DEFAULT_SCALED_SECONDS: Final = 120.0
# The furthest back a sped-up clock starts: well inside the collector's default bound on reports
# behind its clock (25 h), and a day of history at most.
MAX_SCALED_LEAD_SECONDS: Final = 12 * 3600.0
# A simulated multi-node job's node (``job_nodes`` above 1) given no anchor: its sped-up clock
# meets the wall clock at the next whole minute after its run, so that the job's nodes started
# together read the same time (``scaled_clock``'s ``align_seconds``).
JOB_ALIGN_SECONDS: Final = 60.0


def scaled_clock(
    scale: float,
    run_seconds: float | None = None,
    wall: Callable[[], float] = time.time,
    *,
    anchor: float | None = None,
    align_seconds: float = 0.0,
) -> Callable[[], float]:
    """A clock ``scale`` times faster (or slower) than ``wall`` that never runs ahead of it.

    A clock sped up from now would put the node's reports in the future, which the collector
    refuses (its ``--max-clock-ahead-seconds``). So it starts in the past, far enough back that
    ``run_seconds`` of wall-clock time at ``scale`` end at the wall clock's now (at most
    ``MAX_SCALED_LEAD_SECONDS`` back), and from the moment it catches up it runs at 1x. A scale
    below 1 starts now and only falls behind.

    The clock is a function of the wall clock and its ``anchor`` alone, the wall-clock moment at
    which it reads the wall clock's time (a sped-up clock's catching up, a slowed one's start):
    ``min(wall, anchor + (wall - anchor) x scale)``. Clocks given the same scale and anchor read
    the same time at the same moment, whenever each started, as the nodes of one simulated job
    must for the collector to compare them at the same evaluation step. Without an anchor it
    comes from this clock's start; ``align_seconds`` rounds it to the wall clock's whole multiple
    of that many seconds (the next, for a sped-up clock), so that clocks started together share it
    unless a multiple falls between their starts."""
    if scale == 1.0:
        return wall
    start = wall()
    if anchor is not None and not math.isfinite(anchor):
        raise ValueError(f"anchor must be a finite number of Unix seconds, got {anchor!r}")
    if anchor is None:
        anchor = default_anchor(scale, start, run_seconds, align_seconds)
    elif (scale - 1.0) * (anchor - start) > MAX_SCALED_LEAD_SECONDS:
        back = (scale - 1.0) * (anchor - start) / 3600
        raise ValueError(
            f"anchor {anchor:.0f} is {anchor - start:.0f} s away: the clock would start {back:.1f} h back "
            f"(at most {MAX_SCALED_LEAD_SECONDS / 3600:.0f} h)"
        )
    meet = anchor

    def clock() -> float:
        now = wall()
        return min(now, meet + (now - meet) * scale)

    return clock


def default_anchor(scale: float, start: float, run_seconds: float | None, align_seconds: float = 0.0) -> float:
    """Where a clock started at ``start`` meets the wall clock when no anchor is given: a sped-up
    one ``run_seconds`` later (at most ``MAX_SCALED_LEAD_SECONDS`` of lead), a slowed one at once;
    rounded to a multiple of ``align_seconds`` where that keeps within those bounds."""
    if scale < 1.0:
        return math.floor(start / align_seconds) * align_seconds if align_seconds > 0 else start
    longest = MAX_SCALED_LEAD_SECONDS / (scale - 1.0)
    end = start + min(longest, DEFAULT_SCALED_SECONDS if run_seconds is None else run_seconds)
    if align_seconds <= 0:
        return end
    later = math.ceil(end / align_seconds) * align_seconds
    if later - start <= longest:
        return later
    earlier = math.floor(end / align_seconds) * align_seconds
    return earlier if earlier > start else end


class SimulatedSampler:
    """The simulated ``ReportSource`` (``nodeagent.agent.sampling.report_source``)."""

    def __init__(
        self,
        scenario: str,
        *,
        node_id: str,
        sequence: ReportSequence | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        gpus: int = 8,
        **overrides: Any,
    ) -> None:
        self._clock = clock
        self._last: float | None = None
        self.simulation = Simulation(scenario, node_id=node_id, seed=seed, start_time=clock(), gpus=gpus, **overrides)
        self.node_id = node_id
        self.sequence = sequence or ReportSequence()
        self.info = self.simulation.info()
        self._info_sent = False

    def tick(self) -> pb.NodeReport:
        now = self._clock()
        # A clock that steps back (NTP) advances the simulation by nothing rather than failing.
        dt = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now if self._last is None else max(now, self._last)
        report = self.simulation.step(dt)
        self.sequence.stamp(report)
        if not self._info_sent:
            report.info.CopyFrom(self.info)
            self._info_sent = True
        return report

    def close(self) -> None:
        """Nothing to release; here for the sampler's interface."""
