"""Fields that read zero (or stand still) when the rest of the GPU says they cannot.

A profiling field can go dead while NVML still returns success: SM activity at 0 for minutes on
a GPU at 95% utilization (dcgm-exporter #662, #707), NVLink byte counters that stop while the
job's other GPUs move data over theirs, power at 0 W on a busy GPU. Believed, such a reading makes
a busy GPU look starved. Each rule here is a contradiction between two readings of one tick (and
the one before); held for ``HOLD_SECONDS`` of report time, the field is suspect: it is listed in
``GpuSample.suspect_fields`` (still sent as read), an event says so once when it turns suspect and
once when it reads plausibly again, and the detector leaves it out (``core/detector``).

- ``sm_active_ratio``: 0 while utilization is at least ``BUSY_RATIO``; or the same value to the
  last digit, tick after tick, while utilization moves by ``FROZEN_SPREAD`` or more.
- ``nvlink_bytes``: the GPU's NVLink byte counters flat while it is busy and a GPU running the same
  job moved at least ``PEER_BYTES_PER_SECOND`` over its own.
- ``power_watts``: 0 W while utilization is at least ``BUSY_RATIO``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodeagent.v1 import nodeagent_pb2 as pb

FIELDS: Final = ("sm_active_ratio", "nvlink_bytes", "power_watts")
HOLD_SECONDS: Final = 120.0  # a kernel gap reads 0 for a moment; minutes of it cannot be a gap
BUSY_RATIO: Final = 0.5
FROZEN_SPREAD: Final = 0.2  # utilization's range during a run of one SM-activity value
PEER_BYTES_PER_SECOND: Final = 1e6


def contradictions(before: pb.GpuSample | None, after: pb.GpuSample, peers_moved: bool) -> dict[str, str]:
    """The fields of ``after`` that its own other readings contradict now, with why (the rules
    that need one tick, or two: not the frozen value, which needs a run of them)."""
    out: dict[str, str] = {}
    if after.lost or not after.HasField("utilization_gpu_ratio"):
        return out
    util = after.utilization_gpu_ratio
    if util < BUSY_RATIO:
        return out
    if after.HasField("sm_active_ratio") and after.sm_active_ratio == 0.0:
        out["sm_active_ratio"] = f"SM activity reads 0 while the GPU is {util:.0%} utilized"
    if after.HasField("power_watts") and after.power_watts == 0.0:
        out["power_watts"] = f"power reads 0 W while the GPU is {util:.0%} utilized"
    moved = nvlink_bytes(before, after)
    if moved == 0 and peers_moved:
        out["nvlink_bytes"] = "NVLink byte counters flat while the job's other GPUs move data over theirs"
    return out


def nvlink_bytes(before: pb.GpuSample | None, after: pb.GpuSample) -> int | None:
    """Bytes over the GPU's NVLinks (both ways) between two samples; None without counters."""
    if before is None or before.lost:
        return None
    now, then = _nvlink_total(after), _nvlink_total(before)
    if now is None or then is None or now < then:
        return None
    return now - then


@dataclass(slots=True)
class _Run:
    """One contradiction, followed from its first tick."""

    since: float
    reason: str
    flagged: bool = False


@dataclass(slots=True)
class _Frozen:
    value: float
    since: float
    util_low: float
    util_high: float


