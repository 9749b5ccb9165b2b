"""One report's way through the collector's stages, in one order, for ingest, replay and tests alike.

After deduplication (ingest's alone: replay has no duplicates), every new report of a node goes:

1. to the node's hardware and health rules (``NodeRules``: GPULost, NVLinkDown, XIDError, ...);
2. to the node's detector: a new one when the report starts a new epoch (a restarted agent: its
   clock, or a simulation's, starts afresh and the old windows say nothing about it), or when
   the node comes back from resting (``ingest/resting.py``: its windows were let go);
3. to the job roll-up's node stage (``JobRollup.observe``), which may send its steps to the jobs'
   owners and, in this process, make GPUs of this node or of other nodes `waiting` (those of
   other nodes reach their holder through the roll-up's own ``on_rewait``, given where it is built);
4. then, when the node's verdict changed (its own step or the roll-up's wait), its signals;
   and the job stage's signals (``JobStraggler``) of the steps judged meanwhile.

So a replay of a trace sees what the live collector saw: the verdict after the roll-up had its
say, a new detector on a new epoch, and other nodes' verdicts changed by a wait (``rewaited``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nodeagent.collector.alerts.report_rules import NodeRules
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb


class NodeStages(Protocol):
    """What the stages keep on a node's record: its detector and the epoch it is for."""

    @property
    def detector(self) -> NodeDetector | None: ...
    @detector.setter
    def detector(self, value: NodeDetector) -> None: ...

    detector_epoch: int
    # The node's latest topology, when known apart from the report in hand.
    topology: pb.NodeInfo | None


class ReportStages:
    """The stages one new report goes through, in their one order (ingest's and replay's)."""

    def __init__(
        self,
        detector_config: DetectorConfig,
        jobs: JobRollup,
        *,
        rules: Callable[[str], NodeRules],
        node_signals: Callable[[str, float, list[AlertSignal]], None],
        job_signals: Callable[[float, list[AlertSignal]], None],
    ) -> None:
        """``rules(node_id)``: the node's rules; ``node_signals(node_id, time, signals)``: a node's
        rule and detector signals; ``job_signals(time, signals)``: the job stage's."""
        self.detector_config = detector_config
        self.jobs = jobs
        self.rules = rules
        self.node_signals = node_signals
        self.job_signals = job_signals

    def take(self, node_id: str, node: NodeStages, report: pb.NodeReport) -> bool:
        """One new report of ``node_id``; True when its verdict changed."""
        t = report.time_unix_seconds
        hardware = self.rules(node_id).observe(report)
        if hardware:
            self.node_signals(node_id, t, hardware)
        detector = node.detector
        if detector is None or detector.rested or node.detector_epoch != report.epoch:
            detector = node.detector = NodeDetector(node_id, self.detector_config)
            node.detector_epoch = report.epoch
            if node.topology is not None and not report.HasField("info"):
                # A node that came from another collector (a failover) sends its topology in its
                # hello, not in its next report: without it no link is known and no network cause.
                detector.learn(node.topology)
        before = detector.verdict
        advanced = detector.observe(report) is not before  # a new verdict (the window advanced)
        self.jobs.observe(node_id, report, detector, advanced)
        changed = detector.verdict is not before  # its own step, or the roll-up's waiting
        if changed:
            self.node_signals(node_id, detector.verdict.time_unix_seconds, detector.signals())
        judged = self.jobs.signals()
        if judged:
            self.job_signals(t, judged)
        return changed
