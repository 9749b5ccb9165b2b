"""Placeholder of the job roll-up (``JobRollup``), with the API of the contracts and no verdicts:
the views are built against it; the roll-up branch replaces this file."""

from __future__ import annotations

from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb


class JobRollup:
    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        self._verdicts: tuple[JobVerdict, ...] = ()

    def observe(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool) -> None:
        """Each accepted report of a node, after its detector saw it."""

    def forget(self, node_id: str) -> None:
        """A retired node."""

    def verdicts(self) -> tuple[JobVerdict, ...]:
        return self._verdicts

    def verdict(self, job: str) -> JobVerdict | None:
        return next((v for v in self._verdicts if v.job == job), None)

    def signals(self) -> list[AlertSignal]:
        return []
