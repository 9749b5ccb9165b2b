"""A snapshot of the node for people and scripts: the report's counters and topology, and
once two reports are at hand, the rates between them.

Rates come from ``nodeagent.core.quantities.rates``: a counter that went down gives no rate for that interval.
Every key carries its unit (``_bytes_per_second``, ``_ratio``, ``_seconds``).
"""

from __future__ import annotations

from typing import Any

from nodeagent.agent.gpu.view import gpu_rows
from nodeagent.agent.views.plain_json import to_plain
from nodeagent.core.quantities.rates import CPU_MODES, cpu_time_shares, delta, disk_busy_ratio, rate, ratio
from nodeagent.v1 import nodeagent_pb2 as pb

Snapshot = dict[str, Any]

_NIC_RATES = (
    ("rx_bytes_total", "rx_bytes_per_second"),
    ("tx_bytes_total", "tx_bytes_per_second"),
    ("rx_packets_total", "rx_packets_per_second"),
    ("tx_packets_total", "tx_packets_per_second"),
    ("rx_errors_total", "rx_errors_per_second"),
    ("tx_errors_total", "tx_errors_per_second"),
    ("rx_dropped_total", "rx_dropped_per_second"),
    ("tx_dropped_total", "tx_dropped_per_second"),
)
_DISK_RATES = (
    ("reads_completed_total", "reads_per_second"),
    ("writes_completed_total", "writes_per_second"),
    ("read_bytes_total", "read_bytes_per_second"),
    ("written_bytes_total", "write_bytes_per_second"),
)
# Data counters and the raw counters they come from (a saturated source means no rate).
_RDMA_RATES = (
    ("rx_bytes_total", "rx_bytes_per_second", ("port_rcv_data", "port_rcv_data_64")),
    ("tx_bytes_total", "tx_bytes_per_second", ("port_xmit_data", "port_xmit_data_64")),
    ("rx_packets_total", "rx_packets_per_second", ("port_rcv_packets", "port_rcv_packets_64")),
    ("tx_packets_total", "tx_packets_per_second", ("port_xmit_packets", "port_xmit_packets_64")),
)


def snapshot(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo) -> Snapshot:
    """Everything ``nodeagent sample`` shows for ``cur``; rates are None without ``prev``."""
    seconds = cur.time_unix_seconds - prev.time_unix_seconds if prev is not None else 0.0
    out: Snapshot = {
        "node_id": cur.node_id,
        "epoch": cur.epoch,
        "seq": cur.seq,
        "time_unix_seconds": cur.time_unix_seconds,
        "interval_seconds": seconds if prev is not None else None,
        "collectors": [to_plain(c) for c in cur.collectors],
        "nics": _nics(prev, cur, info, seconds),
        "rdma_ports": _rdma(prev, cur, info, seconds),
        "disks": _disks(prev, cur, info, seconds),
        "host": _host(prev, cur, info, seconds),
        "events": [to_plain(e) for e in cur.events],
    }
    if "gpu" in {c.name for c in cur.collectors}:
        out["gpus"] = gpu_rows(prev, cur, info)
        out["gpu_unavailable_reason"] = info.gpu.unavailable_reason or None
        out["jobs"] = [to_plain(job) for job in cur.jobs]
    return out


def _nics(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo, seconds: float) -> list[Snapshot]:
    topology = {n.name: n for n in info.nics}
    before = {n.name: n for n in prev.nics} if prev is not None else {}
    rows = []
    for nic in cur.nics:
        row: Snapshot = {"name": nic.name}
        meta = topology.get(nic.name)
        if meta is not None:
            row.update(kind=meta.kind, virtual=meta.virtual, bond_master=meta.bond_master or None)
            if meta.speed_source:
                row["speed_source"] = meta.speed_source
        row.update(to_plain(nic))
        # Not read for virtual interfaces (hundreds of veths): unknown, not an empty state.
        row["operstate"] = nic.operstate or None
        speed = nic.speed_bytes_per_second if nic.HasField("speed_bytes_per_second") else None
        if speed is None and meta is not None and meta.HasField("speed_bytes_per_second"):
            speed = meta.speed_bytes_per_second
        row["speed_bytes_per_second"] = speed
        old = before.get(nic.name)
        for counter, key in _NIC_RATES:
            row[key] = rate(getattr(old, counter), getattr(nic, counter), seconds) if old is not None else None
        row["rx_link_ratio"] = ratio(row["rx_bytes_per_second"], speed)
        row["tx_link_ratio"] = ratio(row["tx_bytes_per_second"], speed)
        if old is not None:
            row["carrier_changes_in_interval"] = (
                delta(old.carrier_changes_total, nic.carrier_changes_total)
                if old.HasField("carrier_changes_total") and nic.HasField("carrier_changes_total")
                else None
            )
        rows.append(row)
    return rows


