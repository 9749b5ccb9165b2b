"""One frame of ``nodeagent top``: the node's snapshot and its verdict, laid out for a terminal.

Built with rich (tables that size themselves to the width, text that wraps at word boundaries),
so one layout reads in 80x24 over SSH and uses a wider terminal for more columns. Pure: a
snapshot (``derive.snapshot``) and a verdict's plain form in, a renderable out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent.core.detector.verdict_words import forming_words, verdict_sentence
from nodeagent.core.program.safe_text import escape_controls

SORTS: Final = ("index", "util", "state")
HELP: Final = "q quit · s sort · p pause · h help"
_STATE_STYLE: Final = {"starved": "bold red", "throttled": "yellow", "lost": "bold magenta", "busy": "green"}
_STATE_ORDER: Final = {"starved": 0, "lost": 1, "throttled": 2, "warmup": 3, "busy": 4, "idle": 5}


@dataclass(slots=True)
class ViewState:
    sort: str = "index"
    interval_seconds: float = 1.0
    paused: bool = False
    help: bool = False
    # CPU seconds of the last tick (sampling) and of the last refresh (detector and drawing).
    tick_cpu_seconds: float | None = None
    view_cpu_seconds: float | None = None
    # Said once, where the node has no GPU to show.
    no_gpu_reason: str | None = None
    # Seconds of reports the detector has seen, against its window.
    detector_seen_seconds: float = 0.0
    detector_window_seconds: float = 60.0


def bar(ratio: float | None, width: int) -> Text:
    """``█████░░░ 62%``: a share as a bar and a number; ``—`` where unknown."""
    if ratio is None:
        return Text("—".ljust(width + 5))
    ratio = min(1.0, max(0.0, ratio))
    full = round(ratio * width)
    style = "red" if ratio >= 0.9 else "yellow" if ratio >= 0.6 else "green"
    text = Text("█" * full, style=style)
    text.append("░" * (width - full), style="dim")
    text.append(f" {ratio:4.0%}")
    return text


def frame(snap: dict[str, Any], verdict: dict[str, Any] | None, state: ViewState, width: int) -> RenderableType:
    parts: list[RenderableType] = [_header(snap, state), _verdict(verdict, state)]
    if state.help:
        parts.append(_help())
    gpus = snap.get("gpus")
    if gpus:
        parts.append(_gpus(gpus, verdict, state.sort, width))
        events = _clock_events(gpus)
        if events is not None:
            parts.append(events)
    elif state.no_gpu_reason:
        parts.append(Text(f"no GPU: {state.no_gpu_reason}; showing the host alone", style="dim"))
    parts.append(_highways(snap, width))
    parts.append(_footer(state))
    return Group(*parts)


def _header(snap: dict[str, Any], state: ViewState) -> Text:
    text = Text(f"nodeagent top · {snap.get('node_id') or 'this node'}", style="bold")
    text.append(f" · every {state.interval_seconds:g} s")
    if state.paused:
        text.append(" · PAUSED", style="bold yellow")
    return text


def _verdict(verdict: dict[str, Any] | None, state: ViewState) -> Text:
    window = state.detector_window_seconds
    if state.no_gpu_reason and not (verdict or {}).get("gpus"):
        return Text("verdict: no GPU here to wait for data")
    if verdict is None or not verdict.get("gpus"):
        seen = min(state.detector_seen_seconds, window)
        return Text(f"verdict: the detector's window is filling ({seen:.0f} of {window:.0f} s)")
    style = "bold red" if verdict.get("state") == "starved" else "bold"
    text = Text(verdict_sentence(verdict), style=style)
    forming = forming_words(state.detector_seen_seconds, window)
    if forming:
        text.append(f" ({forming})", style="dim")
    return text


def _help() -> Text:
    return Text(
        "q quit · s sort GPUs (index, util, state) · p or space pause the display · h this help\n"
        "Verdict: the collector's detector, run here over this node's reports (same [detector] keys).",
        style="cyan",
    )


def _gpu_states(verdict: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    return {g["index"]: g for g in (verdict or {}).get("gpus", [])}


def _gpus(gpus: list[dict[str, Any]], verdict: dict[str, Any] | None, sort: str, width: int) -> Table:
    states = _gpu_states(verdict)
    wide = width >= 110
    bar_width = 8 if width < 100 else 16
    table = Table(box=None, padding=(0, 1, 0, 0), header_style="bold", pad_edge=False)
    for name, justify in (
        ("GPU", "right"), ("util", "left"), ("SM", "right"), ("mem GB", "right"), ("W", "right"), ("°C", "right"),
        ("PCIe Gb/s", "right"), ("NVL Gb/s", "right"), ("state", "left"), ("job", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    if wide:
        table.add_column("processes", no_wrap=True)

    def key(g: dict[str, Any]) -> tuple[float, int]:
        if sort == "util":
            return (-(g.get("utilization_gpu_ratio") or 0.0), g["index"])
        if sort == "state":
            return (_STATE_ORDER.get(states.get(g["index"], {}).get("state", "idle"), 9), g["index"])
        return (0, g["index"])

    for g in sorted(gpus, key=key):
        verdict_gpu = states.get(g["index"], {})
        _gpu_row(table, g, verdict_gpu, wide, bar_width)
        for instance in g.get("mig_instances") or []:
            _instance_row(table, instance, verdict_gpu, wide, bar_width)
    return table


def _gpu_row(table: Table, g: dict[str, Any], verdict_gpu: dict[str, Any], wide: bool, bar_width: int) -> None:
    gpu_state = "lost" if g.get("lost") else verdict_gpu.get("state", "—")
    cause = verdict_gpu.get("cause")
    label = f"{gpu_state} {cause}" if gpu_state == "starved" and cause and wide else gpu_state
    row: list[Text | str] = [
        str(g["index"]),
        bar(g.get("utilization_gpu_ratio"), bar_width),
        _pct(g.get("sm_active_ratio")),
        _mem(g.get("memory_used_bytes"), g.get("memory_total_bytes")),
        _num(g.get("power_watts")),
        _num(g.get("temperature_celsius")),
        _pair(g, "pcie"),
        _pair(g, "nvlink"),
        Text(label, style=_STATE_STYLE.get(gpu_state, "")),
        _job(g.get("processes") or []),
    ]
    if wide:
        row.append(_process_names(g.get("processes") or []))
    table.add_row(*row)


def _instance_row(
    table: Table, instance: dict[str, Any], verdict_gpu: dict[str, Any], wide: bool, bar_width: int
) -> None:
    """A MIG instance under its GPU: its SM activity is its busy share (NVML has no utilization
    per instance), its state the detector's for the instance."""
    gi = instance["gpu_instance_id"]
    judged: dict[str, Any] = next((i for i in verdict_gpu.get("instances", []) if i.get("gpu_instance_id") == gi), {})
    state = judged.get("state", "—")
    cause = judged.get("cause")
    label = f"{state} {cause}" if state == "starved" and cause and wide else state
    row: list[Text | str] = [
        Text(f"└ {instance.get('mig_profile') or ''} gi{gi}", style="dim"),
        bar(instance.get("sm_active_ratio"), bar_width),
        _pct(instance.get("sm_active_ratio")),
        _mem(instance.get("memory_used_bytes"), instance.get("memory_total_bytes")),
        "", "", "", "",
        Text(label, style=_STATE_STYLE.get(state, "")),
        _job(instance.get("processes") or []),
    ]  # fmt: skip
    if wide:
        row.append(_process_names(instance.get("processes") or []))
    table.add_row(*row)


