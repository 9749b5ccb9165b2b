"""The detector over a recorded trace, offline: verdict timeline, alerts, time shares; and, for a
trace of several nodes, the job roll-up over them: each job's verdicts over time.

Deterministic: the output depends only on the reports and the configuration (trace time, never
the wall clock). One detector per node in the trace; the reports are taken in time order (the
caller merges several nodes' traces, ``merged``), and each goes to its node's detector and then
to the job roll-up, with whether the node's verdict advanced, as ``Ingest.accept`` hands it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.alerts.lifecycle import RESOLVED, alert_labels, next_transition
from nodeagent.collector.alerts.report_rules import NodeRules
from nodeagent.collector.ingest.report_stages import ReportStages
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import CAUSES, STATES, NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb


@dataclass(frozen=True, slots=True)
class StateChange:
    time_unix_seconds: float
    gpu: int
    state: str
    cause: str | None
    tier: str | None
    starvation_ratio: float | None
    interconnect_ratio: float | None

    def to_plain(self) -> dict[str, Any]:
        return {
            "time_unix_seconds": self.time_unix_seconds, "gpu": self.gpu, "state": self.state, "cause": self.cause,
            "tier": self.tier, "starvation_ratio": self.starvation_ratio, "interconnect_ratio": self.interconnect_ratio,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class AlertTransition:
    time_unix_seconds: float
    # "firing", "resolved", or "updated" (still firing with other labels or severity): the book's kinds.
    status: str
    name: str
    node_id: str
    key: str
    severity: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    def to_plain(self) -> dict[str, Any]:
        return {
            "time_unix_seconds": self.time_unix_seconds, "status": self.status, "name": self.name,
            "node_id": self.node_id, "key": self.key, "severity": self.severity, "labels": dict(self.labels),
            "annotations": dict(self.annotations),
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Firing:
    signal: AlertSignal
    severity: str
    labels: Mapping[str, str]


def replay_alerts(evaluations: Iterable[tuple[float, Sequence[AlertSignal]]]) -> list[AlertTransition]:
    """Alert lifecycles from the signals of successive evaluations, by the alert book's rule
    (``alerts.lifecycle``): firing when an instance starts, updated when its labels or severity
    change while firing, resolved when it stops. Instances are keyed as the book keys them, by
    (name, node, key); nothing is persisted or sent."""
    firing: dict[tuple[str, str, str], _Firing] = {}
    out: list[AlertTransition] = []
    for time, signals in evaluations:
        for signal in signals:
            ident = (signal.name, signal.node_id, signal.key)
            before = firing.get(ident)
            kind = next_transition(before, signal)
            if kind == RESOLVED and before is not None:
                out.append(_transition(time, kind, before.signal))
                del firing[ident]
            elif kind is not None:
                out.append(_transition(time, kind, signal))
            if signal.firing:
                firing[ident] = _Firing(signal, signal.severity, alert_labels(signal))
    return out


def _transition(time: float, status: str, s: AlertSignal) -> AlertTransition:
    return AlertTransition(time, status, s.name, s.node_id, s.key, s.severity, s.labels, s.annotations)


@dataclass(slots=True)
class Shares:
    """Seconds per state and, while starved, per cause; as ratios of the time covered."""

    states: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATES, 0.0))
    causes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))

    def add(self, state: str, cause: str | None, seconds: float) -> None:
        self.states[state] = self.states.get(state, 0.0) + seconds
        if state == "starved" and cause is not None:
            self.causes[cause] = self.causes.get(cause, 0.0) + seconds

    def to_plain(self) -> dict[str, Any]:
        total = sum(self.states.values())
        return {
            "seconds": total,
            "state_ratios": {k: (v / total if total else 0.0) for k, v in self.states.items()},
            "cause_ratios": {k: (v / total if total else 0.0) for k, v in self.causes.items()},
        }


@dataclass(slots=True)
class NodeReplay:
    node_id: str
    detector: NodeDetector
    rules: NodeRules
    first_time: float
    last_time: float
    detector_epoch: int = 0
    topology: pb.NodeInfo | None = None
    reports: int = 0
    timeline: list[StateChange] = field(default_factory=list)
    evaluations: list[tuple[float, list[AlertSignal]]] = field(default_factory=list)
    node_shares: Shares = field(default_factory=Shares)
    gpu_shares: dict[int, Shares] = field(default_factory=dict)
    _shown: dict[int, tuple[str, str | None, str | None]] = field(default_factory=dict)

    def account(self, report: pb.NodeReport, changed: bool) -> None:
        """After the pipeline took the report: the time since the last one, in the verdict's states;
        the GPUs' state changes when the verdict changed."""
        verdict = self.detector.verdict
        t = report.time_unix_seconds
        if self.reports:
            seconds = min(t - self.last_time, self.detector.config.max_interval_seconds)
            self.node_shares.add(verdict.state, verdict.cause, seconds)
            for g in verdict.gpus:
                self.gpu_shares.setdefault(g.index, Shares()).add(g.state, g.cause, seconds)
        self.reports += 1
        self.last_time = t
        if changed:
            self._changes(verdict)

    def _changes(self, verdict: NodeVerdict) -> None:
        for g in verdict.gpus:
            shown = (g.state, g.cause, g.tier)
            if self._shown.get(g.index) != shown:
                self._shown[g.index] = shown
                self.timeline.append(
                    StateChange(verdict.time_unix_seconds, g.index, g.state, g.cause, g.tier,
                                g.starvation_ratio, g.interconnect_ratio)
                )  # fmt: skip

    def to_plain(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "first_time_unix_seconds": self.first_time,
            "last_time_unix_seconds": self.last_time,
            "reports": self.reports,
            "timeline": [c.to_plain() for c in self.timeline],
            "alerts": [a.to_plain() for a in replay_alerts(self.evaluations)],
            "shares": {
                "node": self.node_shares.to_plain(),
                "gpus": [{"index": i, **self.gpu_shares[i].to_plain()} for i in sorted(self.gpu_shares)],
            },
            "final_verdict": self.detector.verdict.to_plain(),
        }


