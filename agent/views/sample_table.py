"""The ``nodeagent sample`` table: one screen, readable at a glance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.agent.gpu.view import render_gpu_table
from nodeagent.core.program.safe_text import escape_controls
from nodeagent.core.quantities.units import format_bits

Row = Sequence[str]
Rows = list[Row]


def render(snap: dict[str, Any], show_virtual: bool = False) -> str:
    rates = snap["interval_seconds"] is not None
    failed = [c for c in snap["collectors"] if not c["success"]]
    head = f"node {snap['node_id']}  seq {snap['seq']}  "
    head += f"interval {snap['interval_seconds']:.2f} s" if rates else "first sample: counters and topology"
    head += f"  collectors {len(snap['collectors']) - len(failed)}/{len(snap['collectors'])} ok"
    parts = [head]
    parts += [f"  ! {c['name']}: {c.get('error', '')}" for c in failed]
    parts.append(_nics(snap["nics"], rates, show_virtual))
    if snap["rdma_ports"]:
        parts.append(_rdma(snap["rdma_ports"], rates))
    if snap["disks"]:
        parts.append(_disks(snap["disks"], rates))
    parts.append(_host(snap["host"], rates))
    gpus = _gpus(snap)
    if gpus:
        parts.append(gpus)
    for event in snap["events"]:
        if event["kind"] == "gpu_unavailable" and snap.get("gpu_unavailable_reason"):
            continue  # the GPU line above says it already
        parts.append(f"  event {event['severity']} {event['kind']} {event['subject']}: {event['message']}")
    text = "\n".join(p for p in parts if p)
    return "\n".join(map(escape_controls, text.split("\n"))) + "\n"  # names read on the node: processes, devices


def _nics(nics: list[dict[str, Any]], rates: bool, show_virtual: bool) -> str:
    shown = [n for n in nics if show_virtual or not n.get("virtual") or n.get("kind") == "bond"]
    hidden = len(nics) - len(shown)
    if rates:
        header: Row = ("NIC", "kind", "state", "link", "rx", "tx", "rx%link", "tx%link", "err/s", "drop/s")
        rows: Rows = [
            (
                n["name"] + (f" ({n['bond_master']})" if n.get("bond_master") else ""),
                n.get("kind", ""),
                _state(n),
                format_bits(n["speed_bytes_per_second"]) + ("*" if n.get("speed_source") == "config" else ""),
                format_bits(n["rx_bytes_per_second"]),
                format_bits(n["tx_bytes_per_second"]),
                _pct(n["rx_link_ratio"]),
                _pct(n["tx_link_ratio"]),
                _num(_sum(n["rx_errors_per_second"], n["tx_errors_per_second"])),
                _num(_sum(n["rx_dropped_per_second"], n["tx_dropped_per_second"])),
            )
            for n in shown
        ]
    else:
        header = ("NIC", "kind", "state", "link", "mtu", "rx total", "tx total")
        rows = [
            (
                n["name"],
                n.get("kind", ""),
                _state(n),
                format_bits(n["speed_bytes_per_second"]) + ("*" if n.get("speed_source") == "config" else ""),
                str(n.get("mtu", "-")),
                _bytes(n["rx_bytes_total"]),
                _bytes(n["tx_bytes_total"]),
            )
            for n in shown
        ]
    notes = [f"{hidden} virtual interfaces hidden; --all shows them"] if hidden else []
    if any(n.get("speed_source") == "config" for n in shown):
        notes.append("* = configured speed")
    note = f"\n  ({'; '.join(notes)})" if notes else ""
    return table(header, rows) + note if rows or note else ""


def _rdma(ports: list[dict[str, Any]], rates: bool) -> str:
    header: Row = ("RDMA port", "layer", "state", "phys", "rate", "rx", "tx", "rx%link", "saturated")
    rows = [
        (
            f"{p['device']}/{p['port']}",
            p.get("link_layer", ""),
            p.get("state", "") or "-",
            p.get("phys_state", "") or "-",
            format_bits(p.get("rate_bytes_per_second")),
            format_bits(p["rx_bytes_per_second"]) if rates else _bytes(p.get("rx_bytes_total")),
            format_bits(p["tx_bytes_per_second"]) if rates else _bytes(p.get("tx_bytes_total")),
            _pct(p["rx_link_ratio"]) if rates else "-",
            ",".join(p.get("saturated_counters", [])) or "-",
        )
        for p in ports
    ]
    return table(header, rows)


def _disks(disks: list[dict[str, Any]], rates: bool) -> str:
    if rates:
        header: Row = (
            "disk",
            "transport",
            "rotational",
            "r/s",
            "w/s",
            "rMB/s",
            "wMB/s",
            "r_await",
            "w_await",
            "util",
            "qdepth",
        )
        rows: Rows = [
            (
                d["name"],
                d.get("transport") or "-",
                _yes_no(d.get("rotational")),
                _num(d["reads_per_second"]),
                _num(d["writes_per_second"]),
                _mb(d["read_bytes_per_second"]),
                _mb(d["write_bytes_per_second"]),
                _ms(d["read_latency_seconds"]),
                _ms(d["write_latency_seconds"]),
                _pct(d["utilization_ratio"]),
                _num(d["queue_depth"], 2),
            )
            for d in disks
        ]
    else:
        header = ("disk", "transport", "rotational", "size", "reads", "read", "writes", "written", "mounts")
        rows = [
            (
                d["name"],
                d.get("transport") or "-",
                _yes_no(d.get("rotational")),
                _bytes(d.get("size_bytes")),
                str(d["reads_completed_total"]),
                _bytes(d["read_bytes_total"]),
                str(d["writes_completed_total"]),
                _bytes(d["written_bytes_total"]),
                ",".join(d.get("mountpoints", [])) or "-",
            )
            for d in disks
        ]
    return table(header, rows)


def _host(host: dict[str, Any], rates: bool) -> str:
    line = f"CPU  {host['cpu_count']} cores"
    if rates:
        line += (
            f"  busy {_pct(host['cpu_busy_ratio'])}  iowait {_pct(host['cpu_iowait_ratio'])}"
            f"  busiest core {_pct(host['cpu_max_core_busy_ratio'])}"
        )
    if "load1" in host:
        line += f"  load {host['load1']:.2f} {host['load5']:.2f} {host['load15']:.2f}"
    psi = host.get("pressure", {})
    if psi:
        line += "  PSI some avg10:" + "".join(f" {name} {_pct(p.get('some_avg10_ratio'))}" for name, p in psi.items())
    mem = ""
    if "memory_total_bytes" in host:
        mem = (
            f"MEM  total {_bytes(host['memory_total_bytes'])}  available {_bytes(host.get('memory_available_bytes'))}"
            f"  page cache {_bytes(host.get('memory_cached_bytes'))}  dirty {_bytes(host.get('memory_dirty_bytes'))}"
        )
    return line + ("\n" + mem if mem else "")


def _gpus(snap: dict[str, Any]) -> str:
    if "gpus" not in snap:
        return ""
    return render_gpu_table(snap["gpus"], snap.get("gpu_unavailable_reason") or "")


def table(header: Row, rows: Sequence[Row]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _state(nic: dict[str, Any]) -> str:
    state = nic.get("operstate") or "-"
    if nic.get("carrier") is False:
        state += " no-carrier"
    return state


def _yes_no(flag: bool | None) -> str:
    """The kernel's rotational flag as it is: a spinning disk (or one that says so), not a transport."""
    return "-" if flag is None else ("yes" if flag else "no")


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}ms"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"
