"""GPUs as a person or a script reads them: one JSON-friendly row per GPU, and a compact table.

Rates come from the cumulative counters of two consecutive reports through ``nodeagent.core.quantities.rates`` (None
on the first report and over a reset). Where a GPU has no counter for something, the rate falls
back to GPM (measured by the GPU over the tick), then to the driver's sampled throughput; the
``*_rate_source`` keys say which one a value came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nodeagent.core.quantities import rates
from nodeagent.core.quantities.units import format_bits, pcie_bytes_per_second
from nodeagent.core.wire.clock_events import THROTTLE_REASONS
from nodeagent.core.wire.fabric import describe, fabric_problems
from nodeagent.v1 import nodeagent_pb2 as pb

Row = dict[str, Any]


def gpu_rows(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo) -> list[Row]:
    """One row per GPU of ``cur``; keys carry units (``_ratio`` 0..1, ``_bytes``, ``_bytes_per_second``)."""
    infos = {g.index: g for g in info.gpu.gpus}
    previous = {g.index: g for g in prev.gpus} if prev is not None else {}
    seconds = cur.time_unix_seconds - prev.time_unix_seconds if prev is not None else 0.0
    xids = _xids_by_gpu(cur.events)
    return [_row(g, previous.get(g.index), infos.get(g.index, pb.GpuInfo()), seconds, xids) for g in cur.gpus]


def render_gpu_table(rows: Sequence[Row], unavailable_reason: str) -> str:
    """A compact aligned table, or one line saying why there are no GPUs."""
    if unavailable_reason:
        return f"GPUs: {unavailable_reason}"
    if not rows:
        return "GPUs: none found"
    header = ("GPU", "UTIL", "SM ACT", "MEMORY", "PCIe RX/TX", "NVLink RX/TX", "LINKS", "THROTTLE", "HEALTH")
    lines = [header]
    for row in rows:
        if row["lost"]:
            lines.append((str(row["index"]), "-", "-", "-", "-", "-", "-", "-", "lost"))
            continue
        throttle = [r for r in row["clock_event_reasons"] if r in THROTTLE_REASONS]
        lines.append(
            (
                str(row["index"]),
                _percent(row["utilization_gpu_ratio"]),
                _percent(row["sm_active_ratio"]),
                _memory(row["memory_used_bytes"], row["memory_total_bytes"]),
                _link_pair(row, "pcie"),
                _link_pair(row, "nvlink"),
                f"{row['nvlinks_up']}/{row['nvlinks_expected']}" if row["nvlinks_expected"] else "-",
                ",".join(throttle) or "-",
                row["health"],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)


# ---- one row -------------------------------------------------------------------------------------


def _row(g: pb.GpuSample, p: pb.GpuSample | None, info: pb.GpuInfo, seconds: float, xids: dict[int, list[int]]) -> Row:
    pcie_capacity = _pcie_capacity(g, info)
    nvlink_capacity = info.nvlink_count * info.nvlink_speed_bytes_per_second or None
    bad: set[str] = set()
    pcie_rx, pcie_rx_source = _pcie_rate(g, p, seconds, "rx", pcie_capacity, bad)
    pcie_tx, pcie_tx_source = _pcie_rate(g, p, seconds, "tx", pcie_capacity, bad)
    links = _link_rows(g, p, seconds)
    nvlink_rx, nvlink_rx_source = _nvlink_total(g, links, "rx", nvlink_capacity, bad)
    nvlink_tx, nvlink_tx_source = _nvlink_total(g, links, "tx", nvlink_capacity, bad)
    health_reasons = _health(g, info, len([x for x in links if x["active"]]), xids.get(g.index, []))
    health_reasons += [f"{link}_bad_reading" for link in sorted(bad)]
    return {
        "index": g.index,
        "uuid": g.uuid,
        "name": info.name,
        "lost": g.lost,
        "utilization_gpu_ratio": _opt(g, "utilization_gpu_ratio"),
        "utilization_memory_ratio": _opt(g, "utilization_memory_ratio"),
        "sm_active_ratio": _opt(g, "sm_active_ratio"),
        "sm_occupancy_ratio": _opt(g, "sm_occupancy_ratio"),
        "tensor_active_ratio": _opt(g, "tensor_active_ratio"),
        # Where the computing share comes from ("gpm", "dcgm", "power_instant", ...), null until decided.
        "computing_source": g.computing_source or None,
        "computing_source_reason": g.computing_source_reason or None,
        "memory_used_bytes": _opt(g, "memory_used_bytes"),
        "memory_total_bytes": _opt(g, "memory_total_bytes") or (info.memory_total_bytes or None),
        "pcie_rx_bytes_per_second": pcie_rx,
        "pcie_tx_bytes_per_second": pcie_tx,
        "pcie_rate_source": pcie_rx_source or pcie_tx_source,
        "pcie_link_generation": _opt(g, "pcie_link_generation"),
        "pcie_link_width": _opt(g, "pcie_link_width"),
        "pcie_max_link_generation": _opt(g, "pcie_max_link_generation"),
        "pcie_max_link_width": _opt(g, "pcie_max_link_width"),
        "pcie_replay_total": _opt(g, "pcie_replay_total"),
        "nvlink_rx_bytes_per_second": nvlink_rx,
        "nvlink_tx_bytes_per_second": nvlink_tx,
        "nvlink_rate_source": nvlink_rx_source or nvlink_tx_source,
        "nvlinks_up": sum(1 for link in links if link["active"]),
        "nvlinks_expected": info.nvlink_count,
        "nvlinks": links,
        # Links whose counters ran faster than the link carries (the detector ignores them too):
        # their rates above are GPM's where the GPU has it (what /metrics shows), else unknown.
        "bad_readings": sorted(bad),
        "clock_event_reasons": list(g.clock_event_reason_names),
        "temperature_celsius": _opt(g, "temperature_celsius"),
        "power_watts": _opt(g, "power_watts"),
        "sm_clock_mhz": _opt(g, "sm_clock_mhz"),
        "ecc_uncorrected_volatile_total": _opt(g, "ecc_uncorrected_volatile_total"),
        "ecc_uncorrected_aggregate_total": _opt(g, "ecc_uncorrected_aggregate_total"),
        "remapped_rows_pending": _opt(g, "remapped_rows_pending"),
        "remapped_rows_failure": _opt(g, "remapped_rows_failure"),
        "xids": xids.get(g.index, []),
        "processes": [_process(proc) for proc in g.processes],
        "health": health_reasons[0] if health_reasons else "ok",
        "health_reasons": health_reasons,
        "fabric": describe(g.fabric) if g.HasField("fabric") else None,
        "xid_errors_total": dict(g.xid_errors_total),
        "suspect_fields": list(g.suspect_fields),
        "mig_instances": [_instance(i) for i in g.mig_instances],
    }


def _instance(i: pb.GpuSample) -> Row:
    """A MIG instance under its GPU: memory, GPM activity and processes of the instance."""
    return {
        "gpu_instance_id": i.gpu_instance_id,
        "compute_instance_id": i.compute_instance_id,
        "mig_profile": i.mig_profile,
        "uuid": i.uuid,
        "memory_used_bytes": _opt(i, "memory_used_bytes"),
        "memory_total_bytes": _opt(i, "memory_total_bytes"),
        "sm_active_ratio": _opt(i, "sm_active_ratio"),
        "sm_occupancy_ratio": _opt(i, "sm_occupancy_ratio"),
        "tensor_active_ratio": _opt(i, "tensor_active_ratio"),
        "computing_source": i.computing_source or None,
        "computing_source_reason": i.computing_source_reason or None,
        "processes": [_process(proc) for proc in i.processes],
    }


def _pcie_rate(
    g: pb.GpuSample, p: pb.GpuSample | None, seconds: float, way: str, capacity: float | None, bad: set[str]
) -> tuple[float | None, str | None]:
    counter = f"pcie_{way}_bytes_total"
    current = _opt(g, counter)
    candidates: list[tuple[float | None, str]] = []
    if current is not None:
        earlier = _opt(p, counter) if p is not None and not p.lost else None
        candidates.append((rates.rate(earlier, current, seconds), "counter"))
    candidates.append((_opt(g, f"gpm_pcie_{way}_bytes_per_second"), "gpm"))
    candidates.append((_opt(g, f"pcie_{way}_bytes_per_second"), "sampled"))
    return _plausible(candidates, capacity, "pcie", bad)


def _plausible(
    candidates: list[tuple[float | None, str]], capacity: float | None, link: str, bad: set[str]
) -> tuple[float | None, str | None]:
    """The first known rate the link can carry, with its source; one it cannot is a bad reading
    (noted in ``bad``) and the next source is asked."""
    for value, source in candidates:
        if value is None:
            continue
        if rates.within_capacity(value, capacity):
            return value, source
        bad.add(link)
    return None, None


def _pcie_capacity(g: pb.GpuSample, info: pb.GpuInfo) -> float | None:
    """The PCIe link's bytes per second one way, at its current width and generation (else its
    maximum), as the detector takes it."""
    if g.HasField("pcie_link_generation") and g.HasField("pcie_link_width"):
        current = pcie_bytes_per_second(g.pcie_link_generation, g.pcie_link_width)
        if current:
            return current
    if info.pcie_max_generation and info.pcie_max_width:
        return pcie_bytes_per_second(info.pcie_max_generation, info.pcie_max_width)
    return None


_LINK_ERRORS = ("replay_errors_total", "recovery_errors_total", "crc_flit_errors_total", "crc_data_errors_total")


def _link_rows(g: pb.GpuSample, p: pb.GpuSample | None, seconds: float) -> list[Row]:
    earlier = {link.link: link for link in p.nvlinks} if p is not None and not p.lost else {}
    rows = []
    for link in g.nvlinks:
        before = earlier.get(link.link)
        rx, tx = _opt(link, "rx_bytes_total"), _opt(link, "tx_bytes_total")
        rows.append(
            {
                "link": link.link,
                "active": link.active if link.HasField("active") else None,
                "rx_bytes_total": rx,
                "tx_bytes_total": tx,
                "rx_bytes_per_second": rates.rate(_opt(before, "rx_bytes_total"), rx, seconds),
                "tx_bytes_per_second": rates.rate(_opt(before, "tx_bytes_total"), tx, seconds),
                "errors_total": sum(_opt(link, name) or 0 for name in _LINK_ERRORS),
            }
        )
    return rows


def _nvlink_total(
    g: pb.GpuSample, links: list[Row], way: str, capacity: float | None, bad: set[str]
) -> tuple[float | None, str | None]:
    """Sum over links; None when any link with a counter has no rate (first sample, reset), or
    when the sum is more than the GPU's links carry (then GPM's, where it is known)."""
    counted = [link for link in links if link[f"{way}_bytes_total"] is not None]
    per_link = [link[f"{way}_bytes_per_second"] for link in counted]
    total = float(sum(per_link)) if counted and all(rate is not None for rate in per_link) else None
    return _plausible(
        [(total, "counter"), (_opt(g, f"gpm_nvlink_{way}_bytes_per_second"), "gpm")], capacity, "nvlink", bad
    )


def _health(g: pb.GpuSample, info: pb.GpuInfo, links_up: int, xids: list[int]) -> list[str]:
    """Everything wrong with the GPU, worst first; [] when healthy."""
    if g.lost:
        return ["lost"]
    out = []
    if (_opt(g, "ecc_uncorrected_volatile_total") or 0) > 0 or g.remapped_rows_failure:
        out.append("ecc")
    if g.remapped_rows_pending:
        out.append("row_remap_pending")
    if xids:
        out.append("xid")
    if info.nvlink_count and g.nvlinks and links_up < info.nvlink_count:
        out.append("nvlink_down")
    width, max_width = _opt(g, "pcie_link_width"), _opt(g, "pcie_max_link_width")
    if width is not None and max_width is not None and width < max_width:
        out.append("pcie_degraded")  # width only: the generation drops at idle to save power
    if THROTTLE_REASONS.intersection(g.clock_event_reason_names):
        out.append("throttled")
    if g.HasField("fabric") and fabric_problems(g.fabric):
        out.append("fabric")
    if g.suspect_fields:
        out.append("suspect_reading")
    return out


def _xids_by_gpu(events: Iterable[pb.Event]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for event in events:
        if event.kind == "xid" and event.subject.startswith("gpu:") and event.subject[4:].isdigit():
            out.setdefault(int(event.subject[4:]), []).append(int(event.attributes.get("xid", "0")))
    return out


def _process(proc: pb.GpuProcess) -> Row:
    return {
        "pid": proc.pid,
        "name": proc.name,
        "user": proc.user,
        "used_memory_bytes": _opt(proc, "used_memory_bytes"),
        "slurm_job_id": proc.job.slurm_job_id or None,
        "k8s_pod_uid": proc.job.k8s_pod_uid or None,
        "container_id": proc.job.container_id or None,
        "job_key": proc.job.job_key or None,
        "account": proc.job.account or None,
        "world_size": _opt(proc.job, "world_size"),
        "rank": _opt(proc.job, "rank"),
        "local_rank": _opt(proc.job, "local_rank"),
        "node_rank": _opt(proc.job, "node_rank"),
    }


def _opt(message: Any, name: str) -> Any:
    """A proto3 optional field's value, or None when unset."""
    if message is None or not message.HasField(name):
        return None
    return getattr(message, name)


# ---- text ----------------------------------------------------------------------------------------


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.0f}%"


def _memory(used: int | None, total: int | None) -> str:
    if used is None:
        return "-"
    gib = 1024**3
    return f"{used / gib:.1f}/{total / gib:.0f} GiB" if total else f"{used / gib:.1f} GiB"


def _rate(bytes_per_second: float | None) -> str:
    """PCIe and NVLink throughput in bits per second, as every link rate in nodeagent's text."""
    return format_bits(bytes_per_second)


def _link_pair(row: Row, link: str) -> str:
    """``RX / TX``; a rate the link cannot carry (and no GPM figure to show instead) is said to
    be a bad reading, never shown as traffic."""
    rx, tx = row[f"{link}_rx_bytes_per_second"], row[f"{link}_tx_bytes_per_second"]
    if rx is None and tx is None and link in row["bad_readings"]:
        return "bad reading"
    mark = "*" if link in row["bad_readings"] else ""  # GPM's, the counters being off
    return f"{_rate(rx)} / {_rate(tx)}{mark}"