@dataclass(frozen=True, slots=True)
class JobChange:
    """A job's verdict where it changed: its state, its straggler(s) and cause."""

    time_unix_seconds: float
    state: str
    straggler_nodes: tuple[str, ...]
    cause: str | None
    job_wide: bool
    wait_ratio: float | None

    def to_plain(self) -> dict[str, Any]:
        return {
            "time_unix_seconds": self.time_unix_seconds, "state": self.state,
            "straggler_nodes": list(self.straggler_nodes), "cause": self.cause, "job_wide": self.job_wide,
            "wait_ratio": self.wait_ratio,
        }  # fmt: skip


@dataclass(slots=True)
class JobReplay:
    """One multi-node job as the roll-up judged it over the trace."""

    job: str
    first_time: float
    last: JobVerdict
    timeline: list[JobChange] = field(default_factory=list)

    def observe(self, verdict: JobVerdict) -> None:
        self.last = verdict
        change = JobChange(
            verdict.time_unix_seconds, verdict.state, verdict.straggler_nodes, verdict.cause, verdict.job_wide,
            verdict.wait_ratio,
        )  # fmt: skip
        shown = self.timeline[-1] if self.timeline else None
        if shown is None or (shown.state, shown.straggler_nodes, shown.cause, shown.job_wide) != (
            change.state, change.straggler_nodes, change.cause, change.job_wide,
        ):  # fmt: skip
            self.timeline.append(change)

    def first_slowed(self) -> JobChange | None:
        return next((c for c in self.timeline if c.state == "slowed"), None)

    def to_plain(self, alerts: list[AlertTransition]) -> dict[str, Any]:
        slowed = self.first_slowed()
        return {
            "job": self.job,
            "first_time_unix_seconds": self.first_time,
            "last_time_unix_seconds": self.last.time_unix_seconds,
            # When the roll-up first called the job slowed, whom it named and why (None: never).
            "first_slowed": slowed.to_plain() if slowed is not None else None,
            "timeline": [c.to_plain() for c in self.timeline],
            "alerts": [a.to_plain() for a in alerts if a.labels.get("job", a.key) == self.job],
            "final_verdict": self.last.to_plain(),
        }


