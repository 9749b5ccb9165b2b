"""The detector's window over one GPU: the steps it is made of, and their sums at evaluation (what
steps 2 to 4 of the rule chain write and read).

A step holds what the reports of one ``evaluate_seconds`` added (counted seconds, idle seconds,
idle² for the standard error, held-apart gap time, throttled time, and NVML utilization and GPM SM
activity as read, gaps included, and the computing share from power: ``activity``, what the
collector's job roll-up compares across the nodes of a job) and, once closed, the link
time of its peer traffic, its host-to-device share and the node's evidence. ``Window`` sums the
last ``window_steps`` of them and counts the steps that vote for each state and cause (a starved
step's cause is ``causes.step_cause``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from nodeagent.core.detector.causes import step_cause
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.step import Step
from nodeagent.core.detector.verdict import majority_cause


class GpuActivity(NamedTuple):
    """What one GPU did over one closed step, as read: the job roll-up's per-step inputs (a named
    tuple: made for every GPU of a job at every step, it must be cheap)."""

    seconds: float
    # NVML utilization (a GPU waiting in a collective reads near 1: its kernel stays resident).
    utilization_ratio: float
    # GPM SM activity (Hopper+), None without it.
    sm_active_ratio: float | None
    # Share of the step with the configured throttle reasons set.
    throttled_ratio: float
    # The step's share of counted time waiting for data (idle time its link time does not
    # explain, as the window splits it); None when the step counted nothing.
    data_wait_ratio: float | None
    # The share of the step it computed by its power draw (``power_share``: GPUs without GPM);
    # None where power did not tell for at least half the step.
    computing_ratio: float | None = None


def activity(step: Step) -> GpuActivity | None:
    """The step's activity; None when no report of it said anything about the GPU."""
    seconds = step.read_seconds
    if seconds <= 0:
        return None
    sm = step.sm / step.sm_seconds if step.sm_seconds > 0 else None
    counted = step.seconds
    data = None
    if counted > 0:
        sync = min(step.link_seconds * counted / step.span, step.idle) if step.span > 0 else 0.0
        data = (step.idle - sync) / counted
    computing = step.power / step.power_seconds if step.power_seconds * 2 >= seconds else None
    return GpuActivity(seconds, step.util / seconds, sm, min(1.0, step.throttled / seconds), data, computing)


class Window:
    """Sums over the last ``window_steps`` closed steps (the open one included: it is closing)."""

    __slots__ = (
        "causes", "config", "current_data_seconds", "data_seconds", "idle", "idle_sq", "latest_cause", "seconds",
        "starved", "starved_data", "starved_seconds", "sync_seconds", "synced", "synced_seconds", "synced_sync",
        "throttled", "ticks",
    )  # fmt: skip

    def __init__(self, steps: list[Step], pos: int, config: DetectorConfig) -> None:
        # Sums in locals, stored once at the end: this runs for every GPU at every step.
        self.config = config
        seconds = idle = idle_sq = data_sum = sync_sum = current = 0.0
        starved_seconds = starved_data = synced_seconds = synced_sync = 0.0
        ticks = starved = synced = throttled = 0
        causes: dict[str, int] = {}
        latest: str | None = None
        moderate, full, share = config.moderate_ratio, 0.5 * config.evaluate_seconds, config.throttled_share_ratio
        size = len(steps)
        for k in range(config.window_steps):
            s = steps[(pos - k) % size]
            counted, span = s.seconds, s.span
            extent = counted + s.pend_seconds
            extent = max(extent, span)
            if extent > 0 and s.throttled >= share * extent:
                throttled += 1
            if counted <= 0 or span <= 0:
                continue  # nothing counted, or the first step (no counters to split idle time by)
            step_idle = s.idle
            sync = s.link_seconds * counted / span
            sync = min(sync, step_idle)
            data = step_idle - sync
            seconds += counted
            idle += step_idle
            idle_sq += s.idle_sq
            ticks += s.ticks
            sync_sum += sync
            data_sum += data
            if k == 0:
                current = data
            if counted < full:
                continue  # too little counted time in this step to vote
            if sync >= moderate * counted:
                synced_seconds += counted
                synced_sync += sync
            if data >= moderate * counted:
                starved += 1
                starved_seconds += counted
                starved_data += data
                cause = step_cause(s, config)
                causes[cause] = causes.get(cause, 0) + 1
                if latest is None:
                    latest = cause
            elif sync >= moderate * counted:
                synced += 1
        self.seconds, self.idle, self.idle_sq, self.ticks = seconds, idle, idle_sq, ticks
        self.data_seconds, self.sync_seconds, self.current_data_seconds = data_sum, sync_sum, current
        self.starved_seconds, self.starved_data = starved_seconds, starved_data
        self.synced_seconds, self.synced_sync = synced_seconds, synced_sync
        self.starved, self.synced, self.throttled = starved, synced, throttled
        self.causes, self.latest_cause = causes, latest

    @property
    def data_ratio(self) -> float:
        return self.data_seconds / self.seconds if self.seconds else 0.0

    @property
    def sync_ratio(self) -> float:
        return self.sync_seconds / self.seconds if self.seconds else 0.0

    @property
    def starved_ratio(self) -> float | None:
        """Data waiting over the steps that show starvation; None when none does."""
        return self.starved_data / self.starved_seconds if self.starved_seconds else None

    @property
    def synced_ratio(self) -> float | None:
        """Interconnect waiting over the steps that show it; None when none does."""
        return self.synced_sync / self.synced_seconds if self.synced_seconds else None

    @property
    def idle_ratio(self) -> float:
        return self.idle / self.seconds if self.seconds else 0.0

    @property
    def standard_error(self) -> float:
        """Of the window's idle share, from the spread of its per-report values."""
        if not self.seconds or not self.ticks:
            return 0.0
        mean = self.idle / self.seconds
        return math.sqrt(max(0.0, self.idle_sq / self.seconds - mean * mean) / self.ticks)

    def majority_cause(self) -> str:
        """The cause most starved steps show (``verdict.majority_cause``'s tie rule); ``unknown`` without."""
        return majority_cause(self.causes, self.latest_cause) or "unknown"
