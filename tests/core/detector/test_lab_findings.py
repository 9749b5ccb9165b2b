"""What the bottleneck lab (bench/lab.py) showed the detector getting wrong on real bottlenecks,
each reproduced on a simulated node with the counter the lab saw."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from nodeagent.core.detector.node import DetectorConfig, NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

Edit = Callable[[pb.NodeReport, int], None]


def reports(scenario: str, seconds: int, edit: Edit, **overrides: object) -> Iterator[pb.NodeReport]:
    sim = Simulation(scenario, node_id="node-a", seed=3, **overrides)
    first = sim.step(0.0)
    first.info.CopyFrom(sim.info())
    edit(first, 0)
    yield first
    for tick in range(1, seconds + 1):
        report = sim.step(1.0)
        edit(report, tick)
        yield report


def verdict(scenario: str, edit: Edit, config: DetectorConfig | None = None, **overrides: object) -> NodeVerdict:
    detector = NodeDetector("node-a", config or DetectorConfig())
    for report in reports(scenario, 300, edit, **overrides):
        detector.observe(report)
    return detector.verdict


def test_a_virtual_nic_with_a_given_speed_can_name_the_network() -> None:
    # A veth (bonds and VLANs are virtual too) whose rented rate the agent was given: its speed
    # is in NodeInfo, and a full link is the network.
    def as_veth(report: pb.NodeReport, tick: int) -> None:
        for nic in report.info.nics:
            if nic.name == "eth0":
                nic.virtual, nic.kind = True, "veth"

    v = verdict("ordinary-cloud", as_veth)
    assert (v.state, v.cause) == ("starved", "network")
    assert v.evidence["network_link"] == "eth0"


def test_loopback_and_unrated_virtual_nics_still_decide_nothing() -> None:
    # lo carries far more than any link, but it has no speed: it must never be the network.
    def busy_loopback(report: pb.NodeReport, tick: int) -> None:
        if tick == 0:
            report.info.nics.add(name="lo", virtual=True, kind="loopback")
        report.nics.add(name="lo", rx_bytes_total=tick * 10**10, tx_bytes_total=tick * 10**10)

    v = verdict("software-bound", busy_loopback)
    assert (v.state, v.cause) == ("starved", "unknown")
    assert v.evidence.get("network_link") != "lo"


def _cpu_pressure(share: float, busy_share: float) -> Edit:
    """PSI cpu "some" growing at ``share`` of the time while the cores are ``busy_share`` busy."""

    def edit(report: pb.NodeReport, tick: int) -> None:
        host = report.host
        host.pressure_cpu.some_total_microseconds = round(tick * share * 1e6)
        total = tick * 64.0  # CPU-seconds of 64 cores
        host.cpu_total.user_seconds_total = total * busy_share
        host.cpu_total.idle_seconds_total = total * (1 - busy_share)
        for name in ("nice", "system", "irq", "softirq", "steal", "iowait"):
            setattr(host.cpu_total, f"{name}_seconds_total", 0.0)
        del host.cpus[:]  # no per-core figures: no saturated single cores either

    return edit


def test_cpu_pressure_alone_on_mostly_idle_cores_is_not_the_cpu() -> None:
    # The lab's storage-bound run: CPUs 22% busy, PSI cpu some 0.21 (threads woken together by
    # I/O completions queue for a moment): cpu pressure alone must not name the cpu.
    v = verdict("software-bound", _cpu_pressure(0.21, 0.22))
    assert (v.state, v.cause) == ("starved", "unknown")


def test_cpu_pressure_on_busy_cores_is_the_cpu() -> None:
    v = verdict("software-bound", _cpu_pressure(0.4, 0.8))
    assert (v.state, v.cause) == ("starved", "cpu")
    assert v.evidence["cpu_pattern"] == "node-saturated"


def _nvlink_times(factor: float) -> Edit:
    """NVLink counters growing ``factor`` times faster than the GPU's links can carry."""
    capacity: dict[int, float] = {}

    def edit(report: pb.NodeReport, tick: int) -> None:
        if report.HasField("info"):
            for g in report.info.gpu.gpus:
                capacity[g.index] = g.nvlink_count * g.nvlink_speed_bytes_per_second
        for g in report.gpus:
            total = int(tick * factor * capacity[g.index])
            del g.nvlinks[:]
            g.nvlink_rx_bytes_total = g.nvlink_tx_bytes_total = total

    return edit


