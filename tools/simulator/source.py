"""The simulator behind the sampler's interface, so ``nodeagent run --simulate`` can stand in
for any node: each tick steps the simulation by the time since the previous one, on the wall
clock or on a sped-up one (``scaled_clock``) that never runs ahead of it."""

from __future__ import annotations

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


def scaled_clock(
    scale: float, run_seconds: float | None = None, wall: Callable[[], float] = time.time
) -> Callable[[], float]:
    """A clock ``scale`` times faster than ``wall`` that never runs ahead of it.

    A clock sped up from now would put the node's reports in the future, which the collector
    refuses (its ``--max-clock-ahead-seconds``). So it starts in the past, far enough back that
    ``run_seconds`` of wall-clock time at ``scale`` end at the wall clock's now (at most
    ``MAX_SCALED_LEAD_SECONDS`` back), and from the moment it catches up it runs at 1x. A scale at
    or below 1 starts now and only falls behind."""
    if scale == 1.0:
        return wall
    start = wall()
    if scale < 1.0:
        return lambda: start + (wall() - start) * scale
    lead = min(MAX_SCALED_LEAD_SECONDS, (scale - 1.0) * (run_seconds or DEFAULT_SCALED_SECONDS))
    origin = start - lead

    def clock() -> float:
        now = wall()
        return min(now, origin + (now - start) * scale)

    return clock


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
