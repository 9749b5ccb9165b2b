"""The simulator behind the sampler's interface, so ``nodeagent run --simulate`` can stand in
for any node: each tick steps the simulation by the wall-clock time since the previous one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodeagent.agent.sampling.report_source import ReportSequence
from nodeagent.tools.simulator.simulation import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb


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
