"""The job roll-up over hand-made report streams of multi-node jobs, each node through its own
detector as in the collector: the straggler named with its cause, the waiting nodes saying whom
they wait on, the job's wait share against the constructed truth and its loss on every GPU;
throttled, link-degraded and job-wide jobs; persistence; two nodes and a thousand."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from tests.fakes.job_reports import START, FakeNode, JobPart, job_nodes

ONSET = 60.0


class Run:
    """Nodes through their detectors and one roll-up, a second at a time."""

    def __init__(self, nodes: Iterable[FakeNode], rollup: JobRollup | None = None) -> None:
        self.config = DetectorConfig()
        self.nodes = {n.node_id: n for n in nodes}
        self.detectors = {node: NodeDetector(node, self.config) for node in self.nodes}
        self.rollup = rollup or JobRollup(self.config)
        self.t = START
        self.signals: list[tuple[float, AlertSignal]] = []
        # Per job, each verdict as it was judged: (seconds since the start, verdict).
        self.history: dict[str, list[tuple[float, JobVerdict]]] = {}
        self.silent: set[str] = set()

    def seconds(self, count: int) -> None:
        for _ in range(count):
            for node_id, node in self.nodes.items():
                if node_id in self.silent:
                    continue
                report = node.report(self.t)
                detector = self.detectors[node_id]
                before = detector.verdict
                detector.observe(report)
                self.rollup.observe(node_id, report, detector, detector.verdict is not before)
            for signal in self.rollup.signals():
                self.signals.append((self.t - START, signal))
            for v in self.rollup.verdicts():
                seen = self.history.setdefault(v.job, [])
                if not seen or seen[-1][1] is not v:
                    seen.append((self.t - START, v))
            self.t += 1.0

    def verdict(self, job: str = "1234") -> JobVerdict:
        v = self.rollup.verdict(job)
        assert v is not None
        return v

    def first_named(self, job: str = "1234") -> float | None:
        return next((at for at, v in self.history.get(job, []) if v.straggler_nodes), None)

    def ever_named(self, job: str = "1234") -> set[str]:
        return {n for _, v in self.history.get(job, []) for n in v.straggler_nodes}

    def firing(self, job: str = "1234") -> set[str]:
        state: dict[str, bool] = {}
        for _, s in self.signals:
            if s.key == job:
                state[s.node_id] = s.firing
        return {node for node, on in state.items() if on}


def _starve_network(node: FakeNode, busy: float = 0.5) -> None:
    """Its loader's link at capacity: its GPUs compute ``busy`` of the time."""
    node.util, node.data_rx_bytes_per_second = busy, 1.2e9


def test_a_clean_job_is_busy_and_names_nobody() -> None:
    run = Run(job_nodes("1234", 4))
    run.seconds(180)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("busy", (), None, False)
    assert v.nodes == ("node-0", "node-1", "node-2", "node-3") and v.gpus == 16
    assert (v.world_size, v.ranks_reported, v.notes) == (16, 16, ())
    assert v.wait_ratio == pytest.approx(0.02, abs=0.01)
    assert run.ever_named() == set() and run.firing() == set()
    assert all(d.verdict.state == "busy" for d in run.detectors.values())


