"""A link straggler by its time on the wire (issue 43, item 5): the members of a synchronous job
move the same bytes per step, so the node whose link is busy a far larger share of its rating,
or that retransmits, or whose RDMA link errors rise, is named `link`, with the evidence that
named it, even where nothing on its GPUs shows the job waiting (no GPM, no power: a GPU waiting
in the collective reads busy). Nodes alike name nobody."""

from __future__ import annotations

import pytest

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.link import LinkFinding
from nodeagent.collector.jobs.nic_peaks import NicWindow
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.straggler import Score, Standing, uncrowded
from nodeagent.collector.jobs.wire import through_bytes
from nodeagent.core.detector.config import DetectorConfig
from tests.collector.jobs.test_rollup import ONSET, Run
from tests.fakes.job_reports import FakeNode, job_nodes

FABRIC = 1.25e9  # bytes per second: a 10 Gb/s fabric NIC


def _job(wired: bool = False) -> tuple[list[FakeNode], Run]:
    """Four nodes whose GPUs read busy on every counter they have (NVML utilization alone: no
    GPM, no power), each moving 125 MB/s over its fabric link, in bursts of a second, a tenth
    of its rating."""
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.util = 0.98
        node.fabric_bytes_per_second = 0.1 * FABRIC
        node.fabric_speed_bytes_per_second = FABRIC
    rollup = JobRollup(DetectorConfig())
    if wired:
        through_bytes(rollup)  # the node stage and the job stage talk through the wire's bytes
    return nodes, Run(nodes, rollup)


def test_a_link_busy_three_times_the_others_share_of_its_rating_is_named() -> None:
    """The same bytes as the others over a link rated a third of theirs: 0.3 of its time on the
    wire against their 0.1, its transfers well under its rating (0.3 of it at their peak)."""
    nodes, run = _job(wired=True)
    run.seconds(int(ONSET))
    slow = nodes[1]
    slow.fabric_speed_bytes_per_second = FABRIC / 3
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "link")
    assert v.evidence["link_fabric_busy"] == "nic:fab0"
    assert v.evidence["link_fabric_busy_value"] == pytest.approx(0.3, abs=0.01)
    assert v.evidence["link_fabric_busy_job_median"] == pytest.approx(0.1, abs=0.01)
    assert run.ever_named() == {"node-1"}
    for node in ("node-0", "node-2", "node-3"):
        assert run.detectors[node].verdict.waiting_on == ("node-1",)


def test_a_busier_link_that_costs_next_to_nothing_names_nobody() -> None:
    """Three times the others' share, but 0.01 of the time against 0.003: under the excess of
    time on the wire that could make the others wait (``link_busy_excess_ratio``)."""
    nodes, run = _job()
    for node in nodes:
        node.fabric_bytes_per_second = 0.003 * FABRIC
    run.seconds(int(ONSET))
    nodes[1].fabric_speed_bytes_per_second = FABRIC * 0.3
    run.seconds(120)
    assert run.ever_named() == set()
    assert run.verdict().state == "busy"


def test_a_node_that_retransmits_is_named_by_its_retransmit_ratio() -> None:
    nodes, run = _job(wired=True)
    run.seconds(int(ONSET))
    nodes[2].tcp_retransmit_ratio = 0.03  # the others: 0.0005
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-2",), "link")
    assert v.evidence["link_retransmits"] == "tcp"
    assert v.evidence["link_retransmits_value"] == pytest.approx(0.03, abs=0.002)
    assert v.evidence["link_retransmits_job_median"] == pytest.approx(0.0005, abs=0.0002)
    assert "link_fabric_busy" not in v.evidence


def test_rdma_link_errors_that_keep_rising_name_the_node() -> None:
    nodes, run = _job(wired=True)
    for node in nodes:
        node.rdma_errors_per_report = 0
    run.seconds(int(ONSET))
    nodes[3].rdma_errors_per_report = 2  # symbol errors, and a link recovery every other one
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "link")
    assert v.evidence["link_rdma_errors"] == "rdma"
    assert v.evidence["link_rdma_errors_value"] > 0
    assert v.evidence["link_rdma_errors_job_median"] == 0


