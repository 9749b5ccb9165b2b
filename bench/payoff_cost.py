"""What the payoff prediction costs (collector/payoff/): CPU per call and per report.

A job's prediction is made once per judged job step (every ``evaluate_seconds``, 10 s by
default), a starved node's once per query of it (``nodes``, the page, ``/metrics``): neither
runs per report. This times both on the simulator's ``rental-10g-pcie`` node (``ordinary-cloud``,
starved for the network) and a straggler judgement, with the pricing and the target that the
query service adds, and gives the per-report cost of the job's prediction at 1 report a second
per node (``--nodes`` nodes in the job) and of a node's at one query per ``--query-seconds``.

    python bench/payoff_cost.py [--calls 20000] [--nodes 4] [--query-seconds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.payoff.model import job_prediction
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.collector.payoff.worth import job_worth, node_worth
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.tools.simulator.simulation import Simulation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--nodes", type=int, default=4, help="nodes of the job (reports per second)")
    parser.add_argument("--query-seconds", type=float, default=10.0, help="one query of each node this often")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sim = Simulation("ordinary-cloud", node_id="rental-10g-pcie", seed=1)
    detector = NodeDetector("rental-10g-pcie", DetectorConfig())
    first = sim.step(0.0)
    first.info.CopyFrom(sim.info())
    verdict = detector.observe(first)
    for _ in range(300):
        verdict = detector.observe(sim.step(1.0))
    info, values = sim.info(), detector.evidence.values
    prices = Prices(default_per_gpu_hour=2.0)
    config = PayoffConfig.from_mapping({"targets": ["50G", "nvlink"]}, source="bench")
    node_seconds = _time(args.calls, lambda: node_worth(verdict, values, info, prices, config))
    evidence = {"straggler": "n1", "network_rx_bytes_per_second": 1.2e9}

    def job() -> None:
        fixed = job_prediction("slowed", "network", ("n1",), False, 0.45, 0.5, 2.4e9, evidence)
        job_worth(fixed, 32, {"n0": "", "n1": ""}, prices, config)

    job_seconds = _time(args.calls, job)
    evaluate = DetectorConfig().evaluate_seconds
    out = {
        "node_prediction_us": round(node_seconds * 1e6, 2),
        "job_prediction_us": round(job_seconds * 1e6, 2),
        # The job's, once per step over its nodes' reports of that step; the node's, once per query.
        "job_per_report_us": round(job_seconds * 1e6 / (evaluate * args.nodes), 3),
        "node_per_report_us": round(node_seconds * 1e6 / args.query_seconds, 3),
    }
    if args.json:
        print(json.dumps(out))
        return
    for key, value in out.items():
        print(f"{key:<22} {value}")


def _time(calls: int, call: object) -> float:
    assert callable(call)
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best


if __name__ == "__main__":
    main()
