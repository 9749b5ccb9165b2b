"""The job roll-up: every multi-node job's verdict, once per evaluation step, over all its nodes,
in two stages keyed each by its own key (as stream processors cut work with two keys).

- The **node stage** (``node_stage.NodeJobs``) lives where a node's reports land, keyed by node id:
  at each of the node's window steps it sends its values for each of its jobs (``JobStep``).
- The **job stage** (``job_stage.JobStage``) lives on the job's owner, keyed by job: it judges
  each job step over all its nodes and answers each member (``JobWait``).

``JobRollup`` is both stages of one process, joined by an exchange: by default the messages are
handed over at once (replay, tests, a collector alone); a collector with workers or a fleet
routes them to each job's owner and each node's home (``exchange``). ``Ingest.accept`` and
``replay`` hand it every accepted report after the node's detector saw it, through the one
stages (``collector/ingest/report_stages.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.job_stage import JobStage
from nodeagent.collector.jobs.messages import Home, JobWait, NodeMessage
from nodeagent.collector.jobs.node_stage import NodeJobs
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb

__all__ = ["JobRollup", "JobRollupConfig"]


class JobRollup:
    def __init__(
        self,
        detector_config: DetectorConfig,
        config: JobRollupConfig | None = None,
        *,
        on_rewait: Callable[[str], None] | None = None,
        split_lost: Callable[[str, str], Mapping[int, float] | None] | None = None,
        home: Home | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_rewait(node_id)``: the roll-up changed the verdict of a node other than the one
        whose report it is observing (its GPUs began or stopped waiting): the collector hands
        that node's signals to the alert book and its timeline, as after its own step.
        ``split_lost(node_id, job)``: the ledger's split of the job's GPU-seconds lost on each of
        the node's GPUs (None without a history); ``home``: where this process's nodes live."""
        self.detector_config = detector_config
        self.config = config or JobRollupConfig()
        self.nodes = NodeJobs(
            detector_config, self.config, self._to_owners, home=home, on_rewait=on_rewait, split_lost=split_lost
        )
        # Its clock ends jobs whose nodes fell silent (``tick``).
        self.jobs = JobStage(detector_config, self.config, self._to_homes, clock=clock)
        # Where the messages go; by default, this process's own stages at once.
        self.route_steps: Callable[[list[NodeMessage]], None] = self.jobs.receive
        self.route_waits: Callable[[list[JobWait]], None] = self.nodes.apply

    @property
    def refused_jobs_total(self) -> int:
        return self.jobs.refused_jobs_total

    @property
    def steps_sent_total(self) -> int:
        return self.nodes.steps_sent_total

    @property
    def steps_received_total(self) -> int:
        return self.jobs.steps_received_total

    @property
    def judged_total(self) -> int:
        return self.jobs.judged_total

    def observe(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool) -> None:
        """One accepted report of a node, after its detector saw it (``advanced``: it stepped)."""
        self.nodes.observe(node_id, report, detector, advanced)

    def forget(self, node_id: str) -> None:
        """A retired node: out of its jobs (a job left without nodes ends)."""
        self.nodes.forget(node_id)

    def stop(self, node_id: str) -> None:
        """A node whose agent stopped cleanly: out of its jobs at once (a job left without nodes ends)."""
        self.nodes.stop(node_id)

    def tick(self) -> None:
        self.jobs.tick()

    def verdicts(self) -> tuple[JobVerdict, ...]:
        return self.jobs.verdicts()

    def heard_nodes(self) -> set[str]:
        """The followed jobs' members heard from within the window, by the job stage."""
        return self.jobs.heard_nodes()

    def verdict(self, job: str) -> JobVerdict | None:
        return self.jobs.verdict(job)

    def jobs_of(self, node_id: str) -> tuple[str, ...]:
        """The job keys a node held here names in its reports, whoever judges them."""
        return self.nodes.jobs_of(node_id)

    def members_of(self, job: str) -> list[str]:
        """The nodes held here whose reports name ``job``, whoever judges it."""
        return self.nodes.members_of(job)

    def signals(self) -> list[AlertSignal]:
        return self.jobs.signals()

    def _to_owners(self, messages: list[NodeMessage]) -> None:
        self.route_steps(messages)

    def _to_homes(self, waits: list[JobWait]) -> None:
        self.route_waits(waits)
