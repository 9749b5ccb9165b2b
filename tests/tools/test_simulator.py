"""The simulated node: consistent counters through the agent's own rate code, the comparison
table of the design, determinism, a compact report, the sampler's interface, and the sped-up
clock that never runs ahead of the wall clock."""

from __future__ import annotations

import itertools
import statistics

import pytest

from nodeagent.agent.sampling.report_source import ReportSequence
from nodeagent.agent.views.snapshots import snapshot
from nodeagent.tools.simulator import SCENARIOS, ScenarioError, Simulation, UnknownScenarioError
from nodeagent.tools.simulator.model import flow
from nodeagent.tools.simulator.profiles import PROFILES
from nodeagent.tools.simulator.source import (
    DEFAULT_SCALED_SECONDS,
    JOB_ALIGN_SECONDS,
    MAX_SCALED_LEAD_SECONDS,
    SimulatedSampler,
    scaled_clock,
)

REQUIRED = {
    "healthy", "ordinary-cloud", "fast-cloud", "storage-bound", "cpu-bound", "single-threaded-loader", "h2d-bound",
    "interconnect-bound", "thermal-throttled", "idle", "job-start", "checkpoint-bursts", "epoch-boundaries",
}  # fmt: skip


def test_the_scenarios_of_the_design_exist_and_unknown_ones_are_named() -> None:
    assert set(SCENARIOS) >= REQUIRED
    with pytest.raises(UnknownScenarioError, match="known: healthy, ordinary-cloud"):
        Simulation("no-such-thing", node_id="n")
    with pytest.raises(ScenarioError, match="unknown simulator parameter 'nic_sped'"):
        Simulation("healthy", node_id="n", nic_sped=1.0)
    with pytest.raises(ScenarioError, match="cpu_count: expected int"):
        Simulation("healthy", node_id="n", cpu_count="many")


def test_comparison_table_in_the_model() -> None:
    """DESIGN.md: 10 Gbps + PCIe: 38 min download and 14 min sync of 112; 50 Gbps + NVLink: 3 and 2 of 65."""
    ordinary = Simulation("ordinary-cloud", node_id="n").truth()
    assert ordinary.state == "starved" and ordinary.cause == "network"
    assert ordinary.starvation_ratio == pytest.approx(38 / 112, abs=0.002)
    assert ordinary.interconnect_ratio == pytest.approx(14 / 112, abs=0.002)
    fast = Simulation("fast-cloud", node_id="n").truth()
    assert fast.state == "busy"
    assert fast.starvation_ratio == pytest.approx(3 / 65, abs=0.002)
    assert fast.starvation_ratio <= 0.05
    assert fast.interconnect_ratio == pytest.approx(2 / 65, abs=0.002)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_reports_counters_that_only_go_up(name: str) -> None:
    sim = Simulation(name, node_id="n1", seed=3)
    first = sim.step(0.0)
    assert first.node_id == "n1" and first.epoch == 0 and first.seq == 0
    assert len(sim.info().gpu.gpus) == 8
    previous = first
    for _ in range(40):
        report = sim.step(1.0)
        assert report.time_unix_seconds == pytest.approx(previous.time_unix_seconds + 1.0)
        for now, before in zip(report.gpus, previous.gpus, strict=True):
            assert 0.0 <= now.utilization_gpu_ratio <= 1.0
            assert now.pcie_rx_bytes_total >= before.pcie_rx_bytes_total
            assert now.nvlink_tx_bytes_total >= before.nvlink_tx_bytes_total
        assert report.nics[0].rx_bytes_total >= previous.nics[0].rx_bytes_total
        for now_disk, before_disk in zip(report.disks, previous.disks, strict=True):
            assert now_disk.read_bytes_total >= before_disk.read_bytes_total
            assert now_disk.io_time_milliseconds_total >= before_disk.io_time_milliseconds_total
        assert report.host.cpu_total.idle_seconds_total >= previous.host.cpu_total.idle_seconds_total
        previous = report


def test_rates_through_the_agents_own_code_match_the_model() -> None:
    """What `nodeagent sample` would show of an ordinary-cloud node: the 10 Gbps link at 95%,
    GPUs busy 60/112 of the time, PCIe carrying the all-reduce both ways."""
    sim = Simulation("ordinary-cloud", node_id="n", seed=1)
    info, reports = sim.info(), [sim.step(0.0)] + [sim.step(1.0) for _ in range(30)]
    snaps = [snapshot(a, b, info) for a, b in itertools.pairwise(reports)]
    eth0 = [s["nics"][0]["rx_link_ratio"] for s in snaps]
    assert statistics.mean(eth0) == pytest.approx(0.95, abs=0.01)
    util = [g["utilization_gpu_ratio"] for s in snaps for g in s["gpus"]]
    assert statistics.mean(util) == pytest.approx(60 / 112, abs=0.01)
    f = flow(sim.params, 8)
    collective = f.samples_per_second / 8 * sim.params.collective_bytes_per_sample
    tx = [g["pcie_tx_bytes_per_second"] for s in snaps for g in s["gpus"]]
    assert statistics.mean(tx) == pytest.approx(collective, rel=0.05)
    busy = [s["host"]["cpu_busy_ratio"] for s in snaps]
    assert all(0 < b < 0.85 for b in busy)


