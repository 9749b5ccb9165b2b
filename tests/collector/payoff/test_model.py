"""The step model and the predictions: each stage bounds the speed-up, unknown stays unknown,
the assumptions are said, a job's straggler and job-wide cause from hand-made report streams
through the real roll-up."""

from __future__ import annotations

import pytest

from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.payoff.model import job_prediction, node_prediction, worth_words
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.collector.payoff.worth import job_worth
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from tests.fakes.job_reports import START, FakeNode, job_nodes

NO_TARGETS = PayoffConfig()


def _node(cause: str, data: float, sync: float = 0.0, **values: float | str) -> float | None:
    fixed = node_prediction(cause, data, sync, {}, values, None, None, NO_TARGETS)
    assert fixed is not None
    return fixed.speedup


def test_a_data_stall_removed_speeds_the_step_by_one_over_the_rest() -> None:
    assert _node("storage", 0.5) == pytest.approx(2.0)
    assert _node("network", 0.3, 0.2) == pytest.approx(1 / 0.7, rel=1e-3)  # the collective stays


def test_the_next_limit_the_counters_show_bounds_it() -> None:
    # A storage-starved node whose NIC already carries 80% of its rating: it binds before the GPUs.
    assert _node("storage", 0.5, network_rx_link_ratio=0.8) == pytest.approx(1 / 0.8, rel=1e-3)
    # The host-to-device copy at 70% of PCIe, for a CPU-starved node.
    fixed = node_prediction("cpu", 0.5, 0.0, {"h2d_link_ratio": 0.7}, {}, None, None, NO_TARGETS)
    assert fixed is not None and fixed.speedup == pytest.approx(1 / 0.7, rel=1e-3)
    assert any("host-to-device copy (70% of PCIe) binds" in n for n in fixed.notes)
    # The busiest core is said, not counted: whose work keeps it busy the counters do not say.
    fixed = node_prediction("storage", 0.5, 0.0, {}, {"cpu_max_core_busy_ratio": 0.8}, None, None, NO_TARGETS)
    assert fixed is not None and fixed.speedup == pytest.approx(2.0)
    assert any("busiest core is 80% busy: if it decodes the data, the CPU binds at 1.25x" in n for n in fixed.notes)


def test_a_link_near_its_rating_says_only_a_bigger_one_lifts_it() -> None:
    evidence = {"network_rx_link_ratio": 0.95, "network_rx_bytes_per_second": 1.19e9}
    fixed = node_prediction("network", 0.4, 0.0, evidence, evidence, None, None, NO_TARGETS)
    assert fixed is not None and fixed.speedup == pytest.approx(1 / 0.6, rel=1e-3)
    assert any("95% of its rating: only a faster link" in n and "at most 1.05x" in n for n in fixed.notes)
    # At a 25G target (2.5x the 10G rating) the data stage takes 0.4 of the step: the GPUs' 0.6 binds.
    config = PayoffConfig.from_mapping({"targets": ["25G"]}, source="t")
    fixed = node_prediction("network", 0.4, 0.0, evidence, evidence, None, None, config)
    assert fixed is not None and (fixed.target, fixed.target_speedup) == ("25G", pytest.approx(1 / 0.6, rel=1e-3))
    # At 12G (1.2x) the link still binds: 1.2x.
    config = PayoffConfig.from_mapping({"targets": ["12G"]}, source="t")
    fixed = node_prediction("network", 0.4, 0.0, evidence, evidence, None, None, config)
    assert fixed is not None and fixed.target_speedup == pytest.approx(1.2, rel=0.01)


def test_the_collective_scales_with_the_interconnect_at_a_target() -> None:
    config = PayoffConfig.from_mapping({"targets": ["nvlink 252GB/s"]}, source="t")
    fixed = node_prediction("interconnect", 0.0, 0.3, {}, {}, 31.5e9, None, config)
    assert fixed is not None and fixed.speedup == pytest.approx(1 / 0.7, rel=1e-3)
    # 31.5 -> 252 GB/s: the collective's 0.3 becomes 0.0375 of the step.
    assert fixed.target_speedup == pytest.approx(1 / (0.7 + 0.3 / 8), rel=1e-3)


