"""The job roll-up on GPUs without GPM (A100-class): a GPU waiting in the collective reads ~100%
NVML utilization, and only its power tells it waits (core/detector/power_share.py). Four nodes
in lockstep whose GPUs compute 60% of each cycle at 400 W and wait 40% spinning at 90 W, node 3's
fabric link slow: named `link` within 60 s, the wait share within 0.05 of the 0.4 built in, and
the waiting GPUs count it lost; without power readings nobody is named and the notes say why."""

from __future__ import annotations

import pytest

from tests.collector.jobs.test_rollup import Run
from tests.fakes.job_reports import FakeNode, job_nodes

WAIT = 0.4


def _a100_job(*, power: bool = True, energy: bool = True, duty: float = 1 - WAIT) -> list[FakeNode]:
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.util = 0.98  # computing or waiting in NCCL's kernels alike
        node.compute_watts = 400.0 if power else None
        node.duty, node.energy = duty, energy
    return nodes


@pytest.mark.parametrize("energy", [True, False], ids=["energy-counter", "power-reading"])
def test_a_slow_fabric_link_without_gpm_is_named_link_within_a_minute(energy: bool) -> None:
    nodes = _a100_job(energy=energy)
    nodes[3].fabric_bytes_per_second = 5e7  # the others move 4e8 both ways
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "link")
    assert "link_fabric_peak" in v.evidence
    named = run.first_named()
    assert named is not None and named <= 60
    assert v.wait_ratio == pytest.approx(WAIT, abs=0.05)
    assert not v.notes
    for node in ("node-0", "node-1", "node-2"):
        d = run.detectors[node].verdict
        assert d.waiting_on == ("node-3",)
        # Each waiting GPU counts 0.4 of its time lost (on entering its window's: the job waited from its start).
        for g in d.gpus:
            assert g.gpu_seconds_lost == pytest.approx(WAIT * 120, rel=0.1)


def test_without_power_readings_the_same_job_names_nobody_and_says_why() -> None:
    nodes = _a100_job(power=False)
    nodes[3].fabric_bytes_per_second = 5e7
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    assert run.ever_named() == set()
    assert v.state == "busy"
    assert any("power does not tell" in note for note in v.notes)


def test_a_clean_job_with_power_readings_is_busy_and_names_nobody() -> None:
    """Steady computing shows no swing: power does not tell, and utilization (busy) stands."""
    nodes = _a100_job(duty=1.0)
    run = Run(nodes)
    run.seconds(180)
    v = run.verdict()
    assert (v.state, run.ever_named()) == ("busy", set())
    assert v.wait_ratio is not None and v.wait_ratio < 0.05


def test_a_clean_job_whose_gpus_rested_first_is_busy() -> None:
    """Idle at 55 W before the job, then computing at 400 W throughout: the swing is there, the
    computing share reads ~1, and nothing waits."""
    nodes = _a100_job(duty=1.0)
    for node in nodes:
        node.compute_watts, node.duty = 55.0, 1.0
    run = Run(nodes)
    run.seconds(20)
    for node in nodes:
        node.compute_watts = 400.0
    run.seconds(160)
    v = run.verdict()
    assert (v.state, run.ever_named()) == ("busy", set())
    assert not any(d.verdict.waiting_on for d in run.detectors.values())


def test_a_throttled_node_without_gpm_is_named_throttled_not_link() -> None:
    """Node 3's GPUs thermally throttled compute all the time at a lower draw; the others wait 30%
    of each cycle in the collective. Its throttled share names it, whatever its power."""
    nodes = _a100_job(duty=0.7)
    nodes[3].duty = 1.0
    nodes[3].throttled_gpus = (0, 1, 2, 3)
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "throttled")
    assert run.detectors["node-3"].verdict.state == "throttled"


@pytest.mark.parametrize("readings", [10, 0], ids=["readings-between-reports", "report-means-only"])
def test_sub_second_phases_are_told_by_the_readings_between_reports(readings: int) -> None:
    """A real step computes and waits in sub-second phases: every report's mean draw is the same,
    and only the agent's readings between reports (power_samples_watts) show the swing. With
    them the slow fabric link is named `link` within a minute and the wait share is within 0.05;
    without them nobody is named."""
    nodes = _a100_job()
    for node in nodes:
        node.sub_second, node.subsamples = True, readings
    nodes[3].fabric_bytes_per_second = 5e7
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    if not readings:
        assert run.ever_named() == set() and v.state == "busy"
        return
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "link")
    named = run.first_named()
    assert named is not None and named <= 60
    assert v.wait_ratio == pytest.approx(WAIT, abs=0.05)


