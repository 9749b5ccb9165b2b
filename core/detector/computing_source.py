"""Which reading tells a GPU's computing share, and whether it can at this job's step length.

The agent decides each GPU's source from its readings and sends it (``GpuSample.computing_source``,
docs/agent.md): ``gpm``, ``dcgm``, ``power_instant``, ``power_mean``, ``energy`` or ``none``.
Where it has not (an older agent: the field is empty) the collector infers it as it always did:
GPM where the GPU has it; instantaneous power once readings between reports came (kept from then
on: an idle GPU is not sampled); else the energy counter; else the power reading, taken as a
moving mean (one reading a report tells no more than a mean would); else nothing, which keeps
NVML utilization as the measure, as before (a decided ``none`` is unknown).

Each source has its estimator (``GpuTrack.window_estimate``), over the detector's window:

- ``gpm``, ``dcgm``: SM activity (DCGM's SM-active arrives in ``sm_active_ratio`` as GPM's does).
- ``power_instant``: the share of readings above the boundary between the computing and resting
  draws (``power_share.py``). A lag, or a sensor that samples a quarter of the time in short
  windows, leaves the share over many steps as it is where the readings are not locked to the
  step. It cannot tell where most readings fall between the two draws (``blurred``: a sensor whose
  own averaging spans the job's phases): more than ``BLURRED_SHARE`` of them over the window.
- ``power_mean``, ``energy``: the report's draw (the energy counter's increase, else the mean of
  the readings between reports, else the power reading) placed between the window's own sustained
  draws (each the lower, or higher, of two consecutive reports': held two reports). The mean is
  linear, so a report across a phase edge counts its share exactly where the two draws are the
  job's. They are only where the job's phases are long against what averages them: the window's
  sustained draws at least ``power_swing_factor`` apart (else ``no_swing``), and its phases, its
  power-told seconds over the times the report draw crossed the learned midpoint, at least
  ``PHASE_FACTOR`` times the longer of the report interval and the reading's own averaging
  (``MEAN_SECONDS`` for a moving mean; the energy counter's mean is the interval's), and some
  pair of reports held each draw: the share between the sustained draws within ``LEVEL_SHARE``
  of the share between the single reports' extremes (a phase shorter than that never fills two
  reports in a row, and the sustained draws fall short of the job's) (else ``short_phases``).
- ``none`` (decided): ``no_reading``.

Step length: the collector is not told it. Under ``power_mean`` and ``energy`` the phase length
is inferred as above (a cycle is two phases); where the draw never swings it is only known to be
shorter than what averages it, which is what the reason says. Under ``power_instant`` it is not
needed: a phase of two readings (0.2 s) teaches its draw; shorter phases are still counted in the
share of readings, with the noise of readings that alias against a step that barely varies (it
cancels over windows), and a sensor whose averaging spans them is ``blurred``.

A GPU whose estimator cannot tell has its wait share unknown (a reason code, and words for the
verdict's notes: ``unknown_words``); the job roll-up never puts another estimate in its place.
"""

from __future__ import annotations

from typing import Final, NamedTuple

SOURCES: Final = frozenset({"gpm", "dcgm", "power_instant", "power_mean", "energy", "none"})
# Sources whose reading is SM activity.
SM_SOURCES: Final = frozenset({"gpm", "dcgm"})
# Sources whose estimator places the report's draw between learned draws.
REPORT_LEVEL: Final = frozenset({"power_mean", "energy"})
# The averaging of power read as a moving mean (nvmlDeviceGetPowerUsage on Ampere but GA100, Ada,
# Hopper: the last second's mean).
MEAN_SECONDS: Final = 1.0
# A report-level estimate tells where the job's phases last this many times what averages them.
PHASE_FACTOR: Final = 2.0
# A report-level share tells where it moves by at most this much between the sustained draws
# and the single reports' extremes (``report_level``).
LEVEL_SHARE: Final = 0.05
# Instantaneous readings tell where at most this share of them falls between the two draws.
BLURRED_SHARE: Final = 0.5

