"""One GPU as the detector follows it: the order the steps of the rule chain run in, over the
state they share (``track_state``, at the bottom: each step imports it, never this module).

Per report (cheap and allocation-free): the gate (step 1, ``gate``), throttled time (``throttle``),
the idle share (step 2, ``idle_share``) and, without GPM, the computing share from power
(``power_share``) go into the window's open step. Per window step: the
step closes with the GPU's link time and host-to-device share (``causes``), the job is noted
(``gate``), and the state machine (step 4, ``hysteresis``) evaluates the window (``window``),
whose starved steps vote for a cause (step 3, ``causes``) and yields the GPU's verdict.

The window is a ring of steps (``window_steps`` closed ones plus the open one), allocated once and
reused.
"""

from __future__ import annotations

import math

from nodeagent.core.detector.causes import link_and_h2d
from nodeagent.core.detector.computing_source import (
    BLURRED,
    BLURRED_SHARE,
    NO_READING,
    NOTHING,
    REPORT_LEVEL,
    SM_SOURCES,
    SOURCES,
    Estimate,
    min_phase_seconds,
    report_level,
)
from nodeagent.core.detector.gate import admit, new_job
from nodeagent.core.detector.hysteresis import evaluate
from nodeagent.core.detector.idle_share import add_idle, busy_ratio
from nodeagent.core.detector.node_evidence import NodeEvidence
from nodeagent.core.detector.throttle import count_throttled
from nodeagent.core.detector.track_state import TrackState
from nodeagent.core.detector.verdict import GpuVerdict
from nodeagent.core.detector.window import GpuActivity, activity
from nodeagent.v1 import nodeagent_pb2 as pb


