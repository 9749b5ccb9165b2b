"""A node verdict in words: the sentence ``nodeagent top`` and the fleet page both show.

"8 GPUs starved 34% of their time — cause network: eth0 receives 9.6 Gb/s, 96% of its link;
keeping them busy needs 14.5 Gb/s". Built from the ``NodeVerdict``'s plain form (its
``to_plain()`` dict), so the collector can word a verdict it only holds as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def gbits(bytes_per_second: float) -> str:
    """Network rates: bits, as links are sold."""
    return f"{bytes_per_second * 8 / 1e9:.1f} Gb/s"


def mbytes(bytes_per_second: float) -> str:
    """Disk rates: bytes, as disks and volumes are sold."""
    return f"{bytes_per_second / 1e6:.0f} MB/s"


def ingest_words(cause: str | None, bytes_per_second: float) -> str:
    """The ingest that would keep the GPUs busy, in its highway's unit: MB/s for storage (as its
    evidence reads), Gb/s for the network."""
    return mbytes(bytes_per_second) if cause == "storage" else gbits(bytes_per_second)


def _share(value: Any) -> str:
    return f"{float(value):.0%}"


def evidence_words(cause: str, evidence: Mapping[str, Any]) -> str:
    """What the detector saw that names ``cause``; "" where it kept nothing to say."""
    e = evidence
    if cause == "network" and "network_link" in e:
        text = f"{e['network_link']} receives {gbits(float(e['network_rx_bytes_per_second']))}"
        return f"{text}, {_share(e['network_rx_link_ratio'])} of its link"
    if cause == "storage" and "storage_disk" in e:
        parts = [f"{e['storage_disk']} busy {_share(e.get('storage_busy_ratio', 0.0))}"]
        if "storage_read_bytes_per_second" in e:
            parts.append(f"reads {mbytes(float(e['storage_read_bytes_per_second']))}")
        if "storage_await_seconds" in e:
            parts.append(f"read latency {float(e['storage_await_seconds']) * 1000:.1f} ms")
        if "storage_io_pressure_ratio" in e:
            parts.append(f"I/O pressure {_share(e['storage_io_pressure_ratio'])}")
        return ", ".join(parts)
    if cause == "cpu":
        parts = []
        if "cpu_pattern" in e:
            parts.append(str(e["cpu_pattern"]).replace("-", " "))
        if "cpu_busy_ratio" in e:
            parts.append(f"CPUs busy {_share(e['cpu_busy_ratio'])}")
        if "cpu_max_core_busy_ratio" in e:
            parts.append(f"busiest core {_share(e['cpu_max_core_busy_ratio'])}")
        return ", ".join(parts)
    if cause == "h2d" and "h2d_link_ratio" in e:
        return f"host-to-device copies fill {_share(e['h2d_link_ratio'])} of the PCIe link"
    if cause == "interconnect" and "interconnect_wait_ratio" in e:
        return f"waiting for the collective {_share(e['interconnect_wait_ratio'])} of the time"
    return ""


def forming_words(seen_seconds: float, window_seconds: float) -> str:
    """While the detector's window is not yet full: that its verdict is still forming and how far
    it got; "" once it is full. A starved node reads ``busy`` until then (hysteresis)."""
    if seen_seconds >= window_seconds:
        return ""
    return f"verdict still forming: window {seen_seconds:.0f} of {window_seconds:.0f} s"


def verdict_sentence(verdict: Mapping[str, Any]) -> str:
    """One sentence for a node verdict's plain form (``NodeVerdict.to_plain()``)."""
    gpus = verdict.get("gpus") or []
    state = verdict.get("state") or "idle"
    if state != "starved":
        busy = sum(1 for g in gpus if g.get("state") == "busy")
        counted = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        ratio = verdict.get("starvation_ratio")
        lost = f", {ratio:.0%} of their time waiting for data" if isinstance(ratio, float) else ""
        return f"{counted}: {state}" + (f" ({busy} busy{lost})" if busy else "")
    starved = [g for g in gpus if g.get("state") == "starved"]
    cause = verdict.get("cause") or "unknown"
    ratios = [
        g.get("interconnect_ratio") if g.get("cause") == "interconnect" else g.get("starvation_ratio") for g in starved
    ]
    known = [r for r in ratios if isinstance(r, float)]
    ratio = sum(known) / len(known) if known else 0.0
    text = f"{len(starved)} GPU{'s' if len(starved) != 1 else ''} starved {ratio:.0%} of their time — cause {cause}"
    said = evidence_words(cause, verdict.get("evidence") or {})
    if said:
        text += f": {said}"
    needed = verdict.get("needed_ingest_bytes_per_second")
    if isinstance(needed, float | int):
        text += f"; keeping them busy needs {ingest_words(cause, float(needed))}"
    return text
