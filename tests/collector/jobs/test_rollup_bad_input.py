"""Jobs whose reports do not add up: more ranks claimed than report, ranks that disagree, one node
in two jobs, nodes that leave mid-job, and more jobs and nodes than the roll-up keeps. Each gets
a clear verdict (or a clear refusal of the comparison) and nothing else is affected."""

from __future__ import annotations

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.core.detector.config import DetectorConfig
from tests.collector.jobs.test_rollup import ONSET, Run, _starve_network
from tests.fakes.job_reports import FakeNode, JobPart, job_nodes


def test_a_job_claiming_ten_thousand_ranks_is_judged_on_the_four_nodes_that_report() -> None:
    nodes = job_nodes("1234", 4, gpus=8, world_size=10_000)
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[3])
    run.seconds(120)
    v = run.verdict()
    assert (v.world_size, v.ranks_reported, v.gpus) == (10_000, 32, 32)
    assert v.notes == ("4 nodes report 32 of 10000 ranks",)
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "network")


def test_ranks_that_disagree_on_the_world_size_refuse_the_comparison_for_that_job_only() -> None:
    bad, good = job_nodes("1234", 4, prefix="a"), job_nodes("5678", 4, prefix="b")
    bad[3].jobs[0].world_size = 64  # a key two jobs share, most likely
    run = Run([*bad, *good])
    run.seconds(int(ONSET))
    _starve_network(bad[1])
    _starve_network(good[2])
    run.seconds(150)
    v = run.verdict("1234")
    assert "the ranks disagree on the world size (16 on 3 nodes, 64 on 1 node): the nodes are not compared" in v.notes
    assert v.world_size == 16 and v.straggler_nodes == () and run.ever_named("1234") == set()
    assert (v.state, v.cause, v.job_wide) == ("slowed", "unknown", False)  # its GPUs do wait
    assert all(run.detectors[n.node_id].verdict.state != "waiting" for n in bad)
    assert run.detectors["a-1"].verdict.cause == "network"  # the node's own verdict, as before
    # The other job is judged as ever.
    other = run.verdict("5678")
    assert (other.state, other.straggler_nodes, other.cause, other.notes) == ("slowed", ("b-2",), "network", ())


def test_ranks_claimed_twice_refuse_the_comparison() -> None:
    nodes = job_nodes("1234", 3)
    nodes[2].jobs[0].ranks = nodes[1].jobs[0].ranks
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[0])
    run.seconds(120)
    v = run.verdict()
    assert any(note.startswith("ranks claimed twice (rank 4 on node-1 and node-2") for note in v.notes)
    assert v.straggler_nodes == () and "8 of 12 ranks" not in " ".join(v.notes)


def test_one_node_in_two_jobs_is_the_straggler_only_of_the_job_whose_gpus_are_slow() -> None:
    shared = FakeNode("shared", [JobPart("A", (0, 1), (6, 7), 8), JobPart("B", (2, 3), (6, 7), 8)])
    a = [FakeNode(f"a-{k}", [JobPart("A", (0, 1), (2 * k, 2 * k + 1), 8)], gpus=2) for k in range(3)]
    b = [FakeNode(f"b-{k}", [JobPart("B", (0, 1), (2 * k, 2 * k + 1), 8)], gpus=2) for k in range(3)]
    run = Run([shared, *a, *b])
    run.seconds(int(ONSET))
    shared.gpu_util = {0: 0.5, 1: 0.5}  # job A's loader starves on the shared node's link
    shared.data_rx_bytes_per_second = 1.2e9
    run.seconds(150)
    va, vb = run.verdict("A"), run.verdict("B")
    assert (va.state, va.straggler_nodes, va.cause, va.gpus) == ("slowed", ("shared",), "network", 8)
    assert (vb.state, vb.straggler_nodes, vb.gpus) == ("busy", (), 8)
    assert run.ever_named("B") == set()
    assert all(run.detectors[n.node_id].verdict.waiting_on == ("shared",) for n in a)
    assert all(run.detectors[n.node_id].verdict.state == "busy" for n in b)
    states = [(g.index, g.state) for g in run.detectors["shared"].verdict.gpus]
    assert states == [(0, "starved"), (1, "starved"), (2, "busy"), (3, "busy")]


