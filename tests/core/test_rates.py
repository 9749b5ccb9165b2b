"""Counters to rates: resets give no rate, saturation is flagged, never 2^64-sized rates."""

from __future__ import annotations

from pathlib import Path

from nodeagent.agent.sources import Roots
from nodeagent.agent.views.snapshots import snapshot
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node_evidence import NodeEvidenceTracker
from nodeagent.core.quantities.rates import (
    MAX_U32,
    delta,
    disk_busy_ratio,
    increase_across_reset,
    increases,
    is_saturated,
    rate,
    sum_rate,
)
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.trees import NET_DEV_HEADER, rewrite, write_tree

NET_DEV = (
    NET_DEV_HEADER
    + """  eth0: {rx} 100 0 0 0 0 0 0 {tx} 50 0 0 0 0 0 0
"""
)
DISKSTATS = "   8       0 sda {reads} 0 {sectors} 100 10 0 80 5 0 {ticks} 105\n"


def test_delta_and_rate_refuse_a_counter_that_went_down() -> None:
    assert delta(100, 150) == 50
    assert delta(150, 100) is None
    assert rate(100, 300, 2.0) == 100.0
    assert rate(2**64 - 10, 5, 1.0) is None
    assert rate(5, 10, 0.0) is None
    assert rate(None, 10, 1.0) is None


def test_disk_busy_ratio_is_the_busy_share_of_the_interval() -> None:
    assert disk_busy_ratio(1_000, 1_250, 1.0) == 0.25
    assert disk_busy_ratio(1_000, 2_000, 4.0) == 0.25
    assert disk_busy_ratio(1_000, 2_010, 1.0) == 1.0  # a jiffy past the interval: saturated, not more
    assert disk_busy_ratio(2_000, 1_000, 1.0) is None  # reset
    assert disk_busy_ratio(None, 1_000, 1.0) is None
    assert disk_busy_ratio(1_000, 1_250, 0.0) is None


def test_the_sample_view_and_the_detector_read_the_same_busy_ratio() -> None:
    def report(seq: int, t: float, io_ms: int) -> pb.NodeReport:
        r = pb.NodeReport(node_id="n", epoch=1, seq=seq, time_unix_seconds=t)
        r.disks.add(
            name="nvme0n1",
            reads_completed_total=100 * seq,
            read_bytes_total=4096 * seq,
            io_time_milliseconds_total=io_ms,
        )
        return r

    first, second = report(1, 100.0, 5_000), report(2, 102.0, 6_500)
    tracker = NodeEvidenceTracker(DetectorConfig())
    tracker.step(first, assigned_gpus=1)
    evidence = tracker.step(second, assigned_gpus=1)
    shown = snapshot(first, second, pb.NodeInfo(node_id="n"))["disks"][0]["utilization_ratio"]
    assert shown == evidence.values["storage_busy_ratio"] == disk_busy_ratio(5_000, 6_500, 2.0) == 0.75


def test_a_sum_of_counters_has_no_rate_when_any_of_them_was_reset() -> None:
    assert sum_rate([(100, 300), (1000, 1200)], 2.0) == 200.0
    assert sum_rate([(100, 300), (1000, 5)], 2.0) is None  # one NIC's driver reloaded
    assert sum_rate([(2**64 - 10, 5)], 1.0) is None
    assert sum_rate([], 5.0) == 0.0
    assert sum_rate([(100, 300)], 0.0) is None
    # Summed as floats, one pair at a time (what the history's rates have always been): past 2^53
    # a float drops the ones an exact integer sum would keep.
    assert sum_rate(iter([(0, 2**53), (0, 1), (0, 1)]), 1.0) == 2.0**53


def test_counters_read_together_have_no_increases_when_any_went_down() -> None:
    before = {"user": 10.0, "idle": 100.0, "iowait": 5.0}
    assert increases(before, {"user": 12.0, "idle": 104.0, "iowait": 5.0}) == {"user": 2.0, "idle": 4.0, "iowait": 0.0}
    assert increases(before, {"user": 12.0, "idle": 104.0, "iowait": 4.5}) is None  # iowait dipped: a reset
    assert increases({}, {}) == {}


def test_a_count_that_restarts_from_zero_counts_its_new_value_across_the_reset() -> None:
    assert increase_across_reset(30.0, 42.5) == 12.5
    assert increase_across_reset(30.0, 30.0) == 0.0
    # A new detector replaced the old one: all it counted since is new.
    assert increase_across_reset(30.0, 4.0) == 4.0
    assert delta(30, 4) is None  # unlike a counter's reset, which gives nothing


def test_saturation_of_fixed_width_counters() -> None:
    assert is_saturated("port_xmit_wait", MAX_U32)
    assert is_saturated("symbol_error", 65535)
    assert is_saturated("link_downed", 255)
    assert not is_saturated("link_downed", 254)
    assert not is_saturated("port_rcv_data", MAX_U32 - 1)