def test_a_network_starved_node_is_named_and_every_gpu_of_the_job_counts_the_wait() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", ("node-1",), "network", False)
    named = run.first_named()
    assert named is not None and named - ONSET <= 60
    # Constructed truth: the straggler waits half its time for data, in lockstep the others wait
    # as long in the collective.
    assert v.wait_ratio == pytest.approx(0.5, abs=0.05)
    assert v.evidence["straggler"] == "node-1" and v.evidence["network_link"] == "eth0"
    assert v.evidence["busy_ratio"] == pytest.approx(0.5) and v.evidence["busy_ratio_job_median"] == pytest.approx(0.98)
    assert float(v.evidence["busy_ratio_score"]) < -3.5 and float(v.evidence["data_wait_ratio_score"]) > 3.5
    # What its data link would need: 1.2 GB/s over the half of the time it does not wait.
    assert v.needed_bytes_per_second == pytest.approx(2.4e9, rel=0.05)
    # The waiting nodes' own verdicts name the node they wait on.
    for node in ("node-0", "node-2", "node-3"):
        nv = run.detectors[node].verdict
        assert (nv.state, nv.waiting_on, nv.waiting_job) == ("waiting", ("node-1",), "1234")
        assert not run.detectors[node].signals()[0].firing
    straggler = run.detectors["node-1"].verdict
    assert (straggler.state, straggler.cause, straggler.waiting_on) == ("starved", "network", ())
    # Loss on every GPU of the job, about the wait share times the time since the onset.
    gpus = [g for d in run.detectors.values() for g in d.verdict.gpus]
    assert len(gpus) == 16 and all(g.gpu_seconds_lost > 0 for g in gpus)
    expected = 16 * 0.5 * 150
    assert sum(g.gpu_seconds_lost for g in gpus) == pytest.approx(expected, rel=0.15)
    assert v.gpu_seconds_lost == pytest.approx(expected, rel=0.15)
    assert run.firing() == {"node-1"}
    (signal,) = [s for _, s in run.signals if s.firing][-1:]
    assert dict(signal.labels) == {"job": "1234", "node": "node-1", "cause": "network"}
    assert signal.name == "JobStraggler" and signal.key == "1234" and signal.severity == "critical"
    assert float(signal.annotations["wait_ratio"]) == pytest.approx(0.5, abs=0.05)

    # Recovery: the straggler recovers, the waits end, the alert resolves.
    nodes[1].util, nodes[1].data_rx_bytes_per_second = 0.98, 2e8
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes) == ("busy", ())
    assert all(d.verdict.state == "busy" for d in run.detectors.values())
    assert run.firing() == set()


def test_waiting_nodes_with_gpm_read_idle_sms_and_the_straggler_is_still_named() -> None:
    """GPM shows a waiting GPU's SMs idle, so its own detector calls it starved (unknown): the
    NVML utilization still sets the straggler apart, and the waiting nodes become `waiting`."""
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.sm_active = 0.25  # computes half the time at SM activity 0.5
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[2])
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-2",), "network")
    assert "busy_ratio_score" in v.evidence
    for node in ("node-0", "node-1", "node-3"):
        assert run.detectors[node].verdict.state == "waiting"
        assert not run.detectors[node].signals()[0].firing


def test_a_throttled_node_is_named_and_the_others_wait_its_slowdown() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(int(ONSET))
    nodes[3].throttled_gpus, nodes[3].util = (0, 1, 2, 3), 1.0  # clocks at 70%
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-3",), "throttled")
    assert float(v.evidence["throttled_ratio_score"]) > 3.5
    # Each step takes 1/0.7 as long on the throttled node: the others wait 30% of the time.
    assert v.evidence["straggler_wait_ratio"] == pytest.approx(0.3, abs=0.01)
    assert run.detectors["node-3"].verdict.state == "throttled"
    for node in ("node-0", "node-1", "node-2"):
        assert run.detectors[node].verdict.waiting_on == ("node-3",)
    assert v.wait_ratio == pytest.approx(0.75 * 0.3, abs=0.05)  # the straggler itself computes