@dataclass(slots=True)
class SuspectReadings:
    """The contradictions of each GPU (by UUID) across ticks."""

    hold_seconds: float = HOLD_SECONDS
    _runs: dict[tuple[str, str], _Run] = field(default_factory=dict)
    _frozen: dict[str, _Frozen] = field(default_factory=dict)
    _last: dict[str, tuple[float, pb.GpuSample]] = field(default_factory=dict)

    def observe(self, report: pb.NodeReport) -> None:
        """Mark this report's suspect fields and add an event for each that turns suspect or clears."""
        t = report.time_unix_seconds
        gpus = [g for g in report.gpus if not g.lost]
        moved = {g.uuid: self._moved(g, t) for g in gpus}
        jobs = {g.uuid: _jobs(g) for g in gpus}
        for g in gpus:
            peers_moved = any(moved[p.uuid] for p in gpus if p.uuid != g.uuid and jobs[g.uuid] & jobs[p.uuid])
            previous = self._last.get(g.uuid)
            now = contradictions(previous[1] if previous else None, g, peers_moved)
            frozen = self._frozen_reason(g, t)
            if frozen and "sm_active_ratio" not in now:
                now["sm_active_ratio"] = frozen
            self._follow(g, now, t, report)
        self._last = {g.uuid: (t, g) for g in gpus}

    def retain(self, uuids: set[str]) -> None:
        self._runs = {k: v for k, v in self._runs.items() if k[0] in uuids}
        self._frozen = {k: v for k, v in self._frozen.items() if k in uuids}

    # -- helpers --

    def _moved(self, g: pb.GpuSample, t: float) -> bool:
        previous = self._last.get(g.uuid)
        if previous is None or t <= previous[0]:
            return False
        moved = nvlink_bytes(previous[1], g)
        return moved is not None and moved / (t - previous[0]) >= PEER_BYTES_PER_SECOND

    def _frozen_reason(self, g: pb.GpuSample, t: float) -> str | None:
        if not (g.HasField("sm_active_ratio") and g.HasField("utilization_gpu_ratio")) or g.sm_active_ratio == 0:
            self._frozen.pop(g.uuid, None)
            return None
        value, util = g.sm_active_ratio, g.utilization_gpu_ratio
        run = self._frozen.get(g.uuid)
        if run is None or run.value != value:
            self._frozen[g.uuid] = _Frozen(value, t, util, util)
            return None
        run.util_low, run.util_high = min(run.util_low, util), max(run.util_high, util)
        if run.util_high - run.util_low < FROZEN_SPREAD:
            return None
        return f"SM activity frozen at {value:.4g} while utilization moved {run.util_low:.0%}-{run.util_high:.0%}"

    def _follow(self, g: pb.GpuSample, now: Mapping[str, str], t: float, report: pb.NodeReport) -> None:
        for name in FIELDS:
            key = (g.uuid, name)
            run = self._runs.get(key)
            reason = now.get(name)
            if reason is None:
                if run is not None:
                    del self._runs[key]
                    if run.flagged:
                        _event(report, g, name, "info", f"GPU {g.index} {_NAMES[name]} reads plausibly again")
                continue
            if run is None:
                run = self._runs[key] = _Run(since=t, reason=reason)
            run.reason = reason
            if t - run.since >= self.hold_seconds:
                g.suspect_fields.append(name)
                if not run.flagged:
                    run.flagged = True
                    held = t - run.since
                    message = f"GPU {g.index}: {reason} for {held:.0f} s; its {_NAMES[name]} is not believed"
                    _event(report, g, name, "warning", message)


_NAMES: Final = {"sm_active_ratio": "SM activity", "nvlink_bytes": "NVLink byte count", "power_watts": "power"}


def _event(report: pb.NodeReport, g: pb.GpuSample, name: str, severity: str, message: str) -> None:
    report.events.add(
        time_unix_seconds=report.time_unix_seconds,
        kind="suspect_reading",
        severity=severity,
        subject=f"gpu:{g.index}",
        message=message,
        attributes={"uuid": g.uuid, "field": name, "suspect": "true" if severity != "info" else "false"},
    )


def _nvlink_total(g: pb.GpuSample) -> int | None:
    if g.HasField("nvlink_rx_bytes_total") or g.HasField("nvlink_tx_bytes_total"):
        return g.nvlink_rx_bytes_total + g.nvlink_tx_bytes_total
    links: Sequence[pb.NvLinkSample] = g.nvlinks
    if not any(link.HasField("rx_bytes_total") or link.HasField("tx_bytes_total") for link in links):
        return None
    return sum(link.rx_bytes_total + link.tx_bytes_total for link in links)


def _jobs(g: pb.GpuSample) -> set[str]:
    out = set()
    for p in g.processes:
        job = p.job
        named = job.job_key or job.slurm_job_id or job.k8s_pod_uid or job.container_id
        if named:
            out.add(named)
    return out