# Reason codes (evidence ``wait_unknown_reason``).
NO_READING: Final = "no_reading"
NO_SWING: Final = "no_swing"
SHORT_PHASES: Final = "short_phases"
BLURRED: Final = "blurred"


class Estimate(NamedTuple):
    """A GPU's computing share over the window, or why there is none (``unknown``: a code)."""

    computing_ratio: float | None
    unknown: str | None = None
    # The job's phase length as inferred (report-level sources), and the least they needed.
    phase_seconds: float | None = None
    needed_seconds: float | None = None


NOTHING: Final = Estimate(None)


def min_phase_seconds(source: str, report_seconds: float) -> float:
    """The shortest phase a report-level source separates at this report interval."""
    averaging = MEAN_SECONDS if source == "power_mean" else 0.0
    return PHASE_FACTOR * max(report_seconds, averaging)


def report_level(
    watt_seconds: float, seconds: float, high: float | None, low: float | None, crossings: int,
    swing_factor: float, needed: float, peak: float = 0.0, trough: float = 0.0,
) -> Estimate:  # fmt: skip
    """The window's computing share from its report draws (sums over its steps), or why not.
    ``high``/``low``: the sustained draws (each the lower, or higher, of two consecutive
    reports'); ``peak``/``trough``: the highest and lowest single report's."""
    if seconds <= 0:
        return Estimate(None, NO_READING)
    if high is None or low is None or high < swing_factor * max(low, 1.0):
        return Estimate(None, NO_SWING, None, needed)
    phase = seconds / crossings if crossings else seconds
    if phase < needed:
        return Estimate(None, SHORT_PHASES, phase, needed)
    mean = watt_seconds / seconds
    share = (mean - low) / (high - low)
    # The sustained draws are the job's where the phase held one draw over two reports. Where
    # every pair straddled a phase edge they fall short of it, and the single reports' extremes
    # sit beyond them: the share between those differs from the share between these by about
    # the error. Further apart than LEVEL_SHARE, the phases are too short to tell.
    if peak > high or (0.0 < trough < low):
        top, bottom = max(peak, high), min(trough, low) if trough else low
        if abs(share - (mean - bottom) / (top - bottom)) > LEVEL_SHARE:
            return Estimate(None, SHORT_PHASES, phase, needed)
    return Estimate(min(1.0, max(0.0, share)), None, phase, needed)


# Each reason code in words, where only the code is at hand (the nodes table, the node page).
CODE_WORDS: Final = {
    NO_READING: "no reading tells computing from waiting (no GPM, DCGM or power)",
    NO_SWING: "the job's phases average out in the GPUs' power readings: the draw never swings",
    SHORT_PHASES: "the job's phases are shorter than the GPUs' power readings need to separate them",
    BLURRED: "most power readings fall between the computing and resting draws",
}


def unknown_words(source: str, estimate: Estimate) -> str:
    """What a GPU reads and why it cannot tell, for the verdict's notes (after "node-1's GPUs 0,1")."""
    reads = {
        "power_mean": f"read power as a {MEAN_SECONDS:g}-s mean",
        "energy": "read only the energy counter",
        "power_instant": "read instantaneous power",
        "none": "have no reading of computing (no GPM, DCGM or power)",
    }.get(source, f"read {source}")
    code, needed = estimate.unknown, estimate.needed_seconds
    if code == NO_SWING:
        under = f", shorter than about {needed:.0f} s," if needed else ""
        why = f"the job's phases{under} average out in it and the draw never swings"
    elif code == SHORT_PHASES:
        why = (
            f"the job's phases of about {estimate.phase_seconds or 0.0:.1f} s are shorter than the "
            f"{needed or 0.0:.0f} s it needs to separate computing from waiting"
        )
    elif code == BLURRED:
        why = "most readings fall between the computing and resting draws (the sensor averages the job's phases)"
    else:
        why = "nothing separates computing from waiting"
    return f"{reads}; {why}: wait share unknown"