class Replay:
    def __init__(
        self,
        config: DetectorConfig,
        alert_config: AlertConfig | None = None,
        jobs: Callable[[Callable[[str], None]], JobRollup] | None = None,
    ) -> None:
        """``jobs(on_rewait)``: the job roll-up to feed, built to tell ``on_rewait`` (this replay)
        when it changed another node's verdict (default: a ``JobRollup`` of ``config``)."""
        self.config = config
        self.alert_config = alert_config or AlertConfig()
        self.nodes: dict[str, NodeReplay] = {}
        # The job roll-up, fed as the collector feeds it; its verdicts over time, per job.
        self.rollup = jobs(self._rewaited) if jobs is not None else JobRollup(config, on_rewait=self._rewaited)
        self.jobs: dict[str, JobReplay] = {}
        self.job_evaluations: list[tuple[float, Sequence[AlertSignal]]] = []
        self._snapshot: tuple[JobVerdict, ...] = self.rollup.verdicts()
        # The collector's own order of stages (collector/ingest/report_stages.py).
        self.stages = ReportStages(
            config, self.rollup, rules=lambda node_id: self.nodes[node_id].rules,
            node_signals=lambda node_id, t, signals: self.nodes[node_id].evaluations.append((t, signals)),
            job_signals=lambda t, signals: self.job_evaluations.append((t, signals)),
        )  # fmt: skip

    def observe(self, report: pb.NodeReport) -> None:
        node = self.nodes.get(report.node_id)
        if node is None:
            detector = NodeDetector(report.node_id, self.config)
            t = report.time_unix_seconds
            rules = NodeRules(report.node_id, self.alert_config)
            node = NodeReplay(report.node_id, detector, rules, t, t, detector_epoch=report.epoch)
            self.nodes[report.node_id] = node
        changed = self.stages.take(report.node_id, node, report)
        node.account(report, changed)
        snapshot = self.rollup.verdicts()
        if snapshot is not self._snapshot:  # the roll-up evaluated: a new snapshot, replaced whole
            self._snapshot = snapshot
            for verdict in snapshot:
                job = self.jobs.get(verdict.job)
                if job is None:
                    job = self.jobs[verdict.job] = JobReplay(verdict.job, verdict.time_unix_seconds, verdict)
                job.observe(verdict)

    def _rewaited(self, node_id: str) -> None:
        """The roll-up changed another node's verdict (its GPUs wait, or no longer): as after its step."""
        node = self.nodes.get(node_id)
        if node is not None:
            verdict = node.detector.verdict
            node._changes(verdict)
            node.evaluations.append((verdict.time_unix_seconds, node.detector.signals()))

    def to_plain(self) -> dict[str, Any]:
        alerts = replay_alerts(self.job_evaluations)
        return {
            "nodes": [self.nodes[n].to_plain() for n in sorted(self.nodes)],
            "jobs": [self.jobs[j].to_plain(alerts) for j in sorted(self.jobs)],
        }


def replay(reports: Iterable[pb.NodeReport], config: DetectorConfig, alert_config: AlertConfig | None = None) -> Replay:
    result = Replay(config, alert_config)
    for report in reports:
        result.observe(report)
    return result


def merged(*traces: Iterable[pb.NodeReport]) -> Iterator[pb.NodeReport]:
    """The reports of several traces (one node's each, or several nodes' in time order) in time
    order; reports at the same time in the order of the traces given."""
    return heapq.merge(*traces, key=lambda report: report.time_unix_seconds)
