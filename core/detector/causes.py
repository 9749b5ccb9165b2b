"""Step 3 of the detector's rule chain, cause attribution after `throttled` (``throttle``):
interconnect, network, storage, h2d, network by its receive plateau, cpu, unknown; first match
wins, with the evidence.

- interconnect: each step's peer traffic (symmetric PCIe bytes, or NVLink bytes) over the link's
  bandwidth x ``collective_efficiency_ratio`` is the time spent waiting for the collective;
  ``window`` splits idle time by it into interconnect waiting and data waiting.
- network, storage, cpu: node-wide evidence of the step (``node_evidence``). A link at its
  capacity is the network before anything else; a flat receive plateau on a virtual link only
  after storage and h2d, and only where no busy or saturated cores explain the wait.
- h2d: this GPU's PCIe receive (minus transmit) near link capacity.
- unknown: starved, nothing saturated.

Here: the per-step link time and host-to-device share from the GPU's counters, and the cause one
starved step votes for (the evidence a verdict carries is ``hysteresis``'s, with the verdict).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nodeagent.core.quantities.rates import delta
from nodeagent.core.quantities.units import pcie_bytes_per_second
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.core.detector.config import DetectorConfig
    from nodeagent.core.detector.step import Step
    from nodeagent.core.detector.track_state import TrackState


def link_and_h2d(track: TrackState, g: pb.GpuSample, t: float, step: Step, *, first: bool) -> None:
    """Close the step's peer-link time and host-to-device share from this report's counters."""
    if not track.uuid:
        track.uuid = g.uuid
    if g.HasField("pcie_link_generation") and g.HasField("pcie_link_width"):
        track.pcie_link_bytes_per_second = pcie_bytes_per_second(g.pcie_link_generation, g.pcie_link_width)
    pcie = track.pcie_link_bytes_per_second or track.pcie_max_bytes_per_second
    rx = g.pcie_rx_bytes_total if g.HasField("pcie_rx_bytes_total") else None
    tx = g.pcie_tx_bytes_total if g.HasField("pcie_tx_bytes_total") else None
    # NVLink counters the agent holds suspect (flat while the job's other GPUs move data) say nothing.
    nv_rx, nv_tx = _nvlink_totals(g) if "nvlink_bytes" not in g.suspect_fields else (None, None)
    before, track.counters = track.counters, (t, rx, tx, nv_rx, nv_tx)
    if first or before is None or t <= before[0]:
        return
    span = t - before[0]
    step.span = span
    d_rx: float | None = delta(before[1], rx)
    d_tx: float | None = delta(before[2], tx)
    d_nv_rx: float | None = delta(before[3], nv_rx)
    d_nv_tx: float | None = delta(before[4], nv_tx)
    if d_rx is None or d_tx is None:
        # No byte counters (older drivers): the driver's sampled throughput, or GPM's, now.
        d_rx = _sampled(g, "pcie_rx_bytes_per_second", "gpm_pcie_rx_bytes_per_second", span)
        d_tx = _sampled(g, "pcie_tx_bytes_per_second", "gpm_pcie_tx_bytes_per_second", span)
    if d_nv_rx is None or d_nv_tx is None:
        d_nv_rx = _sampled(g, "gpm_nvlink_rx_bytes_per_second", "", span)
        d_nv_tx = _sampled(g, "gpm_nvlink_tx_bytes_per_second", "", span)
    efficiency = track.config.collective_efficiency_ratio
    # Faster than the link can carry: a bad reading (a counter in other units, a wrapped or reset
    # counter); flagged in the evidence, and the link's bytes decide nothing this step.
    overrun = track.config.link_overrun_factor * span
    nvlink = track.nvlink_bytes_per_second
    if nvlink and max(d_nv_rx or 0, d_nv_tx or 0) > nvlink * overrun:
        step.bad_reading, d_nv_rx, d_nv_tx = "nvlink", None, None
    if pcie and max(d_rx or 0, d_tx or 0) > pcie * overrun:
        step.bad_reading, d_rx, d_tx = "pcie", None, None
    if d_nv_rx and d_nv_tx and track.nvlink_bytes_per_second:
        step.link_seconds = min(d_nv_rx, d_nv_tx) / (track.nvlink_bytes_per_second * efficiency)
    elif d_rx is not None and d_tx is not None and pcie:
        # Collectives are symmetric: what goes both ways over PCIe is peer traffic.
        step.link_seconds = min(d_rx, d_tx) / (pcie * efficiency)
    if d_rx is not None and d_tx is not None and pcie:
        step.h2d_ratio = max(0, d_rx - d_tx) / span / pcie


def step_cause(s: Step, config: DetectorConfig) -> str:
    """The data cause one starved step votes for, first match wins."""
    e = s.evidence
    if e.network and not e.network_plateau:
        return "network"
    if e.storage:
        return "storage"
    if s.h2d_ratio is not None and s.h2d_ratio >= config.h2d_link_ratio:
        return "h2d"
    # A flat receive plateau is what a capped remote store looks like, but also what a loader
    # limited by anything else downloads at: its consumption rate, steady. So it yields to busy or
    # saturated cores (a CPU-bound loader), and wins only over CPU pressure on half-idle cores.
    if e.network and not (e.cpu and e.cpu_saturated):
        return "network"
    if e.cpu:
        return "cpu"
    return "unknown"


def _nvlink_totals(g: pb.GpuSample) -> tuple[int | None, int | None]:
    if g.nvlinks:
        rx = [link.rx_bytes_total for link in g.nvlinks if link.HasField("rx_bytes_total")]
        tx = [link.tx_bytes_total for link in g.nvlinks if link.HasField("tx_bytes_total")]
        return (sum(rx) if rx else None), (sum(tx) if tx else None)
    rx_total = g.nvlink_rx_bytes_total if g.HasField("nvlink_rx_bytes_total") else None
    tx_total = g.nvlink_tx_bytes_total if g.HasField("nvlink_tx_bytes_total") else None
    return rx_total, tx_total


def _sampled(g: pb.GpuSample, field: str, fallback: str, seconds: float) -> float | None:
    """Bytes over ``seconds`` at the rate a gauge field shows (the first of two that is set)."""
    for name in (field, fallback):
        if name and g.HasField(name):
            value = getattr(g, name)
            return value * seconds if 0.0 <= value < math.inf else None
    return None
