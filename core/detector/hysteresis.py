"""Step 4 of the detector's rule chain, hysteresis: the state machine of one GPU at each window step.

A GPU enters `starved` when enough of the window's steps show it and the window's ratio clears
the moderate tier by ``confidence_sigmas`` standard errors; its cause then changes only by the
window's majority; it leaves only after the ratio of its cause stays under ``exit_ratio`` for
``exit_seconds``. Short idle gaps never reach here (``idle_share`` drops them), warm-up is the
gate's (``gate``), `throttled` comes first (``throttle``). The tier (moderate, high) has a margin
so a window half past an onset or a recovery does not flip it. The result is the GPU's verdict
(step 5, per GPU; ``node`` rolls them up), with the evidence it carries (``evidence``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeagent.core.detector.gate import gated_state
from nodeagent.core.detector.throttle import is_throttled
from nodeagent.core.detector.verdict import DATA_CAUSES, GpuVerdict
from nodeagent.core.detector.window import Window

if TYPE_CHECKING:
    from nodeagent.core.detector.track_state import TrackState


def evaluate(track: TrackState, t: float) -> GpuVerdict:
    """The GPU's state, cause and tier over the window that ends with the step now closing."""
    config = track.config
    since = t - track.last_eval if track.last_eval is not None else config.evaluate_seconds
    track.last_eval, track.last_since, track.step_lost = t, since, 0.0
    gated = gated_state(track)
    if gated is not None:
        _set(track, gated, None, None)
        track.window_counted_seconds = 0.0
        return _verdict(track, gated, None, None, None, {})
    w = Window(track.steps, track.pos, config)
    track.window_counted_seconds = w.seconds
    previous, previous_cause = track.state, track.cause
    if is_throttled(w, previous, config):
        _set(track, "throttled", None, None)
    elif w.seconds <= 0:
        pass  # nothing counted yet (all gap): keep the verdict
    elif previous == "starved":
        # Calm: the ratio of the cause being left stays clearly below the tier.
        ratio = w.sync_ratio if previous_cause == "interconnect" else w.data_ratio
        track.calm_seconds = track.calm_seconds + since if ratio < config.exit_ratio else 0.0
        if track.calm_seconds < config.exit_seconds:
            _set(track, "starved", _next_cause(track, w), w)
        elif previous_cause != "interconnect" and _enters(track, w) == "interconnect":
            _set(track, "starved", "interconnect", w)
        else:
            _set(track, "busy", None, None)
    else:
        cause = _enters(track, w)
        _set(track, "starved" if cause else "busy", cause, w)
    if track.state == "starved" and track.cause in DATA_CAUSES:
        entered = previous != "starved" or previous_cause not in DATA_CAUSES
        track.step_lost = w.data_seconds if entered else w.current_data_seconds
        track.gpu_seconds_lost += track.step_lost
    return _verdict(track, track.state, w.data_ratio, w.sync_ratio, w.idle_ratio, evidence(track, w))


def _enters(track: TrackState, w: Window) -> str | None:
    """The cause a GPU that is not starved enters `starved` with, if the window shows one."""
    config, need = track.config, track.config.enter_steps
    margin = config.confidence_sigmas * w.standard_error
    if w.starved >= need and w.data_ratio - margin >= config.moderate_ratio:
        return w.majority_cause()
    if w.starved + w.synced >= need and w.sync_ratio - margin >= config.moderate_ratio:
        return "interconnect"
    return None


def _next_cause(track: TrackState, w: Window) -> str:
    config, need = track.config, track.config.enter_steps
    if track.cause == "interconnect":
        if w.starved >= need and w.data_ratio >= config.moderate_ratio:
            return w.majority_cause()
        return "interconnect"
    best = w.majority_cause()
    if track.cause is None or (best != track.cause and w.causes.get(best, 0) >= need):
        return best
    if w.data_ratio < config.moderate_ratio <= w.sync_ratio and w.synced >= need:
        return "interconnect"
    return track.cause


def _set(track: TrackState, state: str, cause: str | None, w: Window | None) -> None:
    if state != "starved":
        track.calm_seconds = 0.0
    track.state, track.cause = state, cause
    if w is None or cause is None:
        track.tier = None
        return
    config = track.config
    # The tier is the severity where starvation shows: a window half past a recovery (or an
    # onset) must not flip it, nor the alert's labels with it.
    ratio = w.synced_ratio if cause == "interconnect" else w.starved_ratio
    if ratio is None:
        track.tier = track.tier or "moderate"
        return
    high = ratio >= config.high_ratio or (
        track.tier == "high" and ratio >= config.high_ratio - config.tier_margin_ratio
    )
    track.tier = "high" if high else "moderate"


def _verdict(
    track: TrackState,
    state: str,
    data: float | None,
    sync: float | None,
    idle: float | None,
    evidence: dict[str, float | str],
) -> GpuVerdict:
    return GpuVerdict(
        track.index, track.uuid, state, track.cause, track.tier, _round(data), _round(sync), _round(idle),
        track.gpu_seconds_lost, track.jobs, evidence,
    )  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def evidence(track: TrackState, w: Window) -> dict[str, float | str]:
    """The values behind the GPU's verdict: its shares, and what decided a data cause."""
    out: dict[str, float | str] = {
        "idle_ratio": round(w.idle_ratio, 4),
        "data_wait_ratio": round(w.data_ratio, 4),
        "interconnect_wait_ratio": round(w.sync_ratio, 4),
    }
    current = track.steps[track.pos]
    bad = sorted({s.bad_reading for s in track.steps if s.bad_reading is not None})
    if bad:
        out["bad_reading"] = ",".join(bad)
    if current.h2d_ratio is not None:
        out["h2d_link_ratio"] = round(current.h2d_ratio, 4)
    if track.state == "starved" and track.cause in DATA_CAUSES and track.cause != "h2d":
        out.update(current.evidence.for_cause(track.cause or "unknown"))
    return out
