"""Every value the reference fixtures' README lists comes out of the readers exactly.

The expected figures are node_exporter's and prometheus/procfs's own (see
../shared/fixtures/README.md), not ours."""

from __future__ import annotations

import pytest

from nodeagent.agent.sources import Roots
from nodeagent.agent.views.snapshots import snapshot
from nodeagent.v1 import nodeagent_pb2 as pb


def _port(report: pb.NodeReport, device: str, port: int) -> pb.RdmaPortSample:
    return next(p for p in report.rdma_ports if p.device == device and p.port == port)


def _disk(report: pb.NodeReport, name: str) -> pb.DiskSample:
    return next(d for d in report.disks if d.name == name)


@pytest.fixture
def ne_report(make_sampler, node_exporter_roots: Roots) -> tuple[pb.NodeReport, pb.NodeInfo]:
    sampler = make_sampler(node_exporter_roots)
    report = sampler.tick()
    return report, sampler.info


def test_every_collector_succeeds_on_the_node_exporter_tree(ne_report) -> None:
    report, _ = ne_report
    assert {c.name: c.success for c in report.collectors} == {
        "cpu": True, "diskstats": True, "infiniband": True, "meminfo": True, "netdev": True, "netstat": True,
        "pressure": True,
    }  # fmt: skip
    # The tree has no /proc/net/snmp: netstat reads nothing, and that is no failure.
    assert not report.host.HasField("tcp_out_segments_total")


def test_infiniband_data_counters_are_words_times_four(ne_report) -> None:
    report, _ = ne_report
    mlx4 = _port(report, "mlx4_0", 1)
    assert mlx4.rx_bytes_total == 18527668 == 4631917 * 4
    assert mlx4.tx_bytes_total == 14933760
    assert mlx4.counters["port_rcv_data"] == 4631917


def test_infiniband_rates_and_states(ne_report) -> None:
    report, info = ne_report
    rates = {(p.device, p.port): p.rate_bytes_per_second for p in info.rdma_ports}
    assert rates[("mlx4_0", 1)] == 5e9  # "40 Gb/sec (4X QDR)"
    assert rates[("mlx4_0", 2)] == 5e9
    assert rates[("i40iw0", 1)] == 1.25e9
    for port in report.rdma_ports:
        assert (port.state_id, port.state) == (4, "ACTIVE")
        assert (port.phys_state_id, port.phys_state) == (5, "LinkUp")


def test_iwarp_without_pma_has_no_counter_values(ne_report) -> None:
    report, _ = ne_report
    i40iw = _port(report, "i40iw0", 1)
    assert not i40iw.HasField("rx_bytes_total")
    assert not i40iw.HasField("tx_bytes_total")
    assert dict(i40iw.counters) == {}
    assert i40iw.rate_bytes_per_second == 1.25e9


def test_saturated_32_bit_counter_is_flagged_not_wrapped(ne_report) -> None:
    report, _ = ne_report
    mlx4 = _port(report, "mlx4_0", 1)
    assert mlx4.counters["port_xmit_wait"] == 4294967295
    assert "port_xmit_wait" in mlx4.saturated_counters
    assert "port_rcv_data" not in mlx4.saturated_counters


def test_disks_whole_disks_only_with_exact_counters(ne_report) -> None:
    report, _ = ne_report
    names = {d.name for d in report.disks}
    assert {"nvme0n1", "sda", "sdb", "sdc", "vda", "dm-0", "mmcblk0"} <= names
    assert not names & {"nvme0n1p1", "nvme0n1p2", "sda1", "sda4", "mmcblk0p1", "vda1", "sdb1", "sdc1"}
    assert not any(n.startswith(("ram", "loop", "fd")) for n in names)
    nvme = _disk(report, "nvme0n1")
    assert nvme.reads_completed_total == 47114
    assert nvme.read_bytes_total == 2377714176 == 4643973 * 512
    assert nvme.io_time_milliseconds_total / 1000 == pytest.approx(222.766)
    assert _disk(report, "sda").reads_completed_total == 25354637


