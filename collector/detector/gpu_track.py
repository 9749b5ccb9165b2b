"""One GPU as the detector follows it: per-report accumulation and the per-step verdict.

The window is a ring of steps (``window_steps`` closed ones plus the open one), allocated once and
reused. Per report a GPU adds its counted seconds, idle seconds and idle² (for the standard error)
to the open step. Reports in which the GPU was nearly idle are held apart as a possible gap; a
gap that outlasts ``gap_seconds`` is counted after all (moved into the steps it came from), a
shorter one is dropped.
"""

from __future__ import annotations

import math

from nodeagent.collector.detector.config import DetectorConfig
from nodeagent.collector.detector.node_evidence import NodeEvidence
from nodeagent.collector.detector.verdict import DATA_CAUSES, GpuVerdict
from nodeagent.collector.detector.window import Step, Window
from nodeagent.core.rates import delta
from nodeagent.core.units import pcie_bytes_per_second
from nodeagent.v1 import nodeagent_pb2 as pb


class GpuTrack:
    def __init__(self, index: int, config: DetectorConfig, info: pb.GpuInfo | None) -> None:
        self.index = index
        self.config = config
        self.uuid = ""
        self.nvlink_bytes_per_second: float | None = None
        self.pcie_max_bytes_per_second: float | None = None
        self.gpm = False
        self.learn(info)
        self._steps = [Step() for _ in range(config.window_steps + 1)]
        self._pos = 0
        self.assigned = False
        self._seen_unassigned = False
        self._assigned_since = -math.inf
        self._in_warmup = False
        self._lost = False
        self.last_seen = -math.inf
        self._gap_run = 0.0
        self._gap_committed = False
        self._counters: tuple[float, int | None, int | None, int | None, int | None] | None = None
        self._pcie_bytes_per_second: float | None = None
        self.jobs: tuple[str, ...] = ()
        self.state = "busy"
        self.cause: str | None = None
        self.tier: str | None = None
        self._calm_seconds = 0.0
        self._last_eval: float | None = None
        self._window_seconds = 0.0
        self.gpu_seconds_lost = 0.0

    def learn(self, info: pb.GpuInfo | None) -> None:
        if info is None:
            return
        self.uuid = info.uuid or self.uuid
        if info.nvlink_count and info.HasField("nvlink_speed_bytes_per_second"):
            self.nvlink_bytes_per_second = info.nvlink_count * info.nvlink_speed_bytes_per_second
        if info.HasField("pcie_max_generation") and info.HasField("pcie_max_width"):
            self.pcie_max_bytes_per_second = pcie_bytes_per_second(info.pcie_max_generation, info.pcie_max_width)
        self.gpm = info.gpm_supported

    def window_seconds(self) -> float:
        """Counted seconds in the window at the last evaluation (the GPU's weight in node ratios)."""
        return self._window_seconds if self.state not in ("idle", "lost", "warmup") else 0.0

    def forget(self) -> None:
        """Drop the window and the verdict built on it (after a long silence both are stale)."""
        for step in self._steps:
            step.reset()
        self._counters = None
        self._gap_run, self._gap_committed = 0.0, False
        self.state, self.cause, self.tier, self._calm_seconds = "busy", None, None, 0.0

    # ---- per report: cheap and allocation-free -----------------------------------------------

    def tick(self, g: pb.GpuSample, t: float, dt: float, throttle_mask: int) -> None:
        self.last_seen = t
        if g.lost:
            self._lost, self.assigned = True, False
            self._end_gap()
            return
        self._lost = False
        config = self.config
        # Memory first: it is a plain field, and a GPU with a job is above the baseline anyway.
        if g.memory_used_bytes <= config.idle_memory_bytes and not g.processes:
            if self.assigned:
                self._end_gap()
            self.assigned, self._seen_unassigned = False, True
            return
        if not self.assigned:
            self.assigned = True
            self._assigned_since = t if self._seen_unassigned else -math.inf
        self._in_warmup = t - self._assigned_since < config.warmup_seconds
        if self._in_warmup or not g.HasField("utilization_gpu_ratio"):
            return
        busy = g.utilization_gpu_ratio
        if not 0.0 <= busy <= 1.0:
            return  # NaN or garbage: this report says nothing about the GPU
        if self.gpm and g.HasField("sm_active_ratio"):
            sm = g.sm_active_ratio
            full = config.gpm_full_sm_active_ratio
            if 0.0 <= sm < busy * full:
                busy = sm / full
        step = self._steps[self._pos]
        if g.clock_event_reasons & throttle_mask:
            step.throttled += dt
        idle = 1.0 - busy
        if busy < (config.gap_end_busy_ratio if self._gap_run else config.gap_busy_ratio):
            self._gap_run += dt
            if not self._gap_committed:
                if self._gap_run <= config.gap_seconds:
                    step.pend_seconds += dt
                    step.pend_idle += idle * dt
                    step.pend_sq += idle * idle * dt
                    step.pend_ticks += 1
                    return
                self._commit_gap()
        elif self._gap_run:
            self._end_gap()
        step.seconds += dt
        step.idle += idle * dt
        step.idle_sq += idle * idle * dt
        step.ticks += 1

    def _commit_gap(self) -> None:
        """The gap lasted too long to be a pause: count it where it happened."""
        for step in self._steps:
            step.seconds += step.pend_seconds
            step.idle += step.pend_idle
            step.idle_sq += step.pend_sq
            step.ticks += step.pend_ticks
            step.pend_seconds = step.pend_idle = step.pend_sq = 0.0
            step.pend_ticks = 0
        self._gap_committed = True

    def _end_gap(self) -> None:
        if self._gap_run and not self._gap_committed:
            for step in self._steps:
                step.pend_seconds = step.pend_idle = step.pend_sq = 0.0
                step.pend_ticks = 0
        self._gap_run, self._gap_committed = 0.0, False

    # ---- per window step ---------------------------------------------------------------------

    def step(self, g: pb.GpuSample | None, t: float, evidence: NodeEvidence, *, first: bool) -> GpuVerdict:
        """Close the open step with this report's counters, evaluate the window, open the next."""
        current = self._steps[self._pos]
        current.evidence = evidence
        if g is not None and not g.lost:
            self._counters_step(g, t, current, first=first)
            self._jobs(g, t)
        verdict = self._evaluate(t)
        self._pos = (self._pos + 1) % len(self._steps)
        self._steps[self._pos].reset()
        return verdict

    def _counters_step(self, g: pb.GpuSample, t: float, step: Step, *, first: bool) -> None:
        if not self.uuid:
            self.uuid = g.uuid
        if g.HasField("pcie_link_generation") and g.HasField("pcie_link_width"):
            self._pcie_bytes_per_second = pcie_bytes_per_second(g.pcie_link_generation, g.pcie_link_width)
        pcie = self._pcie_bytes_per_second or self.pcie_max_bytes_per_second
        rx = g.pcie_rx_bytes_total if g.HasField("pcie_rx_bytes_total") else None
        tx = g.pcie_tx_bytes_total if g.HasField("pcie_tx_bytes_total") else None
        nv_rx, nv_tx = _nvlink_totals(g)
        before, self._counters = self._counters, (t, rx, tx, nv_rx, nv_tx)
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
        efficiency = self.config.collective_efficiency_ratio
        overrun = self.config.link_overrun_factor * span
        if self.nvlink_bytes_per_second and max(d_nv_rx or 0, d_nv_tx or 0) > self.nvlink_bytes_per_second * overrun:
            step.bad_reading, d_nv_rx, d_nv_tx = "nvlink", None, None
        if pcie and max(d_rx or 0, d_tx or 0) > pcie * overrun:
            step.bad_reading, d_rx, d_tx = "pcie", None, None
        if d_nv_rx and d_nv_tx and self.nvlink_bytes_per_second:
            step.link_seconds = min(d_nv_rx, d_nv_tx) / (self.nvlink_bytes_per_second * efficiency)
        elif d_rx is not None and d_tx is not None and pcie:
            # Collectives are symmetric: what goes both ways over PCIe is peer traffic.
            step.link_seconds = min(d_rx, d_tx) / (pcie * efficiency)
        if d_rx is not None and d_tx is not None and pcie:
            step.h2d_ratio = max(0, d_rx - d_tx) / span / pcie

    def _jobs(self, g: pb.GpuSample, t: float) -> None:
        jobs = tuple(sorted({_job_id(p.job) for p in g.processes} - {""}))
        if jobs and self.jobs and not set(jobs) & set(self.jobs):
            self._assigned_since = t  # another job took the GPU: it warms up again
            self._in_warmup = self.config.warmup_seconds > 0
        self.jobs = jobs

    def _evaluate(self, t: float) -> GpuVerdict:
        config = self.config
        since = t - self._last_eval if self._last_eval is not None else config.evaluate_seconds
        self._last_eval = t
        if self._lost or not self.assigned or self._in_warmup:
            state = "lost" if self._lost else "idle" if not self.assigned else "warmup"
            self._set(state, None, None)
            self._window_seconds = 0.0
            return self._verdict(state, None, None, None, {})
        w = Window(self._steps, self._pos, config)
        self._window_seconds = w.seconds
        need, steps = config.enter_steps, config.window_steps
        previous, previous_cause = self.state, self.cause
        if w.throttled >= need or (previous == "throttled" and w.throttled > steps - need):
            self._set("throttled", None, None)
        elif w.seconds <= 0:
            pass  # nothing counted yet (all gap): keep the verdict
        elif previous == "starved":
            # Calm: the ratio of the cause being left stays clearly below the tier.
            ratio = w.sync_ratio if previous_cause == "interconnect" else w.data_ratio
            self._calm_seconds = self._calm_seconds + since if ratio < config.exit_ratio else 0.0
            if self._calm_seconds < config.exit_seconds:
                self._set("starved", self._next_cause(w), w)
            elif previous_cause != "interconnect" and self._enters(w) == "interconnect":
                self._set("starved", "interconnect", w)
            else:
                self._set("busy", None, None)
        else:
            cause = self._enters(w)
            self._set("starved" if cause else "busy", cause, w)
        if self.state == "starved" and self.cause in DATA_CAUSES:
            entered = previous != "starved" or previous_cause not in DATA_CAUSES
            self.gpu_seconds_lost += w.data_seconds if entered else w.current_data_seconds
        return self._verdict(self.state, w.data_ratio, w.sync_ratio, w.idle_ratio, self._evidence(w))

    def _enters(self, w: Window) -> str | None:
        """The cause a GPU that is not starved enters `starved` with, if the window shows one."""
        config, need = self.config, self.config.enter_steps
        margin = config.confidence_sigmas * w.standard_error
        if w.starved >= need and w.data_ratio - margin >= config.moderate_ratio:
            return w.majority_cause()
        if w.starved + w.synced >= need and w.sync_ratio - margin >= config.moderate_ratio:
            return "interconnect"
        return None

    def _next_cause(self, w: Window) -> str:
        config, need = self.config, self.config.enter_steps
        if self.cause == "interconnect":
            if w.starved >= need and w.data_ratio >= config.moderate_ratio:
                return w.majority_cause()
            return "interconnect"
        best = w.majority_cause()
        if self.cause is None or (best != self.cause and w.causes.get(best, 0) >= need):
            return best
        if w.data_ratio < config.moderate_ratio <= w.sync_ratio and w.synced >= need:
            return "interconnect"
        return self.cause

    def _set(self, state: str, cause: str | None, w: Window | None) -> None:
        if state != "starved":
            self._calm_seconds = 0.0
        self.state, self.cause = state, cause
        if w is None or cause is None:
            self.tier = None
            return
        config = self.config
        # The tier is the severity where starvation shows: a window half past a recovery (or an
        # onset) must not flip it, nor the alert's labels with it.
        ratio = w.synced_ratio if cause == "interconnect" else w.starved_ratio
        if ratio is None:
            self.tier = self.tier or "moderate"
            return
        high = ratio >= config.high_ratio or (
            self.tier == "high" and ratio >= config.high_ratio - config.tier_margin_ratio
        )
        self.tier = "high" if high else "moderate"

    def _evidence(self, w: Window) -> dict[str, float | str]:
        out: dict[str, float | str] = {
            "idle_ratio": round(w.idle_ratio, 4),
            "data_wait_ratio": round(w.data_ratio, 4),
            "interconnect_wait_ratio": round(w.sync_ratio, 4),
        }
        current = self._steps[self._pos]
        bad = sorted({s.bad_reading for s in self._steps if s.bad_reading is not None})
        if bad:
            out["bad_reading"] = ",".join(bad)
        if current.h2d_ratio is not None:
            out["h2d_link_ratio"] = round(current.h2d_ratio, 4)
        if self.state == "starved" and self.cause in DATA_CAUSES and self.cause != "h2d":
            out.update(current.evidence.for_cause(self.cause or "unknown"))
        return out

    def _verdict(
        self, state: str, data: float | None, sync: float | None, idle: float | None, evidence: dict[str, float | str]
    ) -> GpuVerdict:
        return GpuVerdict(
            self.index, self.uuid, state, self.cause, self.tier, _round(data), _round(sync), _round(idle),
            self.gpu_seconds_lost, self.jobs, evidence,
        )  # fmt: skip


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


def _job_id(job: pb.JobRef) -> str:
    return job.slurm_job_id or job.k8s_pod_uid or job.container_id


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
