"""Job verdicts for the views' tests: ``JobVerdict`` records built by hand, and a stand-in for
the job roll-up (``Ingest.jobs``) that answers with them, or with what a script says per report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.node import NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb


def job_verdict(job: str = "torch/trainer-7", **fields: Any) -> JobVerdict:
    """A slowed 3-node job whose straggler is ``n2`` (network), unless ``fields`` say otherwise."""
    base = JobVerdict(
        job=job, source="torch", state="slowed", time_unix_seconds=1_800_000_000.0, nodes=("n1", "n2", "n3"),
        gpus=24, world_size=24, ranks_reported=24, straggler_nodes=("n2",), cause="network", wait_ratio=0.53,
        gpu_seconds_lost=7200.0, needed_bytes_per_second=2.5e9,
        evidence={"network_rx_link_ratio_score": 6.1, "network_rx_link_ratio": 0.97, "network_link": "eth0"},
    )  # fmt: skip
    return replace(base, **fields)


def straggler_signal(verdict: JobVerdict, *, firing: bool = True) -> AlertSignal:
    """``JobStraggler`` as the contracts have it: key the job; labels job, node, cause."""
    node = verdict.straggler_nodes[0] if verdict.straggler_nodes else ""
    return AlertSignal(
        name="JobStraggler", node_id=node, key=verdict.job, firing=firing,
        labels={"job": verdict.job, "node": node, "cause": verdict.cause or ""} if firing else {},
        annotations={
            "summary": f"job {verdict.job} waits for {node} ({verdict.cause})",
            "wait_ratio": f"{verdict.wait_ratio or 0.0:.3f}",
        } if firing else {},
    )  # fmt: skip


@dataclass
class FakeRollup:
    """``JobRollup``'s API over a fixed snapshot, replaced whole like the real one's; ``script``,
    when set, makes the snapshot from each observed report (replay's tests)."""

    snapshot: tuple[JobVerdict, ...] = ()
    script: Callable[[str, pb.NodeReport, NodeDetector, bool], Sequence[JobVerdict] | None] | None = None
    observed: list[tuple[str, float, bool]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    on_rewait: Callable[[str], None] | None = None
    steps_sent_total: int = 0
    steps_received_total: int = 0

    def observe(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool) -> None:
        self.observed.append((node_id, report.time_unix_seconds, advanced))
        if self.script is not None:
            made = self.script(node_id, report, detector, advanced)
            if made is not None:
                self.snapshot = tuple(made)

    def forget(self, node_id: str) -> None:
        self.forgotten.append(node_id)

    def stop(self, node_id: str) -> None:
        self.forgotten.append(node_id)

    def jobs_of(self, _node_id: str) -> tuple[str, ...]:
        """No node stage behind the snapshot: a node's jobs are those of the verdicts alone."""
        return ()

    def members_of(self, _job: str) -> list[str]:
        return []

    def verdicts(self) -> tuple[JobVerdict, ...]:
        return self.snapshot

    def heard_nodes(self) -> set[str]:
        """No job stage behind the snapshot: a job reports now only through its nodes held here."""
        return set()

    def verdict(self, job: str) -> JobVerdict | None:
        return next((v for v in self.snapshot if v.job == job), None)

    def signals(self) -> list[AlertSignal]:
        return [straggler_signal(v) for v in self.snapshot if v.state == "slowed" and v.straggler_nodes]


# ---- a hand-built multi-node trace ----------------------------------------------------------

TRACE_JOB = "torch/lab-3:29500"
TRACE_START = 1_767_225_600.0


def three_node_reports(
    seconds: int = 240, scenarios: dict[str, str] | None = None, job: str = TRACE_JOB
) -> dict[str, list[pb.NodeReport]]:
    """``seconds`` reports a second of three simulated 8-GPU nodes running one torch job (24 ranks,
    8 per node): each GPU process carries the job's key and ranks, each report its ``JobSample``.
    By default ``sim-b`` is the ordinary cloud (starved of data, network) and the two others healthy."""
    from nodeagent.tools.simulator import Simulation

    scenarios = scenarios or {"sim-a": "healthy", "sim-b": "ordinary-cloud", "sim-c": "healthy"}
    out: dict[str, list[pb.NodeReport]] = {}
    for node_rank, (node_id, scenario) in enumerate(scenarios.items()):
        sim = Simulation(scenario, node_id=node_id, seed=7, start_time=TRACE_START)
        reports = []
        for seq in range(1, seconds + 1):
            report = sim.step(0.0 if seq == 1 else 1.0)
            report.epoch, report.seq = 1, seq
            if seq == 1:
                report.info.CopyFrom(sim.info())
            ranks = [node_rank * 8 + gpu.index for gpu in report.gpus]
            for gpu in report.gpus:
                for process in gpu.processes:
                    process.job.job_key = job
                    process.job.world_size = 24
                    process.job.rank = node_rank * 8 + gpu.index
                    process.job.local_rank = gpu.index
                    process.job.node_rank = node_rank
            report.jobs.add(job=job, source="torch", world_size=24, ranks=ranks, node_rank=node_rank,
                            gpus=[gpu.index for gpu in report.gpus])  # fmt: skip
            reports.append(report)
        out[node_id] = reports
    return out


def straggler_script() -> Callable[[str, pb.NodeReport, NodeDetector, bool], Sequence[JobVerdict] | None]:
    """A toy roll-up for replay's plumbing (not the real one's statistics): at each node's window
    step, the job is ``slowed`` by the starved node(s) while any of its nodes is starved, ``busy``
    once every node has a verdict, ``warmup`` before."""
    detectors: dict[str, NodeDetector] = {}

    def evaluate(
        node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool
    ) -> list[JobVerdict] | None:
        detectors[node_id] = detector
        if not advanced:
            return None
        verdicts = {n: d.verdict for n, d in sorted(detectors.items())}
        starved = tuple(n for n, v in verdicts.items() if v.state == "starved")
        judged = len(verdicts) == 3 and all(v.time_unix_seconds for v in verdicts.values())
        state = "slowed" if starved and judged else "busy" if judged else "warmup"
        cause = verdicts[starved[0]].cause if state == "slowed" else None
        return [
            JobVerdict(
                job=TRACE_JOB, source="torch", state=state, time_unix_seconds=report.time_unix_seconds,
                nodes=tuple(verdicts), gpus=8 * len(verdicts), world_size=24, ranks_reported=8 * len(verdicts),
                straggler_nodes=starved if state == "slowed" else (), cause=cause,
                wait_ratio=0.5 if state == "slowed" else 0.05 if judged else None,
            )
        ]  # fmt: skip

    return evaluate
