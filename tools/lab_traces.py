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

Multi-node traces (``bench/lab_cluster.py --record DIR``, ``docs/dataset.md``) are one file of
every node's reports in time order, ``NAME.jsonl.gz``, with ``NAME.label.json`` of format
``lab-cluster/1``: the nodes, each job's nodes, straggler, cause and onset, and each rank's own
timers per second. ``cluster_traces`` reads them; ``lab_traces`` leaves them out.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.wire.trace import read_trace
from nodeagent.tools.accuracy import TraceResult
from nodeagent.v1 import nodeagent_pb2 as pb

CLUSTER_FORMAT = "lab-cluster/1"


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
        content = json.loads(label.read_text())
        if content.get("format") == CLUSTER_FORMAT:
            continue
        out.append(LabTrace(name, label.with_name(f"{name}.jsonl"), content))
    return out


def open_trace(path: Path) -> BinaryIO:
    """A trace file for ``read_trace``, gzip-compressed (``.gz``) or not."""
    return cast(BinaryIO, gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb"))


@dataclass(frozen=True, slots=True)
class ClusterJob:
    """One job of a multi-node trace, as its label says."""

    job: str  # the job key the agents derive ("torch/<TORCHELASTIC_RUN_ID>")
    nodes: tuple[str, ...]
    state: str  # busy | slowed
    straggler: str | None
    cause: str | None
    job_wide: bool
    wait_share: float
    truth_per_second: tuple[tuple[float, float], ...]  # (unix second, mean over ranks of data + collective)
    ranks: tuple[dict[str, Any], ...]
    # Of the run, the collective's own transfers (each step's least all-reduce time of any rank).
    transfer_share: float = 0.0

    @property
    def steps_per_second(self) -> float:
        """The job's training steps a second, the mean over its ranks of their steps over their run."""
        rates = [r["steps"] / (r["ended_unix_seconds"] - r["started_unix_seconds"]) for r in self.ranks]
        return sum(rates) / len(rates) if rates else 0.0

    def wait_share_over(self, lo: float, hi: float) -> float | None:
        """The job's wait share over the whole seconds in (lo, hi]."""
        shares = [share for second, share in self.truth_per_second if lo < second <= hi]
        return sum(shares) / len(shares) if shares else None


@dataclass(frozen=True, slots=True)
class ClusterTrace:
    name: str
    trace: Path
    label: dict[str, Any]

    @property
    def config(self) -> DetectorConfig:
        return DetectorConfig.from_mapping(self.label["detector"], source=str(self.trace))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.label["nodes"])

    @property
    def onset(self) -> float:
        return float(self.label["onset_unix_seconds"])

    @property
    def jobs(self) -> tuple[ClusterJob, ...]:
        return tuple(_cluster_job(j) for j in self.label["jobs"])

    def reports(self) -> Iterator[pb.NodeReport]:
        """Every node's reports in the trace's (time) order; a bad line raises."""
        with open_trace(self.trace) as stream:
            for _, report in read_trace(stream, strict=True):
                yield report

    def replay_nodes(self) -> dict[str, list[NodeVerdict]]:
        """Each node's verdict after each of its reports, through a detector per node with the
        lab's settings (the per-node view; the job view needs the collector's roll-up)."""
        config = self.config
        detectors: dict[str, NodeDetector] = {}
        out: dict[str, list[NodeVerdict]] = {}
        for report in self.reports():
            detector = detectors.get(report.node_id)
            if detector is None:
                detector = detectors[report.node_id] = NodeDetector(report.node_id, config)
            out.setdefault(report.node_id, []).append(detector.observe(report))
        return out


def _cluster_job(j: dict[str, Any]) -> ClusterJob:
    per_second = tuple((float(t), float(v)) for t, v in j["truth_per_second"])
    return ClusterJob(j["job"], tuple(j["nodes"]), j["state"], j.get("straggler"), j.get("cause"),
                      bool(j.get("job_wide")), float(j["wait_share"]), per_second, tuple(j["ranks"]),
                      float(j.get("transfer_share") or 0.0))  # fmt: skip


def cluster_traces(directory: Path) -> list[ClusterTrace]:
    """Every multi-node trace in ``directory``, by name; none when it does not exist."""
    if not directory.is_dir():
        return []
    out = []
    for label in sorted(directory.glob("*.label.json")):
        content = json.loads(label.read_text())
        if content.get("format") != CLUSTER_FORMAT:
            continue
        name = label.name.removesuffix(".label.json")
        out.append(ClusterTrace(name, label.with_name(content.get("trace") or f"{name}.jsonl.gz"), content))
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