def test_members_alike_name_nobody() -> None:
    """Equal links, equal retransmits (a few, as every host has), RDMA errors rising on none."""
    nodes, run = _job()
    for node in nodes:
        node.rdma_errors_per_report = 0
        node.tcp_retransmit_ratio = 0.002
    run.seconds(int(ONSET) + 120)
    assert run.ever_named() == set()
    assert run.verdict().state == "busy"


def test_a_few_segments_retransmitted_of_a_quiet_host_say_nothing() -> None:
    """Under ``link_retransmit_min_segments`` a step: no ratio, whatever it would read."""
    nodes, run = _job()
    for node in nodes:
        node.tcp_segments_per_second = 5.0
    run.seconds(int(ONSET))
    nodes[0].tcp_retransmit_ratio = 0.5
    run.seconds(120)
    assert run.ever_named() == set()


def test_time_on_the_wire_is_bytes_over_the_rating_and_the_span() -> None:
    window = NicWindow(3e8, 2e8, rx_bytes=6e8, tx_bytes=3e8, seconds=10.0)
    assert window.busy_ratio(1.2e8) == pytest.approx(6e8 / (1.2e8 * 10))  # the busier direction
    assert window.busy_ratio(0.0) is None
    assert NicWindow(0, 0, 0, 0, 0.0).busy_ratio(1e9) is None
    config = JobRollupConfig()
    assert config.link_busy_excess_ratio == DetectorConfig().moderate_ratio  # the moderate tier


def test_of_a_lossy_links_two_ends_the_one_whose_link_is_busier_is_named() -> None:
    """A lossy link makes both its ends resend: the degraded node, and the node sending into it
    (its predecessor in a ring). Both retransmit alike; the degraded node's link, rated a tenth
    of the others', spends ten times their share of its rating on the same bytes: it alone is
    named (with both counted, more nodes would stand out than may be stragglers: none would)."""
    nodes, run = _job()
    run.seconds(int(ONSET))
    for node, ratio in ((nodes[0], 0.6), (nodes[1], 0.5)):
        node.tcp_retransmit_ratio = ratio
    nodes[1].fabric_speed_bytes_per_second = FABRIC / 10
    for node in nodes:
        node.fabric_bytes_per_second = 0.001 * FABRIC  # bursts far under any rating: 0.01 of the slow one
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "link")
    assert v.evidence["link_retransmits_value"] == pytest.approx(0.5, abs=0.01)
    assert run.ever_named() == {"node-1"}


def test_a_costly_link_stands_out_through_a_crowd_of_per_step_noise() -> None:
    """A step where a waiting node's busy share also stood out (a long step's phases fell badly in
    the 5-s step) is crowded: nobody stands out from it, except the node whose link shows its own
    cost, where few enough do. Hardware that differs and costs nothing is wiped as before."""
    busy = LinkFinding("fabric_busy", "nic:fab0", 0.54, 0.05)
    speed = LinkFinding("nic_speed", "nic:fab0", 12.5e6, 125e6)
    noise = Score("busy_ratio", 0.4, 1.0, -20.2)
    standings = {
        "node-0": Standing(7, False),
        "node-1": Standing(7, True, "link", (), (speed, busy)),
        "node-2": Standing(7, True, "unknown", (noise,)),
        "node-3": Standing(7, False),
    }
    kept = uncrowded(standings, 7)
    assert kept["node-1"].stood_out and not kept["node-2"].stood_out
    # Without the costly finding the step is crowded for everyone.
    standings["node-1"] = Standing(7, True, "link", (), (speed,))
    assert not any(s.stood_out for s in uncrowded(standings, 7).values())
    # Two costly stand-outs of four are a crowd too (at most one straggler of four).
    standings["node-1"] = Standing(7, True, "link", (), (busy,))
    standings["node-2"] = Standing(7, True, "link", (), (busy,))
    assert not any(s.stood_out for s in uncrowded(standings, 7).values())
