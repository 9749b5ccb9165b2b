"""Lab traces: what the real agent recorded while a real bottleneck starved a training loop
(``bench/lab.py --record DIR``), each labelled with the loop's own timers, scored like the
simulator's suite.

A trace ``NAME.jsonl`` (JSON Lines, ``nodeagent.core.wire.trace``) comes with ``NAME.label.json``:
the scenario, the state and cause the verdict must reach (``later``: the state after the first
pass over a dataset, whose end is ``first_pass_end_unix_seconds``), the loop's wait share per
wall-clock second (``truth_per_second``: ``[unix second, share]``) and over the run, and the
detector settings the lab ran with. Scoring replays the trace through a fresh detector with
those settings and compares each verdict, from one window and one step after the start (or after
the first pass ends, plus the exit time), with the truth: starved or not, the cause, and the
starvation ratio against the loop's wait share over the verdict's window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.wire.trace import read_trace
from nodeagent.tools.accuracy import TraceResult


@dataclass(frozen=True, slots=True)
class LabTrace:
    name: str
    trace: Path
    label: dict[str, Any]

    @property
    def config(self) -> DetectorConfig:
        return DetectorConfig.from_mapping(self.label["detector"], source=str(self.trace))

    def truth_at(self, t: float) -> tuple[str, str | None]:
        """The state and cause the loop was in at ``t``."""
        later, end = self.label.get("later"), self.label.get("first_pass_end_unix_seconds")
        if later is not None and end is not None and t >= end:
            return later[0], later[1]
        return self.label["state"], self.label.get("cause")

    def wait_share(self, lo: float, hi: float) -> float | None:
        """The loop's mean wait share over the whole seconds in (lo, hi]."""
        shares = [share for second, share in self.label["truth_per_second"] if lo < second <= hi]
        return sum(shares) / len(shares) if shares else None


def lab_traces(directory: Path) -> list[LabTrace]:
    """Every labelled trace in ``directory``, by name; none when it does not exist."""
    if not directory.is_dir():
        return []
    out = []
    for label in sorted(directory.glob("*.label.json")):
        name = label.name.removesuffix(".label.json")
        out.append(LabTrace(name, label.with_name(f"{name}.jsonl"), json.loads(label.read_text())))
    return out


def score_lab_trace(lab: LabTrace) -> TraceResult:
    config = lab.config
    settle = config.window_seconds + config.evaluate_seconds
    result = TraceResult(lab.name, steady=lab.label.get("later") is None)
    detector = NodeDetector(f"lab-{lab.name}", config)
    start: float | None = None
    end = lab.label.get("first_pass_end_unix_seconds")
    firing = False
    with lab.trace.open("rb") as stream:
        for _, report in read_trace(stream, strict=True):
            t = report.time_unix_seconds
            start = t if start is None else start
            verdict = detector.observe(report)
            result.reports += 1
            is_firing = any(s.firing for s in detector.signals())
            if is_firing and not firing and result.onset_latency_seconds is None:
                result.onset_latency_seconds = t - start
            firing = is_firing
            changed = start if end is None or t < end else end + config.exit_seconds
            if t - changed < settle:
                continue
            state, cause = lab.truth_at(t)
            for g in verdict.gpus:
                if g.state in ("idle", "warmup", "lost"):
                    continue
                result.samples.append((state == "starved", g.state == "starved", cause, g.cause))
                result.scored_gpu_hours += 1 / 3600
                truth = lab.wait_share(t - config.window_seconds, t)
                if state == "starved" and g.starvation_ratio is not None and truth is not None:
                    result.ratio_errors.append(abs(g.starvation_ratio - truth))
    if lab.label["state"] == "starved" and result.onset_latency_seconds is None:
        result.missed_onset = True
    return result
