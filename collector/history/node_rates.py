"""The node row's rates between two reports of a node: NIC, RDMA and disk throughput summed over
the devices both reports name, and the CPU's busy and iowait shares.

A counter that went down is a reset: that interval gives no rate for its column (for a sum,
none for the whole sum). A column with no device in both reports is left out, and the CPU's
shares need ``cpu_total`` in both.
"""

from __future__ import annotations

from nodeagent.core.quantities.rates import CPU_MODES, cpu_time_shares, sum_rate
from nodeagent.v1 import nodeagent_pb2 as pb


def node_rates(before: pb.NodeReport, after: pb.NodeReport, seconds: float) -> dict[str, float | None]:
    """The node row's rate columns between two reports ``seconds`` apart; None over a reset."""
    nics = {n.name: n for n in before.nics}
    nic_pairs = [(nics[n.name], n) for n in after.nics if n.name in nics]
    ports = {(p.device, p.port): p for p in before.rdma_ports}
    port_pairs = [(ports[(p.device, p.port)], p) for p in after.rdma_ports if (p.device, p.port) in ports]
    disks = {d.name: d for d in before.disks}
    disk_pairs = [(disks[d.name], d) for d in after.disks if d.name in disks]
    out: dict[str, float | None] = {
        "nic_rx_bytes_per_second": sum_rate(((a.rx_bytes_total, b.rx_bytes_total) for a, b in nic_pairs), seconds),
        "nic_tx_bytes_per_second": sum_rate(((a.tx_bytes_total, b.tx_bytes_total) for a, b in nic_pairs), seconds),
        "disk_read_iops": sum_rate(
            ((a.reads_completed_total, b.reads_completed_total) for a, b in disk_pairs), seconds
        ),
        "disk_write_iops": sum_rate(
            ((a.writes_completed_total, b.writes_completed_total) for a, b in disk_pairs), seconds
        ),
        "disk_read_bytes_per_second": sum_rate(
            ((a.read_bytes_total, b.read_bytes_total) for a, b in disk_pairs), seconds
        ),
        "disk_written_bytes_per_second": sum_rate(
            ((a.written_bytes_total, b.written_bytes_total) for a, b in disk_pairs), seconds
        ),
    }
    if port_pairs:
        out["rdma_rx_bytes_per_second"] = sum_rate(
            ((a.rx_bytes_total, b.rx_bytes_total) for a, b in port_pairs), seconds
        )
        out["rdma_tx_bytes_per_second"] = sum_rate(
            ((a.tx_bytes_total, b.tx_bytes_total) for a, b in port_pairs), seconds
        )
    if not nic_pairs:
        out.pop("nic_rx_bytes_per_second"), out.pop("nic_tx_bytes_per_second")
    if not disk_pairs:
        for name in (
            "disk_read_iops",
            "disk_write_iops",
            "disk_read_bytes_per_second",
            "disk_written_bytes_per_second",
        ):
            out.pop(name)
    if before.host.HasField("cpu_total") and after.host.HasField("cpu_total"):
        # The same shares as `sample` shows (core/quantities/rates.py).
        shares = cpu_time_shares(_cpu_seconds(before.host.cpu_total), _cpu_seconds(after.host.cpu_total))
        if shares:
            out["cpu_busy_ratio"], out["cpu_iowait_ratio"] = shares["busy"], shares["iowait"]
    return out


def _cpu_seconds(times: pb.CpuTimes) -> dict[str, float]:
    return {mode: getattr(times, f"{mode}_seconds_total") for mode in CPU_MODES}