@pytest.mark.parametrize("degrade", ["fabric_peak", "nic_speed", "pcie", "nvlink_errors"])
def test_a_node_with_a_degraded_link_is_named_link(degrade: str) -> None:
    """The collective waits (GPM shows every node's SMs active 20% of the time) and nothing but
    one node's link sets it apart."""
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.util, node.sm_active = 0.97, 0.2
    run = Run(nodes)
    run.seconds(int(ONSET))
    slow = nodes[2]
    if degrade == "fabric_peak":
        slow.fabric_bytes_per_second = 5e7
    elif degrade == "nic_speed":
        slow.fabric_speed_bytes_per_second = 1.25e8
        slow.fabric_bytes_per_second = 1e8
    elif degrade == "pcie":
        slow.pcie_generation, slow.pcie_width = 3, 8
    else:
        slow.nvlink_errors_per_report = 5
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-2",), "link")
    assert f"link_{degrade}" in v.evidence
    assert v.wait_ratio == pytest.approx(1 - 0.2, abs=0.05)  # GPM, raw: SMs idle 80% of the time
    assert run.detectors["node-1"].verdict.waiting_on == ("node-2",)


def test_with_gpm_a_slowed_jobs_wait_share_is_its_gpus_idle_sms() -> None:
    """Job-wide, every GPU with GPM: the ranks wait for data 40% and in the collective 20%
    (NVML reads that as busy), computing 40% (SM activity 0.4): the job waits 1 - 0.4, where
    each GPU's own GPM-capped idle share (SM activity at 0.5 or more counts as full) would say
    less."""
    nodes = job_nodes("1234", 4)
    for node in nodes:
        node.sm_active = 0.9  # Hopper-like from the start (its info says GPM)
    run = Run(nodes)
    run.seconds(int(ONSET))
    for node in nodes:
        _starve_network(node, busy=0.6)
        node.sm_active = 0.4
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert v.wait_ratio == pytest.approx(0.6, abs=0.02)


def test_every_node_starved_for_the_network_is_job_wide_and_names_no_node() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(int(ONSET))
    for node in nodes:
        _starve_network(node, busy=0.6)
    run.seconds(150)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert v.wait_ratio == pytest.approx(0.4, abs=0.05)
    assert run.ever_named() == set()
    assert all(d.verdict.state == "starved" and d.verdict.waiting_on == () for d in run.detectors.values())
    assert run.firing() == {""}  # the job's instance: no node to name
    (signal,) = [s for _, s in run.signals if s.firing][-1:]
    assert signal.key == "1234" and dict(signal.labels) == {"job": "1234", "node": "", "cause": "network"}
    assert v.needed_bytes_per_second == pytest.approx(1.2e9 / 0.6, rel=0.05)


def test_nodes_that_wait_for_data_in_turn_are_job_wide_and_none_is_named() -> None:
    """Every data link slow, the loads alternating: at each step two of the four nodes wait for
    data while the other two wait in the collective. node-2 is among the two in 4 of every 6
    steps; counted, those steps would name it (the lab's job-wide run, 2026-12-02)."""
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(int(ONSET))
    turns = [(2, 3), (2, 0), (2, 1), (2, 3), (0, 1), (0, 3)]  # node-2 4 of 6, node-0 and node-3 3, node-1 2
    step = int(run.config.evaluate_seconds)
    for turn in range(18):
        for i, node in enumerate(nodes):
            if i in turns[turn % len(turns)]:
                _starve_network(node, busy=0.4)
            else:
                node.util, node.data_rx_bytes_per_second = 0.98, 4e8
        run.seconds(step)
    assert run.ever_named() == set()
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert all(d.verdict.state != "waiting" for d in run.detectors.values())


def test_two_jobs_on_disjoint_nodes_a_straggler_in_one_only() -> None:
    a, b = job_nodes("1234", 4, prefix="a"), job_nodes("torch/run-7", 4, prefix="b")
    run = Run([*a, *b])
    run.seconds(int(ONSET))
    _starve_network(a[0])
    run.seconds(150)
    va, vb = run.verdict("1234"), run.verdict("torch/run-7")
    assert (va.state, va.straggler_nodes, va.cause) == ("slowed", ("a-0",), "network")
    assert (vb.state, vb.straggler_nodes) == ("busy", ())
    assert all(run.detectors[n.node_id].verdict.state == "busy" for n in b)
    assert run.ever_named("torch/run-7") == set() and run.firing("torch/run-7") == set()


