"""The simulator's proof of the payoff: the ``rental-10g-pcie`` node (``ordinary-cloud``: a 10 Gb/s
public link, all-reduce over PCIe 4.0) through its detector as the collector runs it, its
prediction at 50 Gb/s, at NVLink and at both set beside the simulator's own epoch on those
highways (its pipeline model, ``tools/simulator/model.py``) and DESIGN.md's 112 -> 65 minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.payoff.model import interconnect_rate, node_prediction
from nodeagent.collector.payoff.targets import PayoffConfig, parse_target
from nodeagent.collector.payoff.worth import node_worth
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.tools.simulator.model import flow
from nodeagent.tools.simulator.simulation import Simulation
from tests.fakes.trees import REPO

EPOCH_SAMPLES = 100e6  # DESIGN.md: CLIP, 100M pairs
DESIGN_MINUTES = (112.0, 65.0)


def _epoch_minutes(params: object, changes: dict[str, object]) -> float:
    return EPOCH_SAMPLES / flow(params.replace(changes), 8).samples_per_second / 60  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Rental:
    sim: Simulation
    verdict: NodeVerdict
    values: dict[str, float | str]


@pytest.fixture(scope="module")
def rental() -> Rental:
    """Five minutes of the rental through its detector, as the collector runs it."""
    sim = Simulation("ordinary-cloud", node_id="rental-10g-pcie", seed=1)
    detector = NodeDetector("rental-10g-pcie", DetectorConfig())
    first = sim.step(0.0)
    first.info.CopyFrom(sim.info())
    verdict = detector.observe(first)
    for _ in range(300):
        verdict = detector.observe(sim.step(1.0))
    assert (verdict.state, verdict.cause) == ("starved", "network")
    return Rental(sim, verdict, dict(detector.evidence.values))


@pytest.mark.parametrize(
    ("target", "changes"),
    [
        ("50G", {"nic_speed_bytes_per_second": 50e9 / 8}),
        ("nvlink", {"gpu_profile": "a800-sxm4", "interconnect": "nvlink"}),
        (
            "50G + nvlink",
            {"nic_speed_bytes_per_second": 50e9 / 8, "gpu_profile": "a800-sxm4", "interconnect": "nvlink"},
        ),
    ],
)
def test_the_prediction_at_each_highway_is_within_10_percent_of_the_simulators_epoch(
    rental: Rental, target: str, changes: dict[str, object]
) -> None:
    v = rental.verdict
    fixed = node_prediction(
        v.cause, v.starvation_ratio, v.interconnect_ratio, v.evidence, rental.values,
        interconnect_rate(rental.sim.info()), v.needed_ingest_bytes_per_second, PayoffConfig(),
    )  # fmt: skip
    assert fixed is not None and fixed.model is not None
    now = _epoch_minutes(rental.sim.params, {})
    assert now == pytest.approx(DESIGN_MINUTES[0], abs=0.5)
    predicted = now / fixed.model.speedup(parse_target(target))
    simulated = _epoch_minutes(rental.sim.params, changes)
    assert predicted == pytest.approx(simulated, rel=0.10)


def test_both_highways_predict_the_designs_65_minutes_within_10_percent(rental: Rental) -> None:
    prices = Prices.from_mapping({"nodes": {"rental-10g-*": 1.1}}, source="t")
    config = PayoffConfig.from_mapping({"targets": ["50G + nvlink"]}, source="t")
    fixed = node_worth(rental.verdict, rental.values, rental.sim.info(), prices, config)
    assert fixed is not None
    assert fixed.bottleneck == "network" and fixed.target == "50G + nvlink"
    assert fixed.target_speedup is not None and DESIGN_MINUTES[0] / fixed.target_speedup == pytest.approx(
        DESIGN_MINUTES[1], rel=0.10
    )
    # The loader's 40 cores, each 58% busy, would bind at 1.72x (the simulator's own 65 minutes):
    # said, not counted, as the counters do not say whose work keeps a core busy.
    assert any("the CPU binds at 1.72x" in note for note in fixed.notes)
    # The link itself at 95% of its 10 Gb/s: only a bigger one lifts it; the full lift is the
    # 34% data wait removed, the collective's 13% staying (DESIGN.md: 112 -> 74 minutes).
    assert any("only a faster link" in note for note in fixed.notes)
    assert fixed.speedup == pytest.approx(112 / 74, rel=0.05)
    # 8 GPUs x 24 h x (1 - 1/speedup) a day, at the rental's 1.10 a GPU-hour.
    assert fixed.gpu_hours_per_day == pytest.approx(8 * 24 * (1 - 1 / fixed.speedup), rel=1e-3)
    assert fixed.money_per_day == pytest.approx(fixed.gpu_hours_per_day * 1.1, abs=0.01)
    assert fixed.currency == "USD"


def test_the_cost_benchmark_runs_and_says_per_call_and_per_report() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "payoff_cost.py"), "--calls", "200", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    figures = json.loads(out.stdout)
    assert figures["node_prediction_us"] > 0 and figures["job_prediction_us"] > 0
    # Per report it is the per-call cost spread over a step's reports (4 nodes x 10 s) or a query's.
    assert figures["job_per_report_us"] == pytest.approx(figures["job_prediction_us"] / 40, rel=0.01)
