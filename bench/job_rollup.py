"""What the job roll-up costs: CPU per report at 1,000 nodes in 100 jobs, and what it adds to
the collector's per-report cost.

Synthetic reports: simulated 8-GPU nodes (``tools/simulator``: ``healthy``, and in some jobs one
``ordinary-cloud`` node, starved for the network: a straggler to find), each report copied
per node with its job's key on every GPU process and its ``JobSample`` (``NodeReport.jobs``),
1 report per node per simulated second, serialized as an agent sends them. Two measurements,
CPU time (``time.process_time``: every thread of this process, so the store writer's share of
the flushes counts), in the same process, over the same reports:

1. **Through ``Ingest.accept``** (parse, dedup, alert rules, detector, roll-up, timeline,
   history, and a flush of the changed nodes to SQLite each simulated second): one ``Ingest``
   with the roll-up, one with it replaced by a no-op, fed the same chunks in turn (the order
   alternates per chunk). Prints both per report and the ratio (target: at most 1.10).
2. **Detector and roll-up alone**: ``NodeDetector.observe`` for every report, with and without
   ``JobRollup.observe`` after it (two sets of detectors, the order alternating per second): the
   roll-up's own CPU per report, the waiting GPUs' work in their detectors included.

Then what the roll-up found (jobs slowed, stragglers named, right or not).

With ``--wire`` the roll-up's messages go through their bytes both ways in (1), as between the
workers or collectors that own the nodes and the jobs: the shipping's serialization counts.

    python bench/job_rollup.py [--nodes 1000] [--jobs 100] [--seconds 120] [--straggler-jobs 10] [--wire] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.wire import through_bytes
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.tools.simulator.simulation import DEFAULT_START_TIME, Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

# Distinct healthy nodes to copy from (their noise differs); one starved template.
TEMPLATES = 8


class NoRollup(JobRollup):
    """The roll-up off: the same calls, nothing done."""

    def observe(self, node_id: str, report: pb.NodeReport, detector: NodeDetector, advanced: bool) -> None:
        return None


class Fleet:
    """The nodes, their jobs, and the reports of each simulated second."""

    def __init__(self, nodes: int, jobs: int, straggler_jobs: int, gpus: int) -> None:
        self.nodes = [f"node-{n:04d}" for n in range(nodes)]
        per_job = max(1, nodes // jobs)
        self.job_of = {node: f"job-{min(n // per_job, jobs - 1):03d}" for n, node in enumerate(self.nodes)}
        members: dict[str, list[str]] = {}
        for node in self.nodes:
            members.setdefault(self.job_of[node], []).append(node)
        self.members = members
        # One straggler in each of the first ``straggler_jobs`` jobs: the member in its middle.
        self.stragglers = {job: m[len(m) // 2] for job, m in sorted(members.items())[:straggler_jobs]}
        self.gpus = gpus
        self.healthy = [Simulation("healthy", node_id=f"t{k}", seed=k, gpus=gpus) for k in range(TEMPLATES)]
        self.starved = Simulation("ordinary-cloud", node_id="starved", gpus=gpus)
        self.info = {k: sim.info() for k, sim in enumerate(self.healthy)}
        self.seq = 0

    def second(self) -> Iterator[tuple[str, bytes]]:
        healthy = [sim.step(1.0) for sim in self.healthy]
        starved = self.starved.step(1.0)
        self.seq += 1
        straggling = set(self.stragglers.values())
        for n, node in enumerate(self.nodes):
            job = self.job_of[node]
            report = pb.NodeReport()
            report.CopyFrom(starved if node in straggling else healthy[n % TEMPLATES])
            report.node_id, report.epoch, report.seq = node, 1, self.seq
            if self.seq == 1:
                report.info.CopyFrom(self.info[n % TEMPLATES])
                report.info.node_id = node
            rank0 = self.members[job].index(node) * self.gpus
            world = len(self.members[job]) * self.gpus
            for g in report.gpus:
                for p in g.processes:
                    p.job.job_key, p.job.world_size, p.job.rank = job, world, rank0 + g.index
            report.jobs.add(
                job=job, source="slurm", world_size=world, ranks=range(rank0, rank0 + self.gpus),
                gpus=range(self.gpus),
            )  # fmt: skip
            yield node, report.SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=120, help="Simulated seconds (1 report per node each).")
    parser.add_argument("--straggler-jobs", type=int, default=10)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--chunk-seconds", type=int, default=10, help="Simulated seconds fed to each Ingest in turn.")
    parser.add_argument(
        "--wire", action="store_true",
        help="The roll-up's messages through their bytes, both ways (what a process boundary costs them).",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="The figures as JSON.")
    args = parser.parse_args()
    if args.nodes < 1 or args.jobs < 1 or args.jobs > args.nodes or args.seconds < 1:
        parser.error("need 1 <= --jobs <= --nodes and --seconds >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        on, off, judged, shipped = asyncio.run(_through_ingest(args, Path(tmp)))
    alone, with_rollup, found = _detector_and_rollup(args)
    reports = args.nodes * args.seconds
    figures = {
        "nodes": args.nodes, "jobs": args.jobs, "gpus": args.gpus, "seconds": args.seconds, "reports": reports,
        "straggler_jobs": args.straggler_jobs,
        "ingest_on_cpu_seconds_per_report": on / reports, "ingest_off_cpu_seconds_per_report": off / reports,
        "ingest_ratio": on / off,
        "detector_cpu_seconds_per_report": alone / reports,
        "detector_and_rollup_cpu_seconds_per_report": with_rollup / reports,
        "rollup_cpu_seconds_per_report": (with_rollup - alone) / reports,
        "job_steps_judged": judged, **{f"jobs_{k}": v for k, v in found.items()},
        "job_steps_sent": shipped[0], "job_step_bytes_total": shipped[1],
    }  # fmt: skip
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"job roll-up bench: {args.nodes} nodes in {args.jobs} jobs, {args.gpus} GPUs each, {args.seconds} s, "
          f"{reports} reports; {args.straggler_jobs} jobs with a straggler")  # fmt: skip
    print("through Ingest.accept (with a flush each simulated second), CPU per report:")
    print(f"  roll-up on   {on / reports * 1e6:8.1f} us")
    print(f"  roll-up off  {off / reports * 1e6:8.1f} us")
    print(f"  ratio        {on / off:8.3f}  (target <= 1.10; adds {(on - off) / reports * 1e6:.1f} us)")
    if args.wire:
        steps, size = shipped
        print(f"  shipped      {steps} job steps, {size / max(steps, 1):.0f} bytes each on the wire")
    print("detector and roll-up alone, CPU per report:")
    print(f"  NodeDetector.observe              {alone / reports * 1e6:8.1f} us")
    print(f"  + JobRollup.observe               {with_rollup / reports * 1e6:8.1f} us")
    print(f"  the roll-up's own                 {(with_rollup - alone) / reports * 1e6:8.1f} us")
    print(f"  job steps judged                  {judged}")
    print(
        f"found: {found['slowed']} jobs slowed, {found['named']} with a straggler named, "
        f"{found['right']} of {args.straggler_jobs} the right node, {found['wrong']} wrong"
    )


async def _through_ingest(args: argparse.Namespace, tmp: Path) -> tuple[float, float, int, tuple[int, int]]:
    fleet = Fleet(args.nodes, args.jobs, args.straggler_jobs, args.gpus)
    ingests = []
    sizes: list[int] = []
    for name in ("on", "off"):
        clock = [DEFAULT_START_TIME]
        writer = StoreWriter(tmp / f"{name}.db")
        ingest = build_ingest(writer, Alerting(AlertConfig(), []), clock=lambda c=clock: c[0], max_nodes=args.nodes)
        if name == "off":
            # The roll-up swapped out in both places that hold it, the bench's alone.
            ingest.jobs = ingest.stages.jobs = NoRollup(ingest.detector_config)
        elif args.wire:
            sizes = through_bytes(ingest.jobs)
        streams = {}
        for n, node in enumerate(fleet.nodes):
            streams[node] = stream = StreamHandle(node, "bench")
            info = fleet.info[n % TEMPLATES]
            info.node_id = node
            ingest.attach(stream, info)
        ingests.append((ingest, writer, streams, clock))
    spent = [0.0, 0.0]
    done = 0
    chunk = 0
    while done < args.seconds:
        seconds = min(args.chunk_seconds, args.seconds - done)
        reports = [list(fleet.second()) for _ in range(seconds)]
        order = (0, 1) if chunk % 2 == 0 else (1, 0)
        for which in order:
            ingest, _writer, streams, clock = ingests[which]
            started = time.process_time()
            for k, second in enumerate(reports):
                clock[0] = DEFAULT_START_TIME + done + k
                for node, raw in second:
                    ingest.accept(streams[node], pb.NodeReport.FromString(raw), raw)
                await ingest.flusher.flush()
            spent[which] += time.process_time() - started
        done += seconds
        chunk += 1
    judged = ingests[0][0].jobs.judged_total
    for ingest, writer, _streams, _clock in ingests:
        await ingest.flusher.flush(final=True)
        writer.call_sync(ingest.alerting.close)
        writer.close()
    steps = ingests[0][0].jobs.nodes.steps_sent_total
    return spent[0], spent[1], judged, (steps, sum(sizes))


def _detector_and_rollup(args: argparse.Namespace) -> tuple[float, float, dict[str, int]]:
    fleet = Fleet(args.nodes, args.jobs, args.straggler_jobs, args.gpus)
    config = DetectorConfig()
    alone = {node: NodeDetector(node, config) for node in fleet.nodes}
    paired = {node: NodeDetector(node, config) for node in fleet.nodes}
    rollup = JobRollup(config)
    spent = [0.0, 0.0]

    def detector_alone(second: list[tuple[str, pb.NodeReport]]) -> None:
        for node, report in second:
            alone[node].observe(report)

    def with_rollup(second: list[tuple[str, pb.NodeReport]]) -> None:
        for node, report in second:
            detector = paired[node]
            before = detector.verdict
            detector.observe(report)
            rollup.observe(node, report, detector, detector.verdict is not before)
        rollup.signals()

    for k in range(args.seconds):
        second = [(node, pb.NodeReport.FromString(raw)) for node, raw in fleet.second()]
        for which in (0, 1) if k % 2 == 0 else (1, 0):  # the order alternates, as above
            started = time.process_time()
            (detector_alone, with_rollup)[which](second)
            spent[which] += time.process_time() - started
    verdicts = rollup.verdicts()
    found = {"slowed": sum(1 for v in verdicts if v.state == "slowed"), "named": 0, "right": 0, "wrong": 0}
    for v in verdicts:
        if v.straggler_nodes:
            found["named"] += 1
            right = v.straggler_nodes == (fleet.stragglers.get(v.job),)
            found["right" if right else "wrong"] += 1
    return spent[0], spent[1], found


if __name__ == "__main__":
    sys.exit(main())