def test_unknown_stays_unknown_with_the_reason() -> None:
    reason = "no GPM, and power does not tell computing from waiting on these GPUs"
    fixed = node_prediction("network", 0.4, 0.0, {"wait_unknown_reason": reason}, {}, None, None, NO_TARGETS)
    assert fixed is not None and fixed.speedup is None and fixed.notes == (f"unknown: {reason}",)
    job = job_prediction("slowed", "network", ("n1",), False, None, None, None, {"wait_unknown_reason": reason})
    assert job is not None and job.speedup is None and reason in job.notes[0]
    priced = job_worth(job, 16, {"n1": ""}, Prices(default_per_gpu_hour=2.0), NO_TARGETS)
    assert priced is not None and priced.gpu_hours_per_day is None and priced.money_per_day is None
    assert worth_words(priced.to_plain()) == "unknown"
    assert node_prediction(None, 0.4, 0.0, {}, {}, None, None, NO_TARGETS) is None


def _run(nodes: list[FakeNode], seconds: int, rollup: JobRollup, detectors: dict[str, NodeDetector], t: float) -> float:
    for _ in range(seconds):
        for node in nodes:
            report = node.report(t)
            detector = detectors[node.node_id]
            before = detector.verdict
            detector.observe(report)
            rollup.observe(node.node_id, report, detector, detector.verdict is not before)
        t += 1.0
    return t


def _job(change: str) -> JobVerdict:
    config = DetectorConfig()
    nodes = job_nodes("1234", 4)
    rollup = JobRollup(config)
    detectors = {n.node_id: NodeDetector(n.node_id, config) for n in nodes}
    t = _run(nodes, 60, rollup, detectors, START)
    if change == "straggler":
        nodes[1].util, nodes[1].data_rx_bytes_per_second = 0.5, 1.2e9
    elif change == "throttled":
        nodes[3].throttled_gpus, nodes[3].util = (0, 1, 2, 3), 1.0  # clocks at 70%
    elif change == "job-wide":
        for node in nodes:
            node.util, node.data_rx_bytes_per_second = 0.6, 1.2e9
    _run(nodes, 150, rollup, detectors, t)
    verdict = rollup.verdict("1234")
    assert verdict is not None
    return verdict


def test_a_straggler_as_fast_as_the_others_ends_their_wait() -> None:
    """Its GPUs compute half the time (waiting for its link), the others' 0.98: the job's step
    would run 0.98 / 0.5 as fast, which the lift of the others' 50% wait predicts (2x)."""
    v = _job("straggler")
    assert v.if_fixed is not None and v.if_fixed.bottleneck == "network"
    assert v.if_fixed.speedup == pytest.approx(0.98 / 0.5, rel=0.05)
    assert "node-1 as fast as the slowest other node" in v.if_fixed.notes[0]
    prices = Prices(currency="EUR", default_per_gpu_hour=2.0)
    config = PayoffConfig.from_mapping({"targets": ["nvlink", "10G"]}, source="t")
    fixed = job_worth(v.if_fixed, v.gpus, dict.fromkeys(v.nodes, ""), prices, config)
    assert fixed is not None
    # 16 GPUs, a day, half of it lost now: 16 x 24 x (1 - 1/2) GPU-hours at 2.00.
    assert fixed.gpu_hours_per_day == pytest.approx(16 * 24 * (1 - 1 / v.if_fixed.speedup), rel=1e-3)
    assert (fixed.money_per_day, fixed.currency) == (pytest.approx(fixed.gpu_hours_per_day * 2.0, abs=0.01), "EUR")
    # The network target, not the first listed: 1.2 GB/s now, a 10G link carries 1.25: barely faster.
    assert fixed.target == "10G" and fixed.target_speedup == pytest.approx(1.25e9 / 1.2e9, rel=0.05)
    plain = v.to_plain()["if_fixed"]
    assert plain["speedup"] == v.if_fixed.speedup and plain["target"] is None


def test_a_throttled_straggler_at_the_others_clocks() -> None:
    v = _job("throttled")
    assert v.if_fixed is not None and v.if_fixed.speedup == pytest.approx(1 / 0.7, rel=0.03)


def test_a_job_wide_cause_removed_everywhere() -> None:
    v = _job("job-wide")
    assert v.job_wide and v.if_fixed is not None
    assert v.if_fixed.speedup == pytest.approx(1 / 0.6, rel=0.05)
    assert "shared cause (network) removed" in v.if_fixed.notes[0]


def test_a_busy_job_has_nothing_to_fix() -> None:
    v = _job("none")
    assert v.state == "busy" and v.if_fixed is None and v.to_plain()["if_fixed"] is None
