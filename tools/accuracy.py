"""Scoring the detector against the simulator's truth (the labelled suite).

Each trace runs at 1 Hz through a fresh detector. Per GPU and report, outside the settling time
after the trace starts or the truth changes, the verdict is compared with the truth:
starved-or-not, and the cause when both say starved. Also: the starvation ratio's absolute error,
the latency from a bottleneck's onset to the first firing ``GPUDataStarved`` signal, label flips
per GPU-hour on steady jobs, and the cost of ``observe``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import CAUSES
from nodeagent.tools.simulator.suite import LabelledTrace

# After the start of a trace or a change of the truth, verdicts are not scored for this long
# (the window fills, hysteresis holds); onset latency is measured separately.
SETTLE_SECONDS = 120.0


@dataclass(slots=True)
class TraceResult:
    name: str
    steady: bool
    # (truth starved, verdict starved, truth cause, verdict cause) per scored GPU-report.
    samples: list[tuple[bool, bool, str | None, str | None]] = field(default_factory=list)
    ratio_errors: list[float] = field(default_factory=list)
    onset_latency_seconds: float | None = None
    recovery_latency_seconds: float | None = None
    missed_onset: bool = False
    flips: int = 0
    scored_gpu_hours: float = 0.0
    observe_seconds: float = 0.0
    reports: int = 0

    @property
    def mean_ratio_error(self) -> float:
        return sum(self.ratio_errors) / len(self.ratio_errors) if self.ratio_errors else 0.0


def score_trace(trace: LabelledTrace, base: DetectorConfig | None = None) -> TraceResult:
    config = base or DetectorConfig()
    if trace.detector_config:
        config = DetectorConfig.from_mapping(trace.detector_config, source=f"suite {trace.name}")
    sim = trace.simulation()
    detector = NodeDetector(sim.node_id, config)
    result = TraceResult(trace.name, trace.steady)
    report = sim.step(0.0)
    report.info.CopyFrom(sim.info())
    detector.observe(report)
    last_truth = _label(sim.truth())
    changed_at = 0.0
    labels: dict[int, tuple[str, str | None]] = {}
    firing = False
    onset, recovery = trace.onset_seconds, trace.recovery_seconds
    for tick in range(1, int(trace.duration_seconds) + 1):
        report = sim.step(1.0)
        started = time.perf_counter()
        verdict = detector.observe(report)
        result.observe_seconds += time.perf_counter() - started
        result.reports += 1
        truth = sim.truth()
        now_truth = _label(truth)
        if now_truth != last_truth:
            last_truth, changed_at = now_truth, float(tick)
        is_firing = any(s.firing for s in detector.signals())
        if onset is not None and tick >= onset and is_firing and not firing and result.onset_latency_seconds is None:
            result.onset_latency_seconds = tick - onset
        if recovery is not None and tick >= recovery and firing and not is_firing:
            result.recovery_latency_seconds = tick - recovery
        firing = is_firing
        settled = tick - changed_at >= SETTLE_SECONDS
        for g in verdict.gpus:
            label = (g.state, g.cause)
            if trace.steady and tick >= SETTLE_SECONDS and labels.get(g.index, label) != label:
                result.flips += 1
            labels[g.index] = label
            if not settled or g.index >= len(truth.gpus):
                continue
            t = truth.gpus[g.index]
            if t.state in ("idle", "warmup") or g.state in ("idle", "warmup", "lost"):
                continue
            result.samples.append((t.state == "starved", g.state == "starved", t.cause, g.cause))
            result.scored_gpu_hours += 1 / 3600
            if g.starvation_ratio is not None and t.state != "throttled":
                result.ratio_errors.append(abs(g.starvation_ratio - t.starvation_ratio))
    if onset is not None and result.onset_latency_seconds is None:
        result.missed_onset = True
    return result


def _label(truth: Any) -> tuple[str, str | None]:
    return truth.state, truth.cause


@dataclass(frozen=True, slots=True)
class Summary:
    traces: int
    gpu_reports: int
    starved_precision: float
    starved_recall: float
    cause_accuracy: float
    # cause -> (precision, recall, support)
    per_cause: dict[str, tuple[float, float, int]]
    ratio_mean_abs_error: float
    ratio_worst_trace_error: float
    onset_latency_max_seconds: float | None
    onset_latency_mean_seconds: float | None
    missed_onsets: int
    recovery_latency_max_seconds: float | None
    flips_per_gpu_hour_max: float
    flips_per_gpu_hour_mean: float
    observe_microseconds: float

    def to_plain(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["per_cause"] = {c: {"precision": p, "recall": r, "support": n} for c, (p, r, n) in self.per_cause.items()}
        return out


def summarize(results: Iterable[TraceResult]) -> Summary:
    results = list(results)
    samples = [s for r in results for s in r.samples]
    tp = sum(1 for t, v, _, _ in samples if t and v)
    fp = sum(1 for t, v, _, _ in samples if v and not t)
    fn = sum(1 for t, v, _, _ in samples if t and not v)
    both = [(tc, vc) for t, v, tc, vc in samples if t and v]
    per_cause: dict[str, tuple[float, float, int]] = {}
    for cause in CAUSES:
        said = sum(1 for t, v, _, vc in samples if v and vc == cause)
        true = sum(1 for t, _, tc, _ in samples if t and tc == cause)
        right = sum(1 for t, v, tc, vc in samples if t and v and tc == vc == cause)
        per_cause[cause] = (right / said if said else 1.0, right / true if true else 1.0, true)
    errors = [e for r in results for e in r.ratio_errors]
    latencies = [r.onset_latency_seconds for r in results if r.onset_latency_seconds is not None]
    recoveries = [r.recovery_latency_seconds for r in results if r.recovery_latency_seconds is not None]
    flip_rates = [r.flips / r.scored_gpu_hours for r in results if r.steady and r.scored_gpu_hours]
    reports = sum(r.reports for r in results)
    return Summary(
        traces=len(results),
        gpu_reports=len(samples),
        starved_precision=tp / (tp + fp) if tp + fp else 1.0,
        starved_recall=tp / (tp + fn) if tp + fn else 1.0,
        cause_accuracy=sum(1 for tc, vc in both if tc == vc) / len(both) if both else 1.0,
        per_cause=per_cause,
        ratio_mean_abs_error=sum(errors) / len(errors) if errors else 0.0,
        ratio_worst_trace_error=max((r.mean_ratio_error for r in results), default=0.0),
        onset_latency_max_seconds=max(latencies) if latencies else None,
        onset_latency_mean_seconds=sum(latencies) / len(latencies) if latencies else None,
        missed_onsets=sum(1 for r in results if r.missed_onset),
        recovery_latency_max_seconds=max(recoveries) if recoveries else None,
        flips_per_gpu_hour_max=max(flip_rates, default=0.0),
        flips_per_gpu_hour_mean=sum(flip_rates) / len(flip_rates) if flip_rates else 0.0,
        observe_microseconds=sum(r.observe_seconds for r in results) / reports * 1e6 if reports else 0.0,
    )