def test_nvlink_counters_faster_than_the_links_are_flagged_and_decide_nothing() -> None:
    v = verdict("software-bound", _nvlink_times(51.0))
    assert (v.state, v.cause) == ("starved", "unknown")
    assert v.interconnect_ratio is not None and v.interconnect_ratio < 0.01  # the PCIe peer traffic only
    assert all(g.evidence.get("bad_reading") == "nvlink" for g in v.gpus)


def test_nvlink_traffic_within_the_links_still_counts() -> None:
    # 80% of the links' capacity both ways: real collective traffic, waited on.
    v = verdict("software-bound", _nvlink_times(0.8))
    assert v.interconnect_ratio is not None and v.interconnect_ratio > 0.05
    assert all("bad_reading" not in g.evidence for g in v.gpus)


def test_a_nic_receiving_faster_than_its_link_is_a_bad_reading_not_the_network() -> None:
    speed: dict[str, float] = {}

    def overrun(report: pb.NodeReport, tick: int) -> None:
        if report.HasField("info"):
            speed.update({n.name: n.speed_bytes_per_second for n in report.info.nics if n.speed_bytes_per_second})
        for nic in report.nics:
            if nic.name in speed:
                nic.rx_bytes_total = round(tick * 51 * speed[nic.name])

    v = verdict("software-bound", overrun)
    assert speed, "the simulated node reports its NIC's speed"
    assert (v.state, v.cause) == ("starved", "unknown")
    assert v.evidence["network_bad_reading"] in speed


def _eth0_receiving(rx_bytes_per_second: float, *, veth: bool = True, burst_every: int = 0) -> Edit:
    """eth0 (a veth with the kernel's nominal 10 Gb/s when ``veth``) receiving at a flat rate, 1%
    of it sent back; with ``burst_every`` the same bytes arrive in bursts every that many seconds."""

    def edit(report: pb.NodeReport, tick: int) -> None:
        for info in report.info.nics:
            if info.name == "eth0" and veth:
                info.virtual, info.kind, info.speed_bytes_per_second = True, "veth", 1.25e9
        arrived = tick if not burst_every else tick - tick % burst_every
        for nic in report.nics:
            if nic.name == "eth0":
                nic.rx_bytes_total = round(arrived * rx_bytes_per_second)
                nic.tx_bytes_total = round(tick * rx_bytes_per_second / 100)

    return edit


def _both(*edits: Edit) -> Edit:
    def edit(report: pb.NodeReport, tick: int) -> None:
        for e in edits:
            e(report, tick)

    return edit


def test_a_flat_receive_plateau_on_a_virtual_link_is_the_network() -> None:
    # The lab's network-unrated run: a veth saying 10 Gb/s shaped to 80 Mb/s, the loader waiting
    # on it; 0.8% of the nominal speed, flat step after step.
    v = verdict("software-bound", _eth0_receiving(10e6))
    assert (v.state, v.cause) == ("starved", "network")
    assert v.evidence["network_pattern"] == "plateau"
    assert v.evidence["network_plateau_link"] == "eth0"
    assert abs(float(v.evidence["network_plateau_rx_bytes_per_second"]) - 10e6) < 0.05 * 10e6


def test_a_plateau_outweighs_cpu_pressure_on_half_idle_cores() -> None:
    # As recorded: other work kept the CPUs 81% busy with PSI cpu 0.20 while the link was the cap.
    v = verdict("software-bound", _both(_eth0_receiving(10e6), _cpu_pressure(0.2, 0.81)))
    assert (v.state, v.cause) == ("starved", "network")


def test_steady_traffic_with_saturated_cpus_stays_the_cpu() -> None:
    # A CPU-bound loader downloads at the pace it decodes: flat too, but the cores explain the wait.
    v = verdict("software-bound", _both(_eth0_receiving(10e6), _cpu_pressure(0.4, 0.95)))
    assert (v.state, v.cause) == ("starved", "cpu")
    assert v.evidence["cpu_pattern"] == "node-saturated"


def test_idle_noise_and_bursty_traffic_never_make_a_plateau() -> None:
    quiet = verdict("software-bound", _eth0_receiving(20e3))  # below the floor: a NIC's chatter
    assert (quiet.state, quiet.cause) == ("starved", "unknown")
    bursty = verdict("software-bound", _eth0_receiving(10e6, burst_every=7))  # not flat
    assert (bursty.state, bursty.cause) == ("starved", "unknown")


def test_a_plateau_far_below_a_physical_ports_rate_is_not_taken_for_the_network() -> None:
    # On a physical port a steady rate far below its negotiated speed is as likely a software-bound
    # loader's own pace as a store's cap (the simulator's software-bound reads RDMA that way).
    v = verdict("software-bound", _eth0_receiving(10e6, veth=False))
    assert (v.state, v.cause) == ("starved", "unknown")