def test_diskstats_field_counts_14_18_20(ne_report) -> None:
    report, _ = ne_report
    sda, sdb, sdc = _disk(report, "sda"), _disk(report, "sdb"), _disk(report, "sdc")
    assert not sda.HasField("discards_completed_total")  # 14 fields
    assert sdb.discards_completed_total == 68851  # 18 fields
    assert sdb.discarded_bytes_total == 1925173784 * 512
    assert not sdb.HasField("flushes_completed_total")
    assert sdc.flushes_completed_total == 1555  # 20 fields
    assert sdc.flush_time_milliseconds_total == 1944


def test_nic_speed_from_sysfs(ne_report) -> None:
    _, info = ne_report
    nics = {n.name: n for n in info.nics}
    assert nics["eth0"].speed_bytes_per_second == 1.25e8  # `speed` 1000 Mb/s
    assert nics["eth0"].speed_source == "kernel"
    assert nics["eth0"].kind == "physical"
    assert not nics["eth0"].virtual


def test_bond_members_are_linked_to_their_bond(ne_report) -> None:
    _, info = ne_report
    nics = {n.name: n for n in info.nics}
    assert nics["bond0"].kind == "bond"
    assert list(nics["int"].bond_members) == ["eth5", "eth1"]
    assert list(nics["dmz"].bond_members) == ["eth0", "eth4"]
    assert nics["eth0"].bond_master == "dmz"


def test_pressure_totals_in_microseconds(ne_report) -> None:
    report, _ = ne_report
    io = report.host.pressure_io
    assert io.some_total_microseconds / 1e6 == pytest.approx(159.886802)
    assert io.full_total_microseconds == 159229614
    assert io.some_avg10_ratio == pytest.approx(0.0018)
    assert report.host.pressure_cpu.some_total_microseconds == 14036781


def test_cpu_and_memory(ne_report) -> None:
    report, info = ne_report
    assert report.host.cpu_total.user_seconds_total == pytest.approx(301854 / 100)
    assert report.host.cpu_total.iowait_seconds_total == pytest.approx(3552 / 100)
    assert len(report.host.cpus) == info.cpu_count > 0
    assert report.host.load1 == pytest.approx(0.21)
    assert info.memory_total_bytes == report.host.memory_total_bytes > 0


def test_procfs_tree_net_dev_counters(make_sampler, procfs_roots: Roots) -> None:
    report = make_sampler(procfs_roots).tick()
    eth0 = next(n for n in report.nics if n.name == "eth0")
    assert (eth0.rx_bytes_total, eth0.rx_packets_total) == (874354587, 1036395)
    assert (eth0.tx_bytes_total, eth0.tx_packets_total) == (563352563, 732147)


def test_procfs_tree_virtual_interfaces_are_marked(make_sampler, procfs_roots: Roots) -> None:
    sampler = make_sampler(procfs_roots)
    sampler.tick()
    kinds = {n.name: (n.kind, n.virtual) for n in sampler.info.nics}
    assert kinds["lo"] == ("loopback", True)
    assert kinds["vethf345468"] == ("veth", True)
    assert kinds["docker0"] == ("bridge", True)
    assert kinds["eth0"][1] is False


def test_procfs_tree_mlx5_counters(make_sampler, procfs_roots: Roots) -> None:
    sampler = make_sampler(procfs_roots)
    report = sampler.tick()
    mlx5 = _port(report, "mlx5_0", 1)
    assert mlx5.counters["port_rcv_data"] == 18126345378
    assert mlx5.rx_bytes_total == 72505381512
    assert mlx5.tx_bytes_total == 11523046035392
    assert mlx5.hw_counters["local_ack_timeout_err"] == 131
    assert mlx5.hw_counters["lifespan"] == 10
    rate = next(p for p in sampler.info.rdma_ports if p.device == "mlx5_0").rate_bytes_per_second
    assert rate == 3125000000  # "25 Gb/sec (1X EDR)"


def test_snapshot_of_first_sample_has_counters_but_no_rates(make_sampler, procfs_roots: Roots) -> None:
    sampler = make_sampler(procfs_roots)
    snap = snapshot(None, sampler.tick(), sampler.info)
    eth0 = next(n for n in snap["nics"] if n["name"] == "eth0")
    assert eth0["rx_bytes_total"] == 874354587
    assert eth0["rx_bytes_per_second"] is None
