"""The job roll-up's job stage: every multi-node job this process owns (keyed by job), judged once
per evaluation step over all its nodes.

Its input is the node stages' messages (``receive``): one ``JobStep`` per node, job and window
step (the node's values for the job), and ``JobLeave`` when a node stops naming the job or is
retired. A job step is judged once when every node of the job has stepped into it, or when one of
its nodes steps past it or ``grace_ratio`` of a step after it began, whichever comes first (never
twice, however many nodes step). Judging (``judge``) names the stragglers, their cause and the
wait share; each member is answered with a ``JobWait`` (``answer``: wait on the stragglers, or no
longer; those that stand out on nothing wait whatever their own starved cause, ``echo``), the
job's GPU time lost adds up what its GPUs' detectors counted, and ``JobStraggler`` signals
(``signals``) are queued for the alert book.

Time, not reports, ends a job (``tick``, on this process's clock): members not heard from for
longer than the detector's window leave, and a job left without members ends and its alerts
resolve, even when none of its nodes ever reports again. A member whose agent stopped cleanly
leaves at once (its node stage's ``JobLeave``, ``NodeJobs.stop``): a job whose nodes all
stopped ends without waiting for the window.

Threads: ``receive``, ``tick`` and ``signals`` run on one thread (the event loop); ``verdicts``
and ``verdict`` may be read from any thread: each job's verdict is replaced whole, and the map of
them is copied when a job comes or goes, never changed in size in place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping

from nodeagent.collector.jobs import membership_alerts
from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.judge import Judgement, judge
from nodeagent.collector.jobs.membership import Job, Member, Membership, claims
from nodeagent.collector.jobs.messages import JobLeave, JobStep, JobWait, NodeMessage
from nodeagent.collector.jobs.signals import job_signals, resolved
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.payoff.model import job_prediction
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.quantities.rates import increase_across_reset


class JobStage:
    def __init__(
        self,
        detector_config: DetectorConfig,
        config: JobRollupConfig,
        answer: Callable[[list[JobWait]], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.detector_config = detector_config
        self.config = config
        self.answer = answer
        self.clock = clock
        self.membership = Membership(detector_config.window_seconds, detector_config.window_steps, config)
        self.judged_total = 0
        self.steps_received_total = 0
        self._evaluate = detector_config.evaluate_seconds
        self._verdicts: dict[str, JobVerdict] = {}
        # Counts changes to the verdicts; the last snapshot and the count it was made at.
        self._version = 0
        self._snapshot: tuple[int, tuple[JobVerdict, ...]] = (0, ())
        self._firing: dict[str, set[str]] = {}
        self._membership_firing: dict[str, set[membership_alerts.Instance]] = {}
        self._signals: list[AlertSignal] = []
        self._waits: list[JobWait] = []

    @property
    def refused_jobs_total(self) -> int:
        """Job keys not followed: past ``max_jobs``."""
        return self.membership.refused_jobs_total

    def receive(self, messages: Iterable[NodeMessage]) -> None:
        """The node stages' messages, in the order each node sent them."""
        now = self.clock()
        for m in messages:
            if isinstance(m, JobStep):
                self._step(m, now)
            else:
                self._leave(m)
        self._flush_waits()

    def tick(self) -> None:
        """Members silent on this clock for longer than the window leave; a job step that waited
        its grace for a silent node is judged; a job without members ends."""
        now = self.clock()
        window = self.detector_config.window_seconds
        for job in list(self.membership.jobs.values()):
            for member in [m for m in job.members.values() if now - m.heard_at > window]:
                note = f"{member.node_id} left: nothing heard for {now - member.heard_at:.0f} s"
                self.membership.leave(job, member.node_id, member.last_report, note)
                self._clear(job, member)
            if not job.members:
                self._end(job)
        self._flush_waits()

    def heard_nodes(self) -> set[str]:
        """The members of the followed jobs heard from within the window on this clock, wherever
        their nodes live (another worker, another collector): what says a job is reporting now."""
        since = self.clock() - self.detector_config.window_seconds
        return {m.node_id for job in self.membership.jobs.values() for m in job.members.values() if m.heard_at >= since}

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

    def firing(self) -> set[tuple[str, str]]:
        """(job, node) of every ``JobStraggler`` this stage holds firing ("" : job-wide)."""
        return {(job, node) for job, nodes in self._firing.items() for node in nodes}

    def membership_firing(self) -> set[membership_alerts.Instance]:
        """(alert, node, job) of every membership alert (``membership_alerts``) this stage holds firing."""
        return {i for instances in self._membership_firing.values() for i in instances}

    def signals(self) -> list[AlertSignal]:
        """The ``JobStraggler`` signals of the job steps judged since the last call (taken once)."""
        out, self._signals = self._signals, []
        return out

    # ---- the messages ------------------------------------------------------------------------

    def _step(self, m: JobStep, now: float) -> None:
        self.steps_received_total += 1
        t = m.time_unix_seconds
        known = self.membership.jobs.get(m.job)
        if known is not None and known.gathering > known.judged and t >= known.due:
            self._judge(known, known.gathering, t)  # its slower nodes had their grace
        member = self.membership.update(m, now)
        if member is None:
            return
        job = member.job
        member.values = m.values
        member.step = m.step
        self._add_lost(job, member, m.gpu_seconds_lost)
        if m.step > job.gathering:
            if job.gathering > job.judged:
                self._judge(job, job.gathering, t)  # a node never stepped into it: judged as it is
            job.gathering, job.stepped = m.step, 0
            job.due = (m.step + self.config.grace_ratio) * self._evaluate
        if m.step == job.gathering > job.judged:
            job.stepped += 1
            if job.stepped >= len(job.members):
                self._judge(job, m.step, t)

    def _leave(self, m: JobLeave) -> None:
        job = self.membership.jobs.get(m.job)
        if job is None:
            return
        if m.note:
            self.membership.leave(job, m.node_id, m.time_unix_seconds, m.note)
        else:  # retired: gone from its collector, without a note
            self.membership.leave(job, m.node_id, 0.0, "")
            job.left = [(at, note) for at, note in job.left if note]
            job.refused_nodes.pop(m.node_id, None)
        if not job.members:
            self._end(job)

    # ---- a job's step ------------------------------------------------------------------------

    def _judge(self, job: Job, step: int, t: float) -> None:
        job.judged, job.due = step, math.inf
        for member in self.membership.drop_silent(job, t):
            self._clear(job, member)
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
            if_fixed=job_prediction(
                j.state,
                j.cause,
                j.stragglers,
                j.job_wide,
                j.wait_ratio,
                j.straggler_wait_ratio,
                j.needed_bytes_per_second,
                j.evidence,
            ),
        )
        if job.key in self._verdicts:
            self._verdicts[job.key] = verdict
        else:
            self._verdicts = {**self._verdicts, job.key: verdict}
        self._version += 1
        self._signals.extend(job_signals(job, verdict, self._firing.setdefault(job.key, set()), self.detector_config))
        self._signals.extend(
            membership_alerts.membership_signals(
                job, t, self.detector_config.window_seconds, self.membership.rivals(job),
                self._membership_firing.setdefault(job.key, set()),
            )
        )  # fmt: skip

    def _tell_waiting(self, job: Job, j: Judgement, fresh: dict[str, Member]) -> None:
        """The waiting nodes: wait on the stragglers; those waiting on none that the roll-up measures
        waiting (``Judgement.own_waits``): their share, for the ledger; the others: no longer."""
        waiting, echoes = set(j.waiting), set(j.echoes)
        for node, member in job.members.items():
            if node in waiting:
                self._waits.append(
                    JobWait(
                        job.key, node, j.stragglers, j.straggler_wait_ratio, echo=node in echoes, home=member.home,
                        unknown=j.wait_unknown_reason or "",
                    )
                )  # fmt: skip
                member.waiting = True
            elif node in j.own_waits:
                wait = JobWait(job.key, node, j.stragglers, j.own_waits[node], home=member.home, own=True)
                self._waits.append(wait)
                member.waiting = True
            elif member.waiting and (node in fresh or not j.stragglers):
                self._clear(job, member)

    def _clear(self, job: Job, member: Member) -> None:
        if member.waiting:
            self._waits.append(JobWait(job.key, member.node_id, clear=True, home=member.home))
        member.waiting = False

    def _add_lost(self, job: Job, member: Member, lost: Mapping[int, float]) -> None:
        """The job's GPU time lost: what the member's GPUs' detectors counted since its last step."""
        seen = member.lost_seen
        for index, value in lost.items():
            before = seen.get(index)
            seen[index] = value
            if before is not None:
                job.gpu_seconds_lost += increase_across_reset(before, value)

    def _end(self, job: Job) -> None:
        """A job without nodes: no longer followed; its alerts resolve."""
        self.membership.end(job)
        if job.key in self._verdicts:
            self._verdicts = {k: v for k, v in self._verdicts.items() if k != job.key}
            self._version += 1
        firing = self._firing.pop(job.key, None)
        if firing:
            self._signals.extend(resolved(job, firing))
        self._signals.extend(membership_alerts.resolved(self._membership_firing.pop(job.key, set())))

    def _flush_waits(self) -> None:
        if self._waits:
            out, self._waits = self._waits, []
            self.answer(out)
