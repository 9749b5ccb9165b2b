"""A job whose GPUs' readings cannot tell computing from waiting at its step length (power read
as a 1-s mean, sub-second steps): its wait share is unknown, never an estimate in its place.
``wait_ratio`` is None with the reason in the notes and the evidence (``wait_unknown_reason``),
the waiting nodes' detectors say so instead of a share, and the straggler is still named where
its own cause names it (starved for data, throttled). The same job read instantaneously keeps
its share (core/detector/computing_source.py)."""

from __future__ import annotations

import pytest

from nodeagent.collector.jobs.judge import WAIT_UNKNOWN_REASON
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.wire import through_bytes
from nodeagent.core.detector.config import DetectorConfig
from tests.collector.jobs.test_rollup import ONSET, Run, _starve_network
from tests.fakes.job_reports import FakeNode, job_nodes

MEAN_NOTE = (
    "{node}'s GPUs 0,1,2,3 read power as a 1-s mean; the job's phases, shorter than about 2 s, average out "
    "in it and the draw never swings: wait share unknown"
)


def _job(source: str, *, mean: bool) -> list[FakeNode]:
    """Four A100-class nodes in sub-second steps, computing 0.6 at 400 W, spinning 0.4 at 90 W."""
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.util, node.compute_watts, node.duty = 0.98, 400.0, 0.6
        node.sub_second, node.subsamples, node.mean_power = True, 10, mean
        node.computing_source = source
    return nodes


@pytest.mark.parametrize("wired", [False, True], ids=["in-process", "through-the-wire"])
def test_a_starved_straggler_read_as_a_one_second_mean_is_named_and_the_wait_share_is_unknown(wired: bool) -> None:
    nodes = _job("power_mean", mean=True)
    rollup = JobRollup(DetectorConfig())
    if wired:
        through_bytes(rollup)
    run = Run(nodes, rollup)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "network")
    assert v.wait_ratio is None
    assert v.evidence[WAIT_UNKNOWN_REASON] == "no_swing"
    assert v.evidence["wait_unknown_nodes"] == "node-0,node-1,node-2,node-3"
    assert "straggler_wait_ratio" not in v.evidence
    assert MEAN_NOTE.format(node="node-0") in v.notes
    assert v.to_plain()["wait_ratio"] is None and not v.to_proto().HasField("wait_ratio")  # null in jobs --json
    # The waiting nodes wait on it, the share unknown: said, not guessed.
    for node in ("node-0", "node-2", "node-3"):
        d = run.detectors[node].verdict
        assert d.waiting_on == ("node-1",)
        assert d.evidence[WAIT_UNKNOWN_REASON] == "no_swing" and "wait_ratio" not in d.evidence
        for g in d.gpus:
            assert g.state == "waiting"
            assert g.evidence[WAIT_UNKNOWN_REASON] == "no_swing" and "wait_ratio" not in g.evidence


def test_a_throttled_straggler_read_as_a_one_second_mean_is_named_and_the_wait_share_is_unknown() -> None:
    nodes = _job("power_mean", mean=True)
    nodes[3].duty = 1.0
    nodes[3].throttled_gpus = (0, 1, 2, 3)
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "throttled")
    assert v.wait_ratio is None and v.evidence[WAIT_UNKNOWN_REASON] == "no_swing"
    assert "sm_clock_mhz" in v.evidence  # its own cause's evidence stands


def test_the_same_job_read_instantaneously_keeps_its_share() -> None:
    """The agent says instantaneous: the readings between reports swing, and the slow fabric link
    is named with the wait share built in (today's ideal-instant case, decided by the agent)."""
    nodes = _job("power_instant", mean=False)
    nodes[3].fabric_bytes_per_second = 5e7
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "link")
    assert v.wait_ratio == pytest.approx(0.4, abs=0.05)
    assert WAIT_UNKNOWN_REASON not in v.evidence and not v.notes


def test_only_the_nodes_whose_readings_cannot_tell_are_named_unknown() -> None:
    """Node 2's GPUs read a 1-s mean, the others instantaneously; node 1 starved of data: the job's
    share is unknown (node 2's part of it is), and the note names node 2 alone."""
    nodes = _job("power_instant", mean=False)
    nodes[2].mean_power, nodes[2].computing_source = True, "power_mean"
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "network")
    assert v.wait_ratio is None and v.evidence["wait_unknown_nodes"] == "node-2"
    assert [n for n in v.notes if "wait share unknown" in n] == [MEAN_NOTE.format(node="node-2")]


def test_a_gpu_the_agent_says_nothing_reads_is_unknown() -> None:
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.computing_source = "none"
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "network")
    assert v.wait_ratio is None and v.evidence[WAIT_UNKNOWN_REASON] == "no_reading"
    assert any(
        n.startswith("node-0's GPUs 0,1,2,3 have no reading of computing (no GPM, DCGM or power); nothing separates")
        for n in v.notes
    )


def test_where_only_the_straggler_cannot_tell_the_others_wait_what_they_measure() -> None:
    """Node 1 starved of data reads a 1-s mean; the others read instantaneously, computing 0.6:
    they wait 0.4 as their power measures it, the job's share (node 1's part unknown) is None."""
    nodes = _job("power_instant", mean=False)
    nodes[1].mean_power, nodes[1].computing_source = True, "power_mean"
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "network")
    assert v.wait_ratio is None and v.evidence["wait_unknown_nodes"] == "node-1"
    assert v.evidence["straggler_wait_ratio"] == pytest.approx(0.4, abs=0.05)
    for node in ("node-0", "node-2", "node-3"):
        d = run.detectors[node].verdict
        assert d.waiting_on == ("node-1",) and WAIT_UNKNOWN_REASON not in d.evidence
        assert d.evidence["wait_ratio"] == pytest.approx(0.4, abs=0.05)