def test_same_seed_same_reports_other_seed_other_noise() -> None:
    def run(seed: int) -> list[bytes]:
        sim = Simulation("storage-bound", node_id="n", seed=seed)
        return [sim.step(1.0).SerializeToString() for _ in range(20)]

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_an_8_gpu_report_stays_within_the_wire_budget(name: str) -> None:
    """1.5 kB per report on average; per-core CPU times (every 30 s) are the large ones. GPUs
    without GPM add what their agent sends for them: ten power readings between reports and their
    computing source, 60 bytes a GPU (43 and 16, and a longer length of the GPU's sample)."""
    sim = Simulation(name, node_id="node-0001", seed=1)
    sizes = [len(sim.step(1.0).SerializeToString()) for _ in range(120)]
    readings = 0 if PROFILES[SCENARIOS[name].params.gpu_profile].gpm_supported else 8 * 60
    assert statistics.mean(sizes) <= 1500 + readings
    assert statistics.median(sizes) <= 1400 + readings


def test_truth_follows_the_time_structure() -> None:
    sim = Simulation("job-start", node_id="n")
    phases = []
    for _ in range(200):
        sim.step(1.0)
        phases.append(sim.truth().phase)
    assert phases[0] == "idle" and phases[100] == "warmup" and phases[-1] == "steady"
    assert not sim.step(1.0).gpus[0].processes or sim.truth().gpus[0].state == "busy"
    onset = Simulation("storage-bound", node_id="n", onset_seconds=10.0)
    onset.step(5.0)
    assert onset.truth().state == "busy"
    onset.step(10.0)
    assert (onset.truth().state, onset.truth().cause) == ("starved", "storage")


def test_simulated_sampler_behaves_like_the_sampler() -> None:
    now = [1_800_000_000.0]
    sampler = SimulatedSampler(
        "ordinary-cloud", node_id="sim-7", sequence=ReportSequence(4), seed=2, clock=lambda: now[0]
    )
    first = sampler.tick()
    now[0] += 2.5
    second = sampler.tick()
    sampler.close()
    assert (first.epoch, first.seq, second.seq) == (4, 1, 2)
    assert first.HasField("info") and not second.HasField("info")
    assert first.info.gpu.gpus[0].uuid == sampler.info.gpu.gpus[0].uuid
    assert second.time_unix_seconds == pytest.approx(1_800_000_002.5)
    assert second.nics[0].rx_bytes_total > first.nics[0].rx_bytes_total
    assert sampler.node_id == "sim-7" and sampler.sequence.last_seq == 2


def test_a_sped_up_clock_starts_in_the_past_and_never_passes_the_wall_clock() -> None:
    wall = [1_800_000_000.0]
    clock = scaled_clock(30.0, 10.0, wall=lambda: wall[0])
    start = clock()
    readings = []
    for _ in range(40):  # 20 s of wall clock, half a second at a time
        wall[0] += 0.5
        readings.append((wall[0], clock()))
    assert start == 1_800_000_000.0 - 29 * 10  # far enough back for 10 s at 30x to end now
    assert all(simulated <= now for now, simulated in readings)
    assert readings[9][1] - readings[0][1] == pytest.approx(9 * 0.5 * 30)  # 30x while behind
    assert readings[19][1] == pytest.approx(readings[19][0])  # caught up after the 10 s ...
    assert [simulated for now, simulated in readings[20:]] == [now for now, _ in readings[20:]]  # ... then 1x
    # Without a length: DEFAULT_SCALED_SECONDS; never more than MAX_SCALED_LEAD_SECONDS back.
    assert scaled_clock(20.0, wall=lambda: wall[0])() == wall[0] - 19 * DEFAULT_SCALED_SECONDS
    assert scaled_clock(10_000.0, 300.0, wall=lambda: wall[0])() == pytest.approx(wall[0] - MAX_SCALED_LEAD_SECONDS)
    slow = scaled_clock(0.5, wall=lambda: wall[0])
    wall[0] += 10
    assert slow() == wall[0] - 5


def test_clocks_given_one_anchor_read_the_same_time_whenever_each_started() -> None:
    """The nodes of one simulated job start one after another; at 30x, clocks counted from each
    one's own start would be 30 s apart for every second between their starts."""
    wall = [1_800_000_000.0]
    clocks = []
    for _ in range(4):
        clocks.append(scaled_clock(30.0, 25.0, wall=lambda: wall[0], anchor=1_800_000_025.0))
        wall[0] += 1.3
    for _ in range(40):
        wall[0] += 0.5
        assert len({clock() for clock in clocks}) == 1
        assert clocks[0]() <= wall[0]
    assert clocks[0]() == wall[0]  # met the wall clock at the anchor, then 1x
    # Without an anchor, a job's node meets the wall clock at the next whole minute after its run:
    # nodes started together share it.
    wall[0] = 1_800_000_010.0
    starts = []
    for _ in range(4):
        starts.append(scaled_clock(30.0, 25.0, wall=lambda: wall[0], align_seconds=JOB_ALIGN_SECONDS))
        wall[0] += 1.3
    assert len({clock() for clock in starts}) == 1
    assert starts[0]() == pytest.approx(wall[0] - 29 * (1_800_000_060.0 - wall[0]))
    # Slowed: they fall behind from the whole minute before.
    slow = [scaled_clock(0.5, wall=lambda: wall[0], align_seconds=JOB_ALIGN_SECONDS) for _ in range(2)]
    assert slow[0]() == slow[1]() == 1_800_000_000.0 + (wall[0] - 1_800_000_000.0) / 2


def test_an_anchor_too_far_or_not_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match=r"would start 29\.0 h back"):
        scaled_clock(30.0, wall=lambda: 1_800_000_000.0, anchor=1_800_000_000.0 + 3600)
    with pytest.raises(ValueError, match="finite"):
        scaled_clock(30.0, wall=lambda: 1_800_000_000.0, anchor=float("nan"))