class GpuTrack(TrackState):
    """One GPU followed: its state (``TrackState``) and the order the steps run in."""

    def decide(self, source: str) -> None:
        """The agent says the GPU's computing-share source (or, "", stopped saying: an older agent
        took over, and it is inferred again); called only when that changes."""
        self.decided = source in SOURCES
        self.source = source if self.decided else ""
        self.source_reason = ""  # the new source's words come with it
        self.gpm = source in SM_SOURCES if self.decided else self.info_gpm
        self.reads_power = not self.gpm and not self.mig_instance
        self.instant = source not in REPORT_LEVEL

    def source_name(self) -> str:
        """The source the estimate follows: the agent's, else inferred from the readings ("" where
        nothing is read: utilization stands, as before)."""
        if self.decided:
            return self.source
        if self.gpm:
            return "gpm"
        return "power_instant" if self.saw_samples else self.power.kind

    def window_seconds(self) -> float:
        """Counted seconds in the window at the last evaluation (the GPU's weight in node ratios)."""
        return self.window_counted_seconds if self.state not in ("idle", "lost", "warmup") else 0.0

    def activity(self) -> GpuActivity | None:
        """What the GPU did over the last closed step (None before one closed with readings);
        its computing share only where the window's estimate tells (``window_estimate``)."""
        a = activity(self.steps[(self.pos - 1) % len(self.steps)])
        if a is not None and a.computing_ratio is not None and self.estimate.unknown is not None:
            return a._replace(computing_ratio=None)
        return a

    def window_sm_active(self) -> float | None:
        """GPM SM activity over the last ``window_steps`` closed steps, raw (no
        ``gpm_full_sm_active_ratio`` scaling); None without GPM readings in them."""
        sm = seconds = 0.0
        size = len(self.steps)
        for k in range(1, self.config.window_steps + 1):
            step = self.steps[(self.pos - k) % size]
            sm += step.sm
            seconds += step.sm_seconds
        return sm / seconds if seconds > 0 else None

    @property
    def estimate(self) -> Estimate:
        """``window_estimate`` as of the last window step: computed when first asked (the job
        roll-up asks only for its jobs' GPUs), not at every GPU's step."""
        if self._estimate_of != self.steps_closed:
            self._estimate, self._estimate_of = self.window_estimate(), self.steps_closed
        return self._estimate

    def window_computing(self) -> float | None:
        """The computing share from power over the window (``window_estimate``); None with GPM
        (it is the source there) or where power does not tell."""
        return self.window_estimate().computing_ratio

    def window_estimate(self) -> Estimate:
        """The computing share over the last ``window_steps`` closed steps by the GPU's source's
        estimator (``computing_source``), or why it cannot tell. Instantaneous readings (and a
        source inferred from report means, as before): over the time in which power told (a
        swing that began mid-window counts from there: a job slowed now is seen now), where it
        told for at least half a step. A moving mean or the energy counter: the window's report
        draws between its own sustained draws, where its phases are long enough."""
        if self.gpm or not self.reads_power:
            return NOTHING
        source = self.source_name()
        if source in {"none", ""}:
            return Estimate(None, NO_READING) if self.decided else NOTHING
        size = len(self.steps)
        if source in REPORT_LEVEL:
            watt_seconds = seconds = 0.0
            high: float | None = None
            low: float | None = None
            peak = trough = 0.0
            crossings = 0
            for k in range(1, self.config.window_steps + 1):
                step = self.steps[(self.pos - k) % size]
                watt_seconds += step.watt_seconds
                seconds += step.draw_seconds
                crossings += step.crossings
                if step.draw_high is not None and (high is None or step.draw_high > high):
                    high = step.draw_high
                if step.draw_low is not None and (low is None or step.draw_low < low):
                    low = step.draw_low
                if step.draw_peak is not None and step.draw_peak > peak:
                    peak = step.draw_peak
                if step.draw_trough is not None and (not trough or step.draw_trough < trough):
                    trough = step.draw_trough
            needed = min_phase_seconds(source, self.report_seconds)
            return report_level(
                watt_seconds, seconds, high, low, crossings, self.config.power_swing_factor, needed, peak, trough
            )
        computed = seconds = middle = middle_seconds = 0.0
        for k in range(1, self.config.window_steps + 1):
            step = self.steps[(self.pos - k) % size]
            computed += step.power
            seconds += step.power_seconds
            middle += step.middle
            middle_seconds += step.middle_seconds
        if middle_seconds > 0 and middle > BLURRED_SHARE * middle_seconds:
            return Estimate(None, BLURRED)
        return Estimate(computed / seconds if seconds >= 0.5 * self.config.evaluate_seconds else None)

    def forget(self) -> None:
        """Drop the window and the verdict built on it (after a long silence both are stale)."""
        for step in self.steps:
            step.reset()
        self.counters = None
        self.power.forget()
        self._estimate_of = -1
        self.gap_run, self.gap_committed, self.since_gap = 0.0, False, math.inf
        self.state, self.cause, self.tier, self.calm_seconds = "busy", None, None, 0.0

    # ---- per report: cheap and allocation-free -----------------------------------------------

    def tick(self, g: pb.GpuSample, t: float, dt: float, throttle_mask: int) -> None:
        self.last_seen = t
        source = g.computing_source
        if source != self.source or (self.decided and not source):
            self.decide(source)
        self.source_reason = g.computing_source_reason or self.source_reason  # sent when it says something new
        # Power first: the resting draw is learned from reports the gate holds out too.
        watts = None
        power = self.power
        if self.reads_power:  # a lost or unresponsive GPU reads no power: nothing to learn
            watts = power.observe(g, t, dt, throttle_mask, self.config.power_learn_seconds, instant=self.instant)
            if power.above is not None:
                self.saw_samples = True  # inferred: instantaneous from now on
        if not admit(self, g, t):
            return
        step = self.steps[self.pos]
        busy = busy_ratio(self, g, step, dt)
        if busy is None:
            return
        count_throttled(step, g, throttle_mask, dt)
        add_idle(self, step, busy, dt)
        if watts is not None:
            if power.above is None:  # a report draw: the moving-mean estimator's sums
                self.report_seconds = dt
                step.add_draw(watts, dt, power)
            else:
                step.middle += power.middle * dt
                step.middle_seconds += dt
            computing = power.computing(watts, self.config.power_swing_factor)
            if computing is not None:
                # No more than utilization says its kernels ran.
                step.power += min(computing, busy) * dt
                step.power_seconds += dt

    # ---- per window step ---------------------------------------------------------------------

    def step(self, g: pb.GpuSample | None, t: float, evidence: NodeEvidence, *, first: bool) -> GpuVerdict:
        """Close the open step with this report's counters, evaluate the window, open the next."""
        current = self.steps[self.pos]
        current.evidence = evidence
        if g is not None and not g.lost:
            link_and_h2d(self, g, t, current, first=first)
            new_job(self, g, t)
        verdict = evaluate(self, t)
        self.pos = (self.pos + 1) % len(self.steps)
        self.steps[self.pos].reset()
        self.steps_closed += 1
        return verdict
