"""One step of the detector's window over one GPU: what the reports of one ``evaluate_seconds``
added, and once closed its link time, host-to-device share and the node's evidence (``window``
says what each sum is for). At the bottom of the detector: every step of the rule chain reads or
writes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeagent.core.detector.node_evidence import EMPTY, NodeEvidence

if TYPE_CHECKING:
    from nodeagent.core.detector.power_share import PowerTrack


class Step:
    """One evaluate_seconds of one GPU; reset and reused, never reallocated."""

    __slots__ = (
        "bad_reading", "crossings", "draw_high", "draw_low", "draw_peak", "draw_seconds", "draw_trough", "evidence",
        "h2d_ratio", "idle",
        "idle_sq", "link_seconds", "middle", "middle_seconds", "pend_idle", "pend_seconds", "pend_sq", "pend_ticks",
        "power", "power_seconds", "read_seconds", "seconds", "sm", "sm_seconds", "span", "throttled", "ticks", "util",
        "watt_seconds",
    )  # fmt: skip

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds = self.idle = self.idle_sq = 0.0
        self.ticks = self.pend_ticks = 0
        self.pend_seconds = self.pend_idle = self.pend_sq = 0.0
        self.throttled = self.span = self.link_seconds = 0.0
        # Utilization and SM activity as read (seconds-weighted sums), and the seconds they cover.
        self.util = self.read_seconds = self.sm = self.sm_seconds = 0.0
        # The computing share from power (GPUs without GPM: ``power_share``), seconds-weighted,
        # and the seconds in which power told.
        self.power = self.power_seconds = 0.0
        # The report draws (a moving mean or the energy counter: ``computing_source``): their
        # seconds-weighted sum, seconds, sustained extremes (each the lower, or higher, of two
        # consecutive draws), single-report extremes and midpoint crossings; and, for
        # instantaneous readings, their share between the two draws (seconds-weighted).
        self.watt_seconds = self.draw_seconds = self.middle = self.middle_seconds = 0.0
        self.draw_high: float | None = None
        self.draw_low: float | None = None
        self.draw_peak: float | None = None
        self.draw_trough: float | None = None
        self.crossings = 0
        self.h2d_ratio: float | None = None
        # "nvlink" or "pcie": the step's counters of that link grew faster than it carries.
        self.bad_reading: str | None = None
        self.evidence: NodeEvidence = EMPTY

    def add_draw(self, watts: float, dt: float, power: PowerTrack) -> None:
        """A report's draw (a moving mean's or the energy counter's) into the moving-mean
        estimator's sums: one call per such GPU per report, no allocation."""
        self.watt_seconds += watts * dt
        self.draw_seconds += dt
        if self.draw_peak is None or watts > self.draw_peak:
            self.draw_peak = watts
        if self.draw_trough is None or watts < self.draw_trough:
            self.draw_trough = watts
        if power.sustained:
            high, low = power.sustained_high, power.sustained_low
            if self.draw_high is None or high > self.draw_high:
                self.draw_high = high
            if self.draw_low is None or low < self.draw_low:
                self.draw_low = low
            self.crossings += power.crossed