def _clock_events(gpus: list[dict[str, Any]]) -> Text | None:
    reasons = [f"GPU{g['index']} {'+'.join(g['clock_event_reasons'])}" for g in gpus if g.get("clock_event_reasons")]
    if not reasons:
        return None
    return Text("clock events: " + ", ".join(reasons), style="yellow")


def _highways(snap: dict[str, Any], width: int) -> Group:
    lines: list[Text] = []
    bar_width = 8 if width < 100 else 20
    links = [
        (n["name"], n) for n in snap.get("nics", []) if not n.get("virtual") and n.get("kind", "physical") == "physical"
    ]
    links += [(f"{p.get('device')}/{p.get('port')}", p) for p in snap.get("rdma_ports", [])]
    name_width = max([len(name) for name, _ in links] + [4])
    for name, row in links:
        line = Text(f"{name:<{name_width}} rx {_gbits(row.get('rx_bytes_per_second'))} ")
        line.append_text(bar(row.get("rx_link_ratio"), bar_width))
        line.append(f"  tx {_gbits(row.get('tx_bytes_per_second'))} {_pct(row.get('tx_link_ratio'))}")
        lines.append(line)
    disks = snap.get("disks", [])
    disk_width = max([len(d["name"]) for d in disks] + [4])
    for d in disks:
        iops = (d.get("reads_per_second") or 0.0) + (d.get("writes_per_second") or 0.0)
        mbs = ((d.get("read_bytes_per_second") or 0.0) + (d.get("write_bytes_per_second") or 0.0)) / 1e6
        latency = d.get("read_latency_seconds")
        line = Text(f"{d['name']:<{disk_width}} {iops:7.0f} IOPS {mbs:7.1f} MB/s  util ")
        line.append(_pct(d.get("utilization_ratio")))
        line.append(f"  read latency {latency * 1000:.1f} ms" if latency is not None else "  read latency —")
        lines.append(line)
    host = snap.get("host", {})
    cpu = Text(
        f"CPU busy {_pct(host.get('cpu_busy_ratio'))} (busiest core {_pct(host.get('cpu_max_core_busy_ratio'))})"
    )
    cpu.append(f"  iowait {_pct(host.get('cpu_iowait_ratio'))}")
    pressure = host.get("pressure", {})
    if pressure:
        cpu.append("  pressure " + " ".join(f"{k} {_pct(v.get('some_stalled_ratio'))}" for k, v in pressure.items()))
    lines.append(cpu)
    return Group(*lines)


