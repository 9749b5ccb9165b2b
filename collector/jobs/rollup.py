"""The job roll-up: every multi-node job's verdict, once per evaluation step, over all its nodes.

``Ingest.accept`` (and replay) hands it every accepted report after the node's detector saw it.
Per report it does little: the node's last report time and the peak rates of the NICs that carry
its collective (``nic_peaks``), and a job step that waited long enough for its slower nodes is
judged. At the
node's own window step (``advanced``) its job keys are read (``membership``) and its values for
each of its jobs are taken (``node_values``); a job step is judged once when every node of the
job has stepped into it, or ``grace_ratio`` of a step after it began, whichever comes first
(never twice, however many nodes step). Judging (``judge``) names the stragglers, their cause
and the wait share; the waiting nodes' detectors are told (``NodeDetector.wait_on``, ``clear_wait``:
their GPUs become `waiting` and count the lost time; those that stand out on nothing wait
whatever their own starved cause, ``echo``), the job's GPU time lost adds up what its
GPUs' detectors count, and ``JobStraggler`` signals (``signals``) are queued for the alert book.

Threads: ``observe``, ``forget`` and ``signals`` run on the ingest path (the event loop);
``verdicts`` and ``verdict`` may be read from any thread: each job's verdict is replaced whole, and
the map of them is copied when a job comes or goes, never changed in size in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.judge import Judgement, judge
from nodeagent.collector.jobs.membership import Job, Member, Membership, claims
from nodeagent.collector.jobs.nic_peaks import NicPeaks
from nodeagent.collector.jobs.node_values import node_values
from nodeagent.collector.jobs.signals import job_signals, resolved
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.quantities.rates import increase_across_reset
from nodeagent.v1 import nodeagent_pb2 as pb

__all__ = ["JobRollup", "JobRollupConfig"]


class JobRollup:
    def __init__(
        self,
        detector_config: DetectorConfig,
        config: JobRollupConfig | None = None,
        *,
        on_rewait: Callable[[str], None] | None = None,
    ) -> None:
        """``on_rewait(node_id)``: the roll-up changed the verdict of a node other than the one
        whose report it is observing (its GPUs began or stopped waiting): the collector hands
        that node's signals to the alert book and its timeline, as after its own step."""
        self.detector_config = detector_config
        self.config = config or JobRollupConfig()
        self.membership = Membership(detector_config.window_seconds, detector_config.window_steps, self.config)
        self.on_rewait = on_rewait
        self.judged_total = 0
        self._evaluate = detector_config.evaluate_seconds
        self._peaks: dict[str, NicPeaks] = {}
        self._verdicts: dict[str, JobVerdict] = {}
        # Counts changes to the verdicts; the last snapshot and the count it was made at.
        self._version = 0
        self._snapshot: tuple[int, tuple[JobVerdict, ...]] = (0, ())
        self._firing: dict[str, set[str]] = {}
        self._signals: list[AlertSignal] = []
        self._observing: str | None = None

    @property
    def refused_jobs_total(self) -> int:
        """Job keys not followed: past ``max_jobs``."""
        return self.membership.refused_jobs_total

    def observe(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool) -> None:
        """One accepted report of a node, after its detector saw it (``advanced``: it stepped)."""
        mine = self.membership.by_node.get(node_id)
        if mine is None and not (advanced and report.jobs):
            return  # in no job, and none named now: the common case of a node without job keys
        t = report.time_unix_seconds
        due: list[Job] | None = None
        if mine is not None:
            peaks = self._peaks.get(node_id)
            if peaks is not None:
                peaks.observe(report)
            for member in mine.values():
                member.last_report = t
                if t >= member.job.due:
                    due = [*(due or ()), member.job]
        if not advanced and due is None:
            return
        self._observing = node_id
        try:
            if advanced:
                self._node_step(node_id, report, detector)
            for job in due or ():
                if job.gathering > job.judged:
                    self._judge(job, job.gathering, t)  # its slower nodes had their grace
        finally:
            self._observing = None

    def forget(self, node_id: str) -> None:
        """A retired node: out of its jobs (a job left without nodes ends)."""
        for job in self.membership.forget(node_id):
            if not job.members:
                self._end(job)
        self._peaks.pop(node_id, None)

    def verdicts(self) -> tuple[JobVerdict, ...]:
        """Every followed job's latest verdict, by job key: a snapshot, replaced whole (a new tuple)
        only when a job step was judged or a job ended since the last call."""
        version = self._version
        made, snapshot = self._snapshot
        if made != version:
            # Built from the map as it is now, at least as new as ``version``: tagged with it.
            snapshot = tuple(sorted(self._verdicts.values(), key=lambda v: v.job))
            self._snapshot = (version, snapshot)
        return snapshot

    def verdict(self, job: str) -> JobVerdict | None:
        return self._verdicts.get(job)

    def signals(self) -> list[AlertSignal]:
        """The ``JobStraggler`` signals of the job steps judged since the last call (taken once)."""
        out, self._signals = self._signals, []
        return out

    # ---- a node's window step ----------------------------------------------------------------

    def _node_step(self, node_id: str, report: pb.NodeReport, detector: NodeDetector) -> None:
        joined, left = self.membership.update(node_id, report, detector)
        for job, member in left:
            self._unwait(job, member)
            if not job.members:
                self._end(job)
        if not joined:
            self._peaks.pop(node_id, None)
            return
        peaks = self._peaks.get(node_id)
        if peaks is None:
            peaks = self._peaks[node_id] = NicPeaks(self.detector_config.window_steps, self.config)
            peaks.observe(report)
        peaks.step(report)
        t = report.time_unix_seconds
        step = math.floor(t / self._evaluate)
        for job, member in joined:
            member.values = node_values(member, report, detector, peaks, self.config)
            member.step = step
            if step > job.gathering:
                if job.gathering > job.judged:
                    self._judge(job, job.gathering, t)  # a node never stepped into it: judged as it is
                job.gathering, job.stepped = step, 0
                job.due = (step + self.config.grace_ratio) * self._evaluate
            if step == job.gathering > job.judged:
                job.stepped += 1
                if job.stepped >= len(job.members):
                    self._judge(job, step, t)

    # ---- a job's step ------------------------------------------------------------------------

    def _judge(self, job: Job, step: int, t: float) -> None:
        job.judged, job.due = step, math.inf
        for member in self.membership.drop_silent(job, t):
            self._unwait(job, member)
        if not job.members:
            self._end(job)
            return
        fresh = {node: m for node, m in job.members.items() if m.step == step}
        if not fresh:
            return  # every node that stepped into it left meanwhile: the last verdict stands
        said = job.claims
        if said is None:
            said = job.claims = claims(job.members.values())
        j = judge(fresh, step, said, job.stragglers, self.detector_config, self.config)
        job.stragglers = j.stragglers
        self._tell_waiting(job, j, fresh)
        self._add_lost(job)
        self.judged_total += 1
        verdict = JobVerdict(
            job=job.key,
            source=job.source,
            state=j.state,
            time_unix_seconds=t,
            nodes=tuple(sorted(job.members)),
            gpus=sum(len(m.gpus) or (m.values.gpus if m.values else 0) for m in job.members.values()),
            world_size=said.world_size,
            ranks_reported=said.ranks_reported,
            straggler_nodes=j.stragglers,
            cause=j.cause,
            job_wide=j.job_wide,
            wait_ratio=j.wait_ratio,
            gpu_seconds_lost=job.gpu_seconds_lost,
            needed_bytes_per_second=j.needed_bytes_per_second,
            evidence=j.evidence,
            notes=(*said.notes, *self.membership.notes(job, t), *j.notes),
        )
        if job.key in self._verdicts:
            self._verdicts[job.key] = verdict
        else:
            self._verdicts = {**self._verdicts, job.key: verdict}
        self._version += 1
        self._signals.extend(job_signals(job, verdict, self._firing.setdefault(job.key, set()), self.detector_config))

    def _tell_waiting(self, job: Job, j: Judgement, fresh: dict[str, Member]) -> None:
        """The waiting nodes' detectors: wait on the stragglers; the others: no longer."""
        waiting, echoes = set(j.waiting), set(j.echoes)
        for node, member in job.members.items():
            detector = member.detector
            if detector is None:
                continue
            if node in waiting:
                wait = partial(detector.wait_on, job.key, j.stragglers, j.straggler_wait_ratio, echo=node in echoes)
                self._rewait(node, detector, wait)
                member.waiting = True
            elif member.waiting and (node in fresh or not j.stragglers):
                self._unwait(job, member)

    def _unwait(self, job: Job, member: Member) -> None:
        detector = member.detector
        if member.waiting and detector is not None:
            self._rewait(member.node_id, detector, partial(detector.clear_wait, job.key))
        member.waiting = False

    def _rewait(self, node_id: str, detector: NodeDetector, change: Callable[[], None]) -> None:
        before = detector.verdict
        change()
        if detector.verdict is not before and node_id != self._observing and self.on_rewait is not None:
            self.on_rewait(node_id)

    def _add_lost(self, job: Job) -> None:
        """The job's GPU time lost: what its GPUs' detectors counted since the last step."""
        for member in job.members.values():
            detector = member.detector
            if detector is None:
                continue
            wanted = set(member.gpus)
            seen = member.lost_seen
            for g in detector.verdict.gpus:
                if wanted and g.index not in wanted:
                    continue
                before = seen.get(g.index)
                seen[g.index] = g.gpu_seconds_lost
                if before is not None:
                    job.gpu_seconds_lost += increase_across_reset(before, g.gpu_seconds_lost)

    def _end(self, job: Job) -> None:
        """A job without nodes: no longer followed; its alerts resolve."""
        self.membership.end(job)
        if job.key in self._verdicts:
            self._verdicts = {k: v for k, v in self._verdicts.items() if k != job.key}
            self._version += 1
        firing = self._firing.pop(job.key, None)
        if firing:
            self._signals.extend(resolved(job, firing))