def test_a_one_step_blip_names_nobody() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[1])
    run.seconds(10)
    nodes[1].util, nodes[1].data_rx_bytes_per_second = 0.98, 2e8
    run.seconds(120)
    assert run.ever_named() == set() and run.firing() == set()
    assert run.verdict().state == "busy"
    assert all(d.verdict.state != "waiting" for d in run.detectors.values())


def test_two_nodes_one_slow_is_named_where_their_own_mad_could_never_tell() -> None:
    nodes = job_nodes("1234", 2)
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[0], busy=0.7)
    run.seconds(120)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-0",), "network")
    assert v.wait_ratio == pytest.approx(0.3, abs=0.05)
    assert run.detectors["node-1"].verdict.waiting_on == ("node-0",)


def test_two_nodes_that_agree_name_nobody() -> None:
    nodes = job_nodes("1234", 2)
    nodes[0].util, nodes[1].util = 0.95, 0.99  # noise between two healthy nodes
    run = Run(nodes)
    run.seconds(180)
    assert run.ever_named() == set() and run.verdict().state == "busy"


def test_a_thousand_nodes_one_straggler() -> None:
    nodes = job_nodes("1234", 1000, gpus=1)
    for k, node in enumerate(nodes):
        node.util = 0.95 + 0.04 * ((k * 7919) % 100) / 100  # healthy nodes spread 0.95-0.99
    run = Run(nodes)
    run.seconds(int(ONSET))
    _starve_network(nodes[617])
    run.seconds(70)
    v = run.verdict()
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-617",), "network")
    assert len(v.nodes) == 1000 and v.gpus == 1000 and v.evidence["nodes_compared"] == 1000
    assert run.ever_named() == {"node-617"}
    assert sum(1 for d in run.detectors.values() if d.verdict.waiting_on == ("node-617",)) == 999


def test_the_job_is_judged_once_per_step_however_many_nodes_step() -> None:
    run = Run(job_nodes("1234", 8))
    run.seconds(101)
    # Steps of 10 s: the first report's step, then one per boundary.
    assert run.rollup.judged_total == 11
    assert [round(at) % 10 for at, _ in run.history["1234"]] == [0] * 11
    # The snapshot is replaced whole, and only when a step was judged.
    snapshot = run.rollup.verdicts()
    run.seconds(5)
    assert run.rollup.verdicts() is snapshot
    run.seconds(5)
    assert run.rollup.verdicts() is not snapshot and run.rollup.judged_total == 12


def test_a_job_of_one_node_is_judged_alone() -> None:
    node = FakeNode("solo", [JobPart("77", (0, 1, 2, 3), (0, 1, 2, 3), 4)])
    run = Run([node])
    run.seconds(int(ONSET))
    _starve_network(node)
    run.seconds(120)
    v = run.verdict("77")
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert v.notes == ("one node: judged alone, no comparison",)
    assert v.wait_ratio == pytest.approx(0.5, abs=0.05)
    assert run.firing("77") == set()  # GPUDataStarved says it of the node
    assert run.detectors["solo"].signals()[0].firing


def test_the_job_stage_says_which_members_it_heard_within_the_window() -> None:
    """Where a job is judged is not where its nodes live (a front's other workers, other
    collectors): its stage's own hearing says the job reports now, for the page's `down` and
    /metrics' job families (views/fleet_page.py, views/metrics_fleet.py)."""
    now = [0.0]
    config = DetectorConfig()
    run = Run(job_nodes("1234", 3), JobRollup(config, clock=lambda: now[0]))
    run.seconds(90)
    assert run.rollup.heard_nodes() == {"node-0", "node-1", "node-2"}
    now[0] += config.window_seconds + 1  # nothing heard since, on the stage's clock
    assert run.rollup.heard_nodes() == set()