def _rdma(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo, seconds: float) -> list[Snapshot]:
    topology = {(p.device, p.port): p for p in info.rdma_ports}
    before = {(p.device, p.port): p for p in prev.rdma_ports} if prev is not None else {}
    rows = []
    for port in cur.rdma_ports:
        key = (port.device, port.port)
        row: Snapshot = {}
        meta = topology.get(key)
        if meta is not None:
            row.update(link_layer=meta.link_layer, rate_text=meta.rate_text, hca_type=meta.hca_type)
        row.update(to_plain(port))
        old = before.get(key)
        saturated = set(port.saturated_counters)
        for counter, out_key, (legacy, wide) in _RDMA_RATES:
            value = rate(_opt(old, counter), _opt(port, counter), seconds) if old is not None else None
            # Only the counter the value came from matters: the 64-bit one where it exists
            # (the legacy 32-bit one beside it saturates within seconds on a busy link).
            source = wide if wide in port.counters else legacy
            row[out_key] = None if source in saturated else value
        link = port.rate_bytes_per_second if port.HasField("rate_bytes_per_second") else None
        row["rx_link_ratio"] = ratio(row["rx_bytes_per_second"], link)
        row["tx_link_ratio"] = ratio(row["tx_bytes_per_second"], link)
        rows.append(row)
    return rows


def _disks(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo, seconds: float) -> list[Snapshot]:
    topology = {d.name: d for d in info.disks}
    before = {d.name: d for d in prev.disks} if prev is not None else {}
    rows = []
    for disk in cur.disks:
        row: Snapshot = {}
        meta = topology.get(disk.name)
        if meta is not None:
            row.update({k: v for k, v in to_plain(meta).items() if k != "name"})
        row.update(to_plain(disk))
        old = before.get(disk.name)
        for counter, key in _DISK_RATES:
            row[key] = rate(getattr(old, counter), getattr(disk, counter), seconds) if old is not None else None
        reads = delta(old.reads_completed_total, disk.reads_completed_total) if old else None
        writes = delta(old.writes_completed_total, disk.writes_completed_total) if old else None
        read_ms = delta(old.read_time_milliseconds_total, disk.read_time_milliseconds_total) if old else None
        write_ms = delta(old.write_time_milliseconds_total, disk.write_time_milliseconds_total) if old else None
        row["read_latency_seconds"] = _per_op(read_ms, reads)
        row["write_latency_seconds"] = _per_op(write_ms, writes)
        row["utilization_ratio"] = (
            disk_busy_ratio(old.io_time_milliseconds_total, disk.io_time_milliseconds_total, seconds) if old else None
        )
        queue = (
            rate(old.io_weighted_time_milliseconds_total, disk.io_weighted_time_milliseconds_total, seconds)
            if old
            else None
        )
        row["queue_depth"] = queue / 1000 if queue is not None else None
        rows.append(row)
    return rows


def _host(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo, seconds: float) -> Snapshot:
    host = cur.host
    out: Snapshot = {"cpu_count": info.cpu_count or len(host.cpus)}
    out.update({k: v for k, v in to_plain(host).items() if not k.startswith(("cpu", "pressure"))})
    old = prev.host if prev is not None else None
    total = (
        _cpu_shares(old.cpu_total if old is not None else None, host.cpu_total) if host.HasField("cpu_total") else {}
    )
    out["cpu_busy_ratio"] = total.get("busy")
    out["cpu_iowait_ratio"] = total.get("iowait")
    before = {c.cpu: c for c in old.cpus} if old is not None else {}
    cores = []
    for core in host.cpus:
        shares = _cpu_shares(before.get(core.cpu), core)
        cores.append({"cpu": core.cpu, "busy_ratio": shares.get("busy"), "iowait_ratio": shares.get("iowait")})
    out["cpus"] = cores
    busy = [c["busy_ratio"] for c in cores if c["busy_ratio"] is not None]
    out["cpu_max_core_busy_ratio"] = max(busy) if busy else None
    pressure: Snapshot = {}
    for resource in ("cpu", "io", "memory"):
        field = f"pressure_{resource}"
        if not host.HasField(field):
            continue
        now = getattr(host, field)
        entry = to_plain(now)
        then = getattr(old, field) if old is not None and old.HasField(field) else None
        entry["some_stalled_ratio"] = _stall(then, now, "some", seconds)
        entry["full_stalled_ratio"] = _stall(then, now, "full", seconds)
        pressure[resource] = entry
    out["pressure"] = pressure
    return out


def _cpu_shares(old: pb.CpuTimes | None, new: pb.CpuTimes) -> dict[str, float]:
    if old is None:
        return {}
    return cpu_time_shares(_cpu_seconds(old), _cpu_seconds(new))


def _cpu_seconds(times: pb.CpuTimes) -> dict[str, float]:
    return {mode: getattr(times, f"{mode}_seconds_total") for mode in CPU_MODES}


def _stall(old: pb.Pressure | None, new: pb.Pressure, kind: str, seconds: float) -> float | None:
    """Share of the interval in which some (or all) tasks stalled on the resource."""
    field = f"{kind}_total_microseconds"
    if old is None:
        return None
    if kind == "full" and not (old.HasField("full_total_microseconds") and new.HasField("full_total_microseconds")):
        return None
    value = rate(getattr(old, field), getattr(new, field), seconds)
    return None if value is None else min(1.0, value / 1e6)


def _per_op(milliseconds: int | None, ops: int | None) -> float | None:
    if milliseconds is None or not ops:
        return None
    return milliseconds / ops / 1000


def _opt(msg: Any, field: str) -> int | None:
    return getattr(msg, field) if msg is not None and msg.HasField(field) else None