def _footer(state: ViewState) -> Text:
    text = Text(HELP + f" · sort {state.sort}", style="dim")
    if state.tick_cpu_seconds is not None and state.view_cpu_seconds is not None:
        text.append(f" · CPU tick {state.tick_cpu_seconds * 1000:.1f} ms, view {state.view_cpu_seconds * 1000:.1f} ms")
    return text


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def _gbits(value: float | None) -> str:
    return "     —    " if value is None else f"{value * 8 / 1e9:5.1f} Gb/s"


def _mem(used: int | None, total: int | None) -> str:
    if used is None:
        return "—"
    return f"{used / 1e9:.0f}/{total / 1e9:.0f}" if total else f"{used / 1e9:.0f}"


def _pair(g: dict[str, Any], link: str) -> str:
    """A link's ``rx/tx`` in Gb/s, as `sample` and every link rate; ``bad`` where its counters
    ran faster than the link carries and nothing else measured it (gpu/view.py)."""
    rx, tx = g.get(f"{link}_rx_bytes_per_second"), g.get(f"{link}_tx_bytes_per_second")
    bad = link in (g.get("bad_readings") or ())
    if rx is None and tx is None:
        return "bad" if bad else "—"
    return f"{(rx or 0.0) * 8 / 1e9:.1f}/{(tx or 0.0) * 8 / 1e9:.1f}{'*' if bad else ''}"


def _process_names(processes: list[dict[str, Any]]) -> str:
    """Each process's pid and name, a name's control characters escaped (any user on the node names its processes)."""
    return escape_controls(", ".join(f"{p['pid']} {p.get('name') or ''}".strip() for p in processes))


def _job(processes: list[dict[str, Any]]) -> str:
    """The job of the GPU's processes: a Slurm job, else a pod, else the process."""
    for p in processes:
        if p.get("slurm_job_id"):
            return f"slurm {p['slurm_job_id']}"
    for p in processes:
        if p.get("k8s_pod_uid"):
            return f"pod {str(p['k8s_pod_uid'])[:8]}"
    if processes:
        return f"pid {processes[0]['pid']}"
    return ""
