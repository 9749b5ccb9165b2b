"""Step 2 of the detector's rule chain, the idle share: how much of its assigned time a GPU sat idle.

Per report the busy share is NVML's utilization, capped by GPM SM activity on Hopper and newer
(busy-but-shallow is not busy), or by DCGM's SM activity where the agent took it (A100, A10, L40S);
a MIG instance, which has no utilization of its own, is as busy as
its SM activity says. SM activity the agent holds suspect (``suspect_fields``: 0 or frozen while
the GPU is busy) decides nothing. The GPU adds its counted seconds, idle seconds and idle² (for the
standard error) to the window's open step. Reports in which the GPU was nearly idle are held
apart as a possible gap; a gap that outlasts ``gap_seconds`` is counted after all (moved into the
steps it came from), a shorter one is dropped (the hysteresis of step 4 never sees it). But a
gap that begins within ``gap_seconds`` of the end of a short one counts as it comes: checkpoints
and epoch boundaries are minutes apart, while a job whose steps last seconds and whose GPUs sit
idle for a whole report or more in each (a long step starved of data) idles again every step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.core.detector.step import Step
    from nodeagent.core.detector.track_state import TrackState


def busy_ratio(track: TrackState, g: pb.GpuSample, step: Step, dt: float) -> float | None:
    """The share of the report's time the GPU was busy; None when the report says nothing about it.

    The values as read go into the step's activity sums too (``window.activity``); an SM activity
    the agent holds suspect decides nothing."""
    # SM activity counts from GPM, or from DCGM's DCGM_FI_PROF_SM_ACTIVE where the agent took it
    # (computing_source "dcgm": the same activity, on GPUs without GPM).
    sm_usable = (
        (track.gpm or g.computing_source == "dcgm")
        and g.HasField("sm_active_ratio")
        and "sm_active_ratio" not in g.suspect_fields
    )
    full = track.config.gpm_full_sm_active_ratio
    if not g.HasField("utilization_gpu_ratio"):
        if not sm_usable or not 0.0 <= g.sm_active_ratio <= 1.0:
            return None
        return min(1.0, g.sm_active_ratio / full)  # a MIG instance: GPM is all it has
    busy = g.utilization_gpu_ratio
    if not 0.0 <= busy <= 1.0:
        return None  # NaN or garbage: this report says nothing about the GPU
    step.util += busy * dt
    step.read_seconds += dt
    if sm_usable:
        sm = g.sm_active_ratio
        if 0.0 <= sm <= 1.0:
            step.sm += sm * dt
            step.sm_seconds += dt
        if 0.0 <= sm < busy * full:
            busy = sm / full
    return busy


def add_idle(track: TrackState, step: Step, busy: float, dt: float) -> None:
    """Count ``dt`` seconds at this busy share into the open step, or hold them apart as a gap."""
    config = track.config
    idle = 1.0 - busy
    if busy < (config.gap_end_busy_ratio if track.gap_run else config.gap_busy_ratio):
        if not track.gap_run and track.since_gap < config.gap_seconds:
            track.gap_committed = True  # it came back: the job's step, counted where it happens
        track.gap_run += dt
        if not track.gap_committed:
            if track.gap_run <= config.gap_seconds:
                step.pend_seconds += dt
                step.pend_idle += idle * dt
                step.pend_sq += idle * idle * dt
                step.pend_ticks += 1
                return
            _commit_gap(track)
    elif track.gap_run:
        end_gap(track)
    if not track.gap_run:
        track.since_gap += dt
    step.seconds += dt
    step.idle += idle * dt
    step.idle_sq += idle * idle * dt
    step.ticks += 1


def _commit_gap(track: TrackState) -> None:
    """The gap lasted too long to be a pause: count it where it happened."""
    for step in track.steps:
        step.seconds += step.pend_seconds
        step.idle += step.pend_idle
        step.idle_sq += step.pend_sq
        step.ticks += step.pend_ticks
        step.pend_seconds = step.pend_idle = step.pend_sq = 0.0
        step.pend_ticks = 0
    track.gap_committed = True


def end_gap(track: TrackState) -> None:
    """A gap ended: one held apart (short of ``gap_seconds``) is dropped. Either way a short one
    starts the count of seconds within which another is the job's step (``since_gap``)."""
    if track.gap_run:
        if not track.gap_committed:
            for step in track.steps:
                step.pend_seconds = step.pend_idle = step.pend_sq = 0.0
                step.pend_ticks = 0
        track.since_gap = 0.0 if track.gap_run <= track.config.gap_seconds else math.inf
    track.gap_run, track.gap_committed = 0.0, False
