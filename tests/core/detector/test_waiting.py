"""The `waiting` state: GPUs the job roll-up says wait on another node of their job, what they
count as lost, and that nothing changes for a detector nobody tells (the agent's ``top``)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import STATES, GpuVerdict, node_state
from tests.fakes.job_reports import START, FakeNode, JobPart


def _node(**kwargs: Any) -> FakeNode:
    return FakeNode(
        "node-a",
        [JobPart("1234", (0, 1), (0, 1), 8), JobPart("torch/other", (2, 3), (0, 1), 2, source="torch")],
        **kwargs,
    )


def _feed(detector: NodeDetector, node: FakeNode, start: float, seconds: int) -> None:
    for k in range(seconds):
        detector.observe(node.report(start + k))


def test_waiting_gpus_name_the_node_count_the_loss_and_raise_no_data_alert() -> None:
    detector, node = NodeDetector("node-a", DetectorConfig()), _node()
    _feed(detector, node, START, 90)
    assert [g.state for g in detector.verdict.gpus] == ["busy"] * 4
    detector.wait_on("1234", ("node-b",), 0.4)
    v = detector.verdict
    assert [g.state for g in v.gpus] == ["waiting", "waiting", "busy", "busy"]  # only job 1234's GPUs
    assert v.state == "waiting" and v.cause is None
    assert (v.waiting_on, v.waiting_job) == (("node-b",), "1234")
    assert v.evidence == {"waiting_on": "node-b", "waiting_job": "1234", "wait_ratio": 0.4}
    assert v.gpus[0].evidence["waiting_on"] == "node-b" and v.gpus[0].evidence["wait_ratio"] == 0.4
    # Entering counts the window at the wait share (as entering `starved` does), then each step.
    entered = v.gpus[0].gpu_seconds_lost
    assert entered == pytest.approx(0.4 * 60, rel=0.05)
    _feed(detector, node, START + 90, 30)
    v = detector.verdict
    assert v.gpus[0].gpu_seconds_lost == pytest.approx(entered + 0.4 * 30, rel=0.05)
    assert v.gpus[2].gpu_seconds_lost == 0.0
    assert v.gpu_seconds_lost == pytest.approx(2 * v.gpus[0].gpu_seconds_lost)
    (signal,) = detector.signals()
    assert signal.name == "GPUDataStarved" and not signal.firing
    assert v.to_plain()["waiting_on"] == ["node-b"]


def test_clear_wait_and_a_lapsed_wait_give_the_node_its_own_verdict_back() -> None:
    detector, node = NodeDetector("node-a", DetectorConfig()), _node()
    _feed(detector, node, START, 90)
    detector.wait_on("1234", ("node-b",), 0.4)
    detector.clear_wait("1234")
    assert detector.verdict.state == "busy" and detector.verdict.waiting_on == ()
    lost = detector.verdict.gpus[0].gpu_seconds_lost
    detector.wait_on("1234", ("node-b",), None)  # unknown share: each GPU's own idle share
    assert detector.verdict.gpus[0].evidence["wait_ratio"] == pytest.approx(0.02, abs=0.005)
    _feed(detector, node, START + 90, 61)  # never renewed: lapses a window later
    assert detector.verdict.state == "busy"
    assert detector.verdict.gpus[0].gpu_seconds_lost > lost


def test_a_gpu_starved_for_its_own_data_or_throttled_keeps_its_verdict() -> None:
    detector = NodeDetector("node-a", DetectorConfig())
    node = _node(util=0.5, data_rx_bytes_per_second=1.2e9, throttled_gpus=(1,))
    _feed(detector, node, START, 120)
    detector.wait_on("1234", ("node-b",), 0.5)
    states = [(g.state, g.cause) for g in detector.verdict.gpus]
    assert states[:2] == [("starved", "network"), ("throttled", None)]
    assert detector.signals()[0].firing


def test_an_echoed_wait_makes_gpus_starved_for_their_own_data_wait_and_counts_once() -> None:
    """The roll-up says the node stands out on nothing (``echo``): its own starvation is the
    straggler's echo, so its starved GPUs wait too; a throttled one keeps its verdict."""
    detector = NodeDetector("node-a", DetectorConfig())
    node = _node(util=0.5, data_rx_bytes_per_second=1.2e9, throttled_gpus=(1,))
    _feed(detector, node, START, 120)
    own = detector.verdict.gpus[0]
    assert (own.state, own.cause) == ("starved", "network")
    detector.wait_on("1234", ("node-b",), 0.5, echo=True)
    v = detector.verdict
    assert [(g.state, g.cause) for g in v.gpus[:2]] == [("waiting", None), ("throttled", None)]
    assert v.gpus[0].evidence["waiting_on"] == "node-b"
    # The other job's GPUs (2, 3) are starved of their own: the data alert names only them.
    assert [(g.state, g.cause) for g in v.gpus[2:]] == [("starved", "network")] * 2
    assert detector.signals()[0].labels["gpus"] == "2,3"
    # Entering from its own data starvation counts nothing more; then the wait's share per step.
    assert v.gpus[0].gpu_seconds_lost == own.gpu_seconds_lost
    _feed(detector, node, START + 120, 30)
    v = detector.verdict
    assert v.gpus[0].state == "waiting" and detector.signals()[0].labels["gpus"] == "2,3"
    assert v.gpus[0].gpu_seconds_lost == pytest.approx(own.gpu_seconds_lost + 0.5 * 30, rel=0.05)
    detector.wait_on("1234", ("node-b",), 0.5)  # no longer an echo: its own cause again
    assert (detector.verdict.gpus[0].state, detector.verdict.gpus[0].cause) == ("starved", "network")


def test_own_starvation_entered_while_waiting_is_not_counted_twice() -> None:
    detector, node = NodeDetector("node-a", DetectorConfig()), _node()
    _feed(detector, node, START, 90)
    detector.wait_on("1234", ("node-b",), 0.5, echo=True)
    entered = detector.verdict.gpus[0].gpu_seconds_lost
    starving = _node(util=0.5, data_rx_bytes_per_second=1.2e9)
    for k in range(60):
        detector.observe(starving.report(START + 90 + k))
        detector.wait_on("1234", ("node-b",), 0.5, echo=True)  # renewed at each step
    assert detector.own_gpus[0].state == "starved"  # its own verdict entered starved meanwhile
    g = detector.verdict.gpus[0]
    assert g.state == "waiting"
    # Each second counted once, at the larger of the wait share and its own data share (~0.5).
    assert g.gpu_seconds_lost == pytest.approx(entered + 0.5 * 60, rel=0.1)


def test_a_detector_nobody_tells_gives_the_same_verdicts_as_before() -> None:
    """The agent's ``top`` runs the detector alone: no GPU ever waits, the records only gain the
    two empty trailing fields."""
    detector, node = NodeDetector("node-a", DetectorConfig()), _node(util=0.6)
    for k in range(200):
        v = detector.observe(node.report(START + k))
        assert v.waiting_on == () and v.waiting_job == ""
        assert all(g.state != "waiting" for g in v.gpus)
    assert detector.verdict.state == "starved"


def test_waiting_sits_after_the_nodes_own_problems_in_the_roll_up() -> None:
    assert "waiting" in STATES

    def gpu(state: str) -> GpuVerdict:
        return GpuVerdict(0, "", state, None, None, None, None, None, 0.0, (), {})

    assert node_state((gpu("waiting"), gpu("busy"))) == "waiting"
    assert node_state((gpu("waiting"), gpu("throttled"))) == "throttled"
    assert node_state((gpu("waiting"), gpu("starved"))) == "starved"