def test_a_node_that_goes_silent_leaves_the_job_with_a_note_and_no_false_straggler() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(100)
    run.silent.add("node-3")
    judged = run.rollup.judged_total
    run.seconds(80)
    v = run.verdict()
    assert v.nodes == ("node-0", "node-1", "node-2") and v.gpus == 12
    # Silence is seen by the node's steps (one each 10 s): its last step is 60 to 70 s old.
    silent = [note for note in v.notes if note.startswith("node-3 left: silent ")]
    assert silent and 60 < float(silent[0].split()[3]) <= 70, v.notes
    assert "3 nodes report 12 of 16 ranks" in v.notes
    assert run.ever_named() == set() and v.state == "busy"
    assert run.rollup.judged_total - judged == 8  # still once per step: the step does not wait for it


def test_a_node_whose_reports_drop_the_job_leaves_at_once() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(100)
    nodes[2].jobs = []
    run.seconds(20)
    v = run.verdict()
    assert v.nodes == ("node-0", "node-1", "node-3")
    assert "node-2 left: its reports no longer name the job" in v.notes
    assert run.ever_named() == set() and v.state == "busy"


def test_when_the_straggler_leaves_the_others_stop_waiting_and_nobody_else_is_named() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(120)
    assert run.verdict().straggler_nodes == ("node-1",)
    run.silent.add("node-1")
    run.seconds(90)
    v = run.verdict()
    assert v.straggler_nodes == () and "node-1" not in v.nodes
    assert run.ever_named() == {"node-1"}
    assert all(run.detectors[n].verdict.state == "busy" for n in ("node-0", "node-2", "node-3"))
    assert run.firing() == set()


def test_a_job_whose_nodes_all_leave_ends_and_its_alert_resolves() -> None:
    nodes = job_nodes("1234", 3)
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[0])
    run.seconds(120)
    assert run.firing() == {"node-0"}
    for node in nodes:
        node.jobs = []
    run.seconds(20)
    assert run.rollup.verdict("1234") is None and run.rollup.verdicts() == ()
    assert run.firing() == set()
    assert all(d.verdict.waiting_on == () for d in run.detectors.values())


def test_past_the_bounds_jobs_and_nodes_are_left_out_and_said_so() -> None:
    config = JobRollupConfig(max_jobs=3, max_nodes_per_job=3, max_jobs_per_node=2)
    solo = [FakeNode(f"solo-{k}", [JobPart(f"job-{k}", (0, 1, 2, 3), (0, 1, 2, 3), 4)]) for k in range(5)]
    crowded = job_nodes("big", 4, prefix="big")
    many = FakeNode("many", [JobPart(f"m-{k}", (k % 4,), (0,), 1) for k in range(20)])
    run = Run([*crowded, *solo, many], JobRollup(DetectorConfig(), config))
    run.seconds(60)
    followed = {v.job for v in run.rollup.verdicts()}
    assert len(followed) == 3 and "big" in followed
    assert run.rollup.refused_jobs_total > 0
    big = run.verdict("big")
    assert big.nodes == ("big-0", "big-1", "big-2")
    assert "1 more node names the job, past the bound of 3 nodes per job: not followed" in big.notes
    assert run.rollup.nodes.ignored_job_samples_total > 0
    assert sum(len(run.rollup.nodes.jobs_of(node)) for node in run.nodes) <= 2 * len(run.nodes)
    assert sum(len(jobs) for jobs in run.rollup.jobs.membership.by_node.values()) <= 2 * len(run.nodes)