def test_reset_between_samples_gives_no_rate_and_no_error(tmp_path: Path, make_sampler) -> None:
    root = write_tree(
        tmp_path,
        {
            "proc/net/dev": NET_DEV.format(rx=10_000_000, tx=5_000_000),
            "proc/diskstats": DISKSTATS.format(reads=1000, sectors=8000, ticks=500),
        },
    )
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["netdev", "diskstats"])
    first = sampler.tick()
    rewrite(root / "proc/net/dev", NET_DEV.format(rx=12_000_000, tx=6_000_000))
    rewrite(root / "proc/diskstats", DISKSTATS.format(reads=1500, sectors=12000, ticks=750))
    second = sampler.tick()
    snap = snapshot(first, second, sampler.info)
    assert snap["nics"][0]["rx_bytes_per_second"] == 2_000_000
    assert snap["disks"][0]["reads_per_second"] == 500
    assert snap["disks"][0]["read_bytes_per_second"] == 4000 * 512
    assert snap["disks"][0]["utilization_ratio"] == 0.25

    # Driver reload: every counter starts again from small values.
    rewrite(root / "proc/net/dev", NET_DEV.format(rx=1_000, tx=500))
    rewrite(root / "proc/diskstats", DISKSTATS.format(reads=10, sectors=80, ticks=5))
    third = sampler.tick()
    snap = snapshot(second, third, sampler.info)
    assert all(c["success"] for c in snap["collectors"])
    nic, disk = snap["nics"][0], snap["disks"][0]
    assert nic["rx_bytes_total"] == 1_000
    assert nic["rx_bytes_per_second"] is None
    assert nic["tx_bytes_per_second"] is None
    assert disk["reads_per_second"] is None
    assert disk["read_bytes_per_second"] is None
    assert disk["utilization_ratio"] is None

    # The interval after the reset has rates again.
    rewrite(root / "proc/net/dev", NET_DEV.format(rx=3_000, tx=700))
    fourth = sampler.tick()
    assert snapshot(third, fourth, sampler.info)["nics"][0]["rx_bytes_per_second"] == 2_000


def test_saturated_rdma_data_counter_gives_no_rate(tmp_path: Path, make_sampler) -> None:
    port = "sys/class/infiniband/mlx4_0/ports/1"
    root = write_tree(
        tmp_path,
        {
            f"{port}/state": "4: ACTIVE\n",
            f"{port}/phys_state": "5: LinkUp\n",
            f"{port}/rate": "40 Gb/sec (4X QDR)\n",
            f"{port}/counters/port_rcv_data": f"{MAX_U32 - 100}\n",
            f"{port}/counters/port_xmit_data": "1000\n",
        },
    )
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["infiniband"])
    first = sampler.tick()
    rewrite(root / port / "counters/port_rcv_data", f"{MAX_U32}\n")
    rewrite(root / port / "counters/port_xmit_data", "1250\n")
    second = sampler.tick()
    row = snapshot(first, second, sampler.info)["rdma_ports"][0]
    assert row["saturated_counters"] == ["port_rcv_data"]
    assert row["rx_bytes_per_second"] is None
    assert row["tx_bytes_per_second"] == 1000  # 250 words x 4 bytes in 1 s
    assert row["tx_link_ratio"] == 1000 / 5e9


def test_legacy_counter_saturating_beside_a_64_bit_one_keeps_the_rate(tmp_path: Path, make_sampler) -> None:
    port = "sys/class/infiniband/mlx5_0/ports/1"
    root = write_tree(
        tmp_path,
        {
            f"{port}/state": "4: ACTIVE\n",
            f"{port}/rate": "400 Gb/sec (4X NDR)\n",
            f"{port}/counters/port_rcv_data": f"{MAX_U32}\n",  # pinned, as on a busy link
            f"{port}/counters_ext/port_rcv_data_64": "1000000\n",
        },
    )
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["infiniband"])
    first = sampler.tick()
    rewrite(root / port / "counters_ext/port_rcv_data_64", "1250000\n")
    second = sampler.tick()
    row = snapshot(first, second, sampler.info)["rdma_ports"][0]
    assert "port_rcv_data" in row["saturated_counters"]
    assert row["rx_bytes_total"] == 1250000 * 4
    assert row["rx_bytes_per_second"] == 250000 * 4
    assert row["rx_link_ratio"] == 1e6 / 50e9


def test_iowait_going_backwards_is_not_a_reset(tmp_path: Path, make_sampler) -> None:
    stat = "cpu  {user} 0 100 {idle} {iowait} 0 0 0 0 0\ncpu0 {user} 0 100 {idle} {iowait} 0 0 0 0 0\n"
    root = write_tree(tmp_path, {"proc/stat": stat.format(user=1000, idle=5000, iowait=500)})
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["cpu"])
    first = sampler.tick()
    # iowait dips by a tick (the kernel says it can); user time moves on.
    rewrite(root / "proc/stat", stat.format(user=1100, idle=5100, iowait=499))
    second = sampler.tick()
    host = snapshot(first, second, sampler.info)["host"]
    assert host["cpu_busy_ratio"] == 0.5
    assert host["cpu_iowait_ratio"] == 0.0
    assert host["cpus"][0]["busy_ratio"] == 0.5
    # Busy time going backwards is a reset: no figure.
    rewrite(root / "proc/stat", stat.format(user=10, idle=5200, iowait=499))
    assert snapshot(second, sampler.tick(), sampler.info)["host"]["cpu_busy_ratio"] is None