def test_the_collectives_spin_reads_as_waiting_though_the_gpu_idled_lower_before_the_job() -> None:
    """Idle at 55 W before the job, then sub-second steps computing at 400 W and spinning at
    120 W in the collective: the spin is under the midpoint of the learned draws, so it counts as
    waiting, not a fifth computing (the bias of report means)."""
    nodes = _a100_job()
    for node in nodes:
        node.sub_second, node.subsamples = True, 10
        node.compute_watts, node.wait_watts, node.duty = 55.0, 55.0, 1.0
    run = Run(nodes)
    run.seconds(20)
    for node in nodes:
        node.compute_watts, node.wait_watts, node.duty = 400.0, 120.0, 1 - WAIT
    nodes[3].fabric_bytes_per_second = 5e7
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "link")
    assert v.wait_ratio == pytest.approx(WAIT, abs=0.05)


def test_a_job_whose_collective_takes_a_fifth_of_its_time_and_nobody_stands_out_is_busy() -> None:
    """Every node alike computing 0.8 and 0.2 in the collective's own transfers (the lab's clean
    job on a loaded machine read 0.15): power tells that wait as GPM's idle SMs would, and, as with
    GPM, it makes no job slowed without a node, a shared cause or a link to blame."""
    nodes = _a100_job(duty=0.8)
    for node in nodes:
        node.sub_second, node.subsamples = True, 10
    run = Run(nodes)
    run.seconds(120)
    v = run.verdict()
    assert (v.state, run.ever_named()) == ("busy", set())


def _lockstep(*, mean_power: bool = False, node1_rx: float = 1.2e9) -> Run:
    """The lab's A100 `job-wide` (2026-12-07): every node's data link at capacity, every GPU
    computing 0.45 of each sub-second step; node-1, ahead, waits in the collective, which NVML
    reads as busy. ``mean_power``: power read as a 1-s mean, which tells no wait."""
    nodes = _a100_job(duty=0.9)
    for node in nodes:
        node.sub_second, node.subsamples, node.mean_power = True, 10, mean_power
        if mean_power:
            node.computing_source = "power_mean"  # what the agent says its GPUs read
    run = Run(nodes)
    run.seconds(30)
    for node in nodes:
        node.duty, node.data_rx_bytes_per_second, node.util = 0.45, 1.2e9, 0.7
    nodes[1].util, nodes[1].data_rx_bytes_per_second = 0.98, node1_rx
    run.seconds(120)
    assert run.detectors["node-1"].verdict.state == "busy"
    return run


def test_a_node_ahead_in_a_job_wide_slowdown_waits_in_the_collective_and_joins_its_cause() -> None:
    """In lockstep the loaders take turns: three nodes' ranks wait ~0.3 for data, node-1's, ahead,
    ~0.02 and the rest in the collective: its own verdict stays `busy`. Its link at capacity and
    its power (waiting 0.55) say it is held by the same bottleneck: the job is job-wide
    (`network`), no node named, and every node's measured wait goes to the ledger (before:
    `slowed (unknown)`, node-1 left out)."""
    run = _lockstep()
    v = run.verdict()
    assert all(run.detectors[n].verdict.cause == "network" for n in ("node-0", "node-2", "node-3"))
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert run.ever_named() == set()
    assert v.wait_ratio == pytest.approx(0.55, abs=0.05)
    assert v.evidence["nodes_network"] == 3 and v.evidence["nodes_network_by_evidence"] == 1


def test_where_power_cannot_tell_a_busy_node_joins_the_shared_cause_by_its_evidence_alone() -> None:
    """The same job on GPUs whose power is a 1-s mean (an A10, an L40S; the lab's `mean1s`): no
    reading tells node-1's wait, nor any node's. Its link at capacity like every other node's,
    the job is job-wide (`network`), its wait share unknown with the reason, never a guess
    (before: `slowed (unknown)`, the cause unnamed though three nodes name it and the fourth's
    evidence does)."""
    v = _lockstep(mean_power=True).verdict()
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert v.wait_ratio is None and v.evidence["nodes_network_by_evidence"] == 1


def test_a_busy_node_whose_link_is_not_the_shared_bottleneck_does_not_join_it() -> None:
    """The same job, but node-1's data link carries a fifth of its rating: nothing of its own says
    `network`, so the job is not job-wide (three of four nodes are not enough)."""
    assert not _lockstep(node1_rx=2.5e8).verdict().job_wide
