"""CPU per sample of remote write, stage by stage, in this process (no gRPC, no HTTP).

Simulated 8-GPU nodes (nodeagent.tools.simulator, with the detector's verdicts) send reports at
1 s; the reports and verdicts are made first and not timed. Then, as the collector's
remote-write thread does it:

- series: each node's ``NodeSeries`` fills its template ``WriteRequest`` with a report and its
  verdict (the agent's page written and read back, each series' value and timestamp set); the
  page's text alone is timed apart too (written a second time, not counted in the total);
- SerializeToString: the filled template's bytes, once per report;
- WriteRequest: a batch of ``--batch-samples``, the reports' bytes joined;
- snappy: cramjam's raw block compression, as posted.

Prints CPU microseconds (this process's CPU time, not wall time: the machine may be loaded) per
sample for each stage and in all, samples per report, and what one core would push at that cost.
``--profile`` adds cProfile's top functions of the whole path.

    python bench/remote_write_cost.py [--nodes 20] [--reports 60] [--scenario healthy] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from collections.abc import Callable, Iterator
from typing import TypedDict, TypeVar

import cramjam

from nodeagent.collector.remote_write.series import NodeSeries
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.exposition.dcgm import dcgm_families, nvlink_families
from nodeagent.core.exposition.node import node_families
from nodeagent.core.exposition.text import TextFamily
from nodeagent.tools.simulator import SCENARIOS, Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

T = TypeVar("T")
Reports = list[tuple[pb.NodeReport, NodeVerdict]]


class Cost(TypedDict):
    samples: int
    reports: int
    requests: int
    bytes_per_sample: float
    snappy_bytes_per_sample: float
    us_per_sample: dict[str, float]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--reports", type=int, default=60, help="Reports per node, 1 s apart.")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="healthy")
    parser.add_argument("--batch-samples", type=int, default=10_000, help="As serve's remote-write batches.")
    parser.add_argument("--profile", action="store_true", help="cProfile the whole path, top functions.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reports = _reports(args.scenario, args.nodes, args.reports)
    result = measure(reports, args.batch_samples)
    if args.json:
        print(json.dumps(result))
    else:
        samples = result["samples"]
        print(f"{args.nodes} nodes x {args.reports} reports ({args.scenario}): {samples} samples, "
              f"{samples / len(reports):.0f} per report")  # fmt: skip
        cost = result["us_per_sample"]
        for stage in ("series", "serialize", "write_request", "snappy", "total"):
            print(f"{stage:>14}: {cost[stage]:6.2f} us CPU per sample")
        print(f"(of series, the agent's page text alone: {cost['page_text']:.2f} us)")
        total = result["us_per_sample"]["total"]
        print(f"one core: {1e6 / total:,.0f} samples/s, {1e6 / total / (samples / len(reports)):,.0f} reports/s")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(measure, _reports(args.scenario, args.nodes, args.reports), args.batch_samples)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)


def measure(reports: Reports, batch_samples: int) -> Cost:
    nodes: dict[str, NodeSeries] = {}
    series_seconds = serialize_seconds = page_seconds = 0.0
    encoded: list[tuple[bytes, int]] = []
    clock = time.process_time
    for report, verdict in reports:
        node = nodes.get(report.node_id)
        if node is None:
            node = nodes[report.node_id] = NodeSeries(report.node_id)
        start = clock()
        template = node.fill(report, verdict)
        filled = clock()
        body = template.SerializeToString()
        done = clock()
        # The same page again, written only: the part of "series" that is the agent's exposition.
        for _ in _page(node, report):
            pass
        series_seconds += filled - start
        serialize_seconds += done - filled
        page_seconds += clock() - done
        encoded.append((body, len(template.timeseries)))
    # Batches as the sender cuts them; a batch's body is its reports' bytes joined.
    batches: list[list[bytes]] = [[]]
    count = 0
    for body, samples in encoded:
        if batches[-1] and count + samples > batch_samples:
            batches.append([])
            count = 0
        batches[-1].append(body)
        count += samples
    bodies, build_seconds = _cpu(lambda: [b"".join(batch) for batch in batches])
    compressed, snappy_seconds = _cpu(lambda: [bytes(cramjam.snappy.compress_raw(body)) for body in bodies])
    samples = sum(count for _, count in encoded)
    stages = {"series": series_seconds, "write_request": build_seconds, "serialize": serialize_seconds,
              "snappy": snappy_seconds}  # fmt: skip
    stages["total"] = sum(stages.values())
    stages["page_text"] = page_seconds
    return {
        "samples": samples,
        "reports": len(reports),
        "requests": len(bodies),
        "bytes_per_sample": sum(map(len, bodies)) / samples,
        "snappy_bytes_per_sample": sum(map(len, compressed)) / samples,
        "us_per_sample": {stage: seconds / samples * 1e6 for stage, seconds in stages.items()},
    }


def _page(node: NodeSeries, report: pb.NodeReport) -> Iterator[TextFamily]:
    """The agent's /metrics families of the report (core/exposition/), as ``NodeSeries`` writes them."""
    yield from dcgm_families(report, node.gpu_labels, node.last_xid)
    yield from nvlink_families(report, node.gpu_labels)
    yield from node_families(report, node.info)


def _cpu(work: Callable[[], T]) -> tuple[T, float]:
    start = time.process_time()
    result = work()
    return result, time.process_time() - start


def _reports(scenario: str, nodes: int, count: int) -> Reports:
    """Reports in arrival order (every node's first, then every node's second, ...), the first
    of each node with its topology, as a stream's first report carries it."""
    sims = [Simulation(scenario, node_id=f"rw-{i:05d}", seed=i) for i in range(nodes)]
    detectors = [NodeDetector(sim_node, DetectorConfig()) for sim_node in (f"rw-{i:05d}" for i in range(nodes))]
    out: Reports = []
    for seq in range(1, count + 1):
        for sim, detector in zip(sims, detectors, strict=True):
            report = sim.step(1.0)
            report.epoch, report.seq = 1, seq
            if seq == 1:
                report.info.CopyFrom(sim.info())
            out.append((report, detector.observe(report)))
    return out


if __name__ == "__main__":
    main()
