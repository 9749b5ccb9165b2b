"""The job roll-up's node stage: where a node's reports land (keyed by node id), what it sends to
the owners of its jobs, and the waits it applies when they answer.

Per report it does little: the peak rates of the NICs that carry its collective (``nic_peaks``).
At the node's own window step (``advanced``) it reads the job keys the report names (at most
``max_jobs_per_node``, ``JobSample``s), takes the node's values for each job (``node_values``)
and sends one ``JobStep`` per job to the job's owner (``send``: the exchange, which hands it over
at once when the owner is this process); a job the reports stopped naming gets a ``JobLeave``
and its wait is cleared here at once. A retired node leaves all its jobs (``forget``), and so
does, with a note, a node whose agent stopped cleanly (``stop``: its stopping goodbye).

The owner answers with ``JobWait``s (``apply``): the node's detector waits on the stragglers
(``NodeDetector.wait_on``: its GPUs become `waiting` and count the lost time) or no longer
(``clear_wait``). When that changes the verdict of a node other than the one whose report is being
observed, ``on_rewait(node_id)`` lets the collector hand its signals to the alert book and its
timeline, as after its own step. A wait on no other node (``JobWait.own``: a `link` straggler, a
node of a job-wide slowdown) leaves the detector alone: its measured share is kept for the
ledger's split (``ledger_shares``), which counts it where the node's own verdict counts less.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from nodeagent.collector.history.split import JobShare
from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.messages import Home, JobLeave, JobStep, JobWait, NodeMessage
from nodeagent.collector.jobs.nic_peaks import NicPeaks
from nodeagent.collector.jobs.node_values import NodeMember, node_values
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb


class NodeJobs:
    """The node stage of every node this process holds."""

    def __init__(
        self,
        detector_config: DetectorConfig,
        config: JobRollupConfig,
        send: Callable[[list[NodeMessage]], None],
        *,
        home: Home | None = None,
        on_rewait: Callable[[str], None] | None = None,
        split_lost: Callable[[str, str], Mapping[int, float] | None] | None = None,
    ) -> None:
        self.detector_config = detector_config
        self.config = config
        self.send = send
        self.home = home or Home()
        self.on_rewait = on_rewait
        # (node, job) -> the ledger's split of the job's GPU-seconds lost on each of the node's GPUs
        # (``NodeHistory.job_lost``), None where the node keeps no history: what its steps carry.
        self.split_lost = split_lost
        self.ignored_job_samples_total = 0
        self.steps_sent_total = 0
        self._evaluate = detector_config.evaluate_seconds
        # node -> job key -> what it keeps of that job.
        self._jobs: dict[str, dict[str, NodeMember]] = {}
        self._peaks: dict[str, NicPeaks] = {}
        self._detectors: dict[str, NodeDetector] = {}
        # node -> job -> the roll-up's measured wait of a node waiting on no other, and when
        # (its detector's verdict time) it was last said: it lapses a window after, as a wait does.
        self._own_waits: dict[str, dict[str, tuple[JobShare, float]]] = {}
        self._observing: str | None = None

    def observe(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool) -> None:
        """One accepted report of a node, after its detector saw it (``advanced``: it stepped)."""
        mine = self._jobs.get(node_id)
        if mine is None and not (advanced and report.jobs):
            return  # in no job, and none named now: the common case of a node without job keys
        peaks = self._peaks.get(node_id)
        if peaks is not None:
            peaks.observe(report)
        if not advanced:
            return
        self._observing = node_id
        try:
            self._step(node_id, report, detector, peaks)
        finally:
            self._observing = None

    def forget(self, node_id: str) -> None:
        """A retired node: out of its jobs, at their owners too (no note: it is gone)."""
        self._leave(node_id, "")

    def stop(self, node_id: str) -> None:
        """The node's agent stopped cleanly (its stopping goodbye): out of its jobs at once, at
        their owners too, with a note, rather than a window later for its silence."""
        self._leave(node_id, f"{node_id} left: its agent stopped (it said goodbye)")

    def _leave(self, node_id: str, note: str) -> None:
        mine = self._jobs.pop(node_id, None)
        detector = self._detectors.pop(node_id, None)
        self._peaks.pop(node_id, None)
        self._own_waits.pop(node_id, None)
        if mine:
            t = detector.verdict.time_unix_seconds if detector is not None and note else 0.0
            self.send([JobLeave(key, node_id, t, note, self.home) for key in mine])

    def apply(self, waits: list[JobWait]) -> None:
        """The owners' answers: each named node's GPUs of the job wait, or no longer."""
        for w in waits:
            if w.job not in self._jobs.get(w.node_id, {}):
                continue  # it left the job (or this process) since: nothing to wait on
            detector = self._detectors.get(w.node_id)
            if detector is None:
                continue
            if w.own or w.clear:
                self._own_wait(w, detector.verdict.time_unix_seconds)
                if w.own:
                    continue
            before = detector.verdict
            if w.clear:
                detector.clear_wait(w.job)
            else:
                detector.wait_on(w.job, w.stragglers, w.wait_ratio, echo=w.echo, unknown=w.unknown)
            if detector.verdict is not before and w.node_id != self._observing and self.on_rewait is not None:
                self.on_rewait(w.node_id)

    def jobs_of(self, node_id: str) -> tuple[str, ...]:
        return tuple(self._jobs.get(node_id, ()))

    def members_of(self, job: str) -> list[str]:
        """The nodes held here whose reports name ``job`` (may be read from any thread)."""
        return [node_id for node_id, mine in list(self._jobs.items()) if job in mine]

    def ledger_shares(self, node_id: str) -> dict[str, JobShare]:
        """The node's jobs whose GPUs the roll-up measures waiting on no other node (the ledger's
        split counts it, ``split.JobShare``), those said within the detector's window."""
        mine = self._own_waits.get(node_id)
        detector = self._detectors.get(node_id)
        if not mine or detector is None:
            return {}
        since = detector.verdict.time_unix_seconds - self.detector_config.window_seconds
        return {job: share for job, (share, said) in mine.items() if said >= since}

    def _own_wait(self, w: JobWait, now: float) -> None:
        mine = self._own_waits.get(w.node_id)
        if not w.own or w.wait_ratio is None:
            if mine is not None:
                mine.pop(w.job, None)
            return
        # A straggler waits in the collective over its own link; a node of a job-wide slowdown
        # behind the other nodes, as a node waiting on a straggler does.
        category = "interconnect" if w.node_id in w.stragglers else "waiting"
        share = JobShare(w.wait_ratio, category)
        self._own_waits.setdefault(w.node_id, {})[w.job] = (share, now)

    # ---- a node's window step ----------------------------------------------------------------

    def _step(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, peaks: NicPeaks | None) -> None:
        config = self.config
        t = report.time_unix_seconds
        named: dict[str, pb.JobSample] = {}
        for sample in report.jobs:
            if sample.job and sample.job not in named:
                if len(named) >= config.max_jobs_per_node:
                    self.ignored_job_samples_total += 1
                    continue
                named[sample.job] = sample
        mine = self._jobs.get(node_id, {})
        out: list[NodeMessage] = []
        for key in [k for k in mine if k not in named]:
            del mine[key]
            self._own_waits.get(node_id, {}).pop(key, None)
            detector.clear_wait(key)  # at once: the owner's answer would come a step late
            out.append(JobLeave(key, node_id, t, f"{node_id} left: its reports no longer name the job", self.home))
        if not named:
            self._jobs.pop(node_id, None)
            self._peaks.pop(node_id, None)
            self._detectors.pop(node_id, None)
            self._own_waits.pop(node_id, None)
            if out:
                self.send(out)
            return
        self._jobs[node_id] = mine
        self._detectors[node_id] = detector
        if peaks is None:
            peaks = self._peaks[node_id] = NicPeaks(self.detector_config.window_steps, config)
            peaks.observe(report)
        peaks.step(report)
        step = math.floor(t / self._evaluate)
        detector_lost = {g.index: g.gpu_seconds_lost for g in detector.verdict.gpus}
        for key, sample in named.items():
            member = mine.get(key)
            if member is None:
                member = mine[key] = NodeMember(key, sample.source)
            member.source = sample.source or member.source
            member.gpus = tuple(sample.gpus)
            ranks = sample.ranks
            member.ranks, member.ranks_count = tuple(ranks[: config.max_ranks_per_node]), len(ranks)
            member.world_size = sample.world_size
            member.node_rank = sample.node_rank if sample.HasField("node_rank") else None
            wanted = set(member.gpus)
            values = node_values(member, report, detector, peaks, config)
            # The ledger's split of the job's GPUs where the node keeps a history; else the detector's count.
            split_lost = self.split_lost(node_id, key) if self.split_lost is not None else None
            lost = detector_lost if split_lost is None else split_lost
            step_lost = {i: v for i, v in lost.items() if not wanted or i in wanted}
            message = JobStep(
                key, member.source, node_id, step, t, member.gpus, member.ranks, member.ranks_count,
                member.world_size, member.node_rank, values, step_lost, self.home,
            )  # fmt: skip
            out.append(message)
        self.steps_sent_total += len(named)
        self.send(out)
