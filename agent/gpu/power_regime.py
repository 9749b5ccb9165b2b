"""Which reading tells a GPU's computing share, decided from the readings themselves.

Each report names its GPU's source (``GpuSample.computing_source``) and the evidence for it
(``computing_source_reason``), so the collector picks an estimator that fits the readings, or
says the share is unknown:

- ``gpm``: GPM SM activity (Hopper and newer);
- ``dcgm``: DCGM's SM activity (set where DCGM answers for the GPU; never overridden here);
- ``power_instant``: the draw read between reports (``power_samples.py``) is instantaneous and
  fast enough to see a step's phases;
- ``power_mean``: those readings are a moving mean (``nvmlDeviceGetPowerUsage`` on Ampere other
  than GA100, on Ada and on Hopper: the last second's mean);
- ``energy``: no usable power reading, the energy counter advances;
- ``none``: neither.

The model is only a prior (GA100, whose ``GetPowerUsage`` is near-instant: ``power_instant``;
any other board: ``power_mean``). Readings overrule it, in spans: while the readings between
reports vary, they are gathered until a span holds enough of them to tell (``_Span``), and the
span votes ``power_instant`` or ``power_mean``; the source changes when 3 of the last 5 votes
name another one (hysteresis). Beside the spans, the readings' mean is held against the energy
counter's over the same reports: two 10-s spans in a row apart, and the readings are not the draw
(``energy``) until one agrees again. A GPU at rest reads flat from any source: a flat span casts no
vote, so the last decided source stands. The thresholds and why: docs/agent.md, "Where a GPU's
computing share comes from".

Cost: a tick copies the readings since the last one into a preallocated array (about 10 a GPU at
the default 0.1 s) and compares two numbers; a span's vote (every few seconds while a job's draw
varies) is one pass over at most ``SPAN_READINGS`` floats.
"""

from __future__ import annotations

import math
import re
from itertools import pairwise
from typing import Final

from nodeagent.v1 import nodeagent_pb2 as pb

GPM: Final = "gpm"
DCGM: Final = "dcgm"
POWER_INSTANT: Final = "power_instant"
POWER_MEAN: Final = "power_mean"
ENERGY: Final = "energy"
NONE: Final = "none"

# A span votes once it holds this many readings and changes (4 s at 0.1 s while the draw moves),
# or once it is full; at most SPAN_READINGS are kept (12.8 s at 0.1 s).
SPAN_MIN_READINGS: Final = 20
SPAN_MIN_CHANGES: Final = 4
SPAN_READINGS: Final = 128
# A sensor's own clock: at least CADENCE_HOLDS changes, every 0.7 to 1.5 s, their spread
# (coefficient of variation) at most 0.15: a mean updated once a second. A job's phases are not
# that regular (a step's compute and wait differ), and an instantaneous reading changes at every
# read (noise) or only at phase edges.
CADENCE_HOLDS: Final = 3
CADENCE_SECONDS: Final = (0.7, 1.5)
CADENCE_CV: Final = 0.15
# Wide: the span's range at least 30% of its highest reading, as a job's compute and wait draws
# are apart (several times, DESIGN). A narrower span (a resting or steadily computing GPU, read
# by any source) casts no vote.
WIDE_SHARE: Final = 0.3
# Two groups: at most 25% of the readings in the middle half of the range (an instantaneous
# reading is between only at a phase edge). Otherwise: a moving mean moves there in steps under
# half the range; an instantaneous reading jumps.
TWO_GROUPS_BETWEEN: Final = 0.25
JUMP_SHARE: Final = 0.5
# The readings' mean against the energy counter's, over at least ENERGY_SPAN_SECONDS of reports
# with readings: apart by more than max(40 W, 35%), the readings are not the draw.
ENERGY_SPAN_SECONDS: Final = 10.0
ENERGY_APART_WATTS: Final = 40.0
ENERGY_APART_SHARE: Final = 0.35
ENERGY_SPANS_TO_SWITCH: Final = 2  # in a row; one span that agrees gives the readings back
# Hysteresis: the last VOTES_KEPT votes are kept; VOTES_TO_SWITCH of them change the source.
VOTES_KEPT: Final = 5
VOTES_TO_SWITCH: Final = 3

_GA100: Final = re.compile(r"\bA(?:100|800|30)\b")  # A100, A800 and A30 are GA100 boards


def prior(info: pb.GpuInfo) -> tuple[str, str]:
    """The source a GPU's model suggests, before its readings say: GA100's ``GetPowerUsage`` is
    near-instant, every later board's (and other Ampere's) the last second's mean."""
    if _GA100.search(info.name):
        return POWER_INSTANT, f"prior: {info.name} is GA100 (near-instant power); no varying readings yet"
    return POWER_MEAN, f"prior: {info.name or 'this GPU'} reads power as a 1-s mean; no varying readings yet"


class PowerRegime:
    """One GPU's readings between reports, judged span by span: which source they are."""

    __slots__ = (
        "_apart", "_buffer", "_changes", "_energy_at", "_energy_mj", "_energy_read", "_energy_seconds",
        "_energy_watts", "_hold_sq", "_hold_sum", "_holds", "_n", "_voted", "_votes", "energy_advances",
        "reason", "source",
    )  # fmt: skip

    def __init__(self, info: pb.GpuInfo) -> None:
        self.source, self.reason = prior(info)
        self._voted = (self.source, self.reason)  # what the spans' votes decided, energy aside
        self._apart = 0  # energy spans in a row whose readings disagreed with the counter
        self._buffer = [0.0] * SPAN_READINGS  # the span's readings, written in place
        self._n = 0
        self._changes = 0
        self._holds = 0
        self._hold_sum = 0.0
        self._hold_sq = 0.0
        self._votes: list[tuple[str, str]] = []
        self._energy_mj = -1  # the counter at the last tick; -1: none yet
        self._energy_at = 0.0
        self._energy_read = 0.0  # readings' watt-seconds, over reports with readings
        self._energy_watts = 0.0  # the counter's watt-seconds over the same reports
        self._energy_seconds = 0.0
        self.energy_advances = False

    def observe(self, watts: list[float], changes: int, holds: int, hold_sum: float, hold_sq: float) -> float | None:
        """A tick's readings since the last one: ``changes`` between consecutive readings, and
        ``holds`` times between changes (their sum and sum of squares, in seconds). Returns their
        mean (None without readings), for ``observe_energy``."""
        if not watts:
            return None
        n, count = self._n, len(watts)
        room = SPAN_READINGS - n
        if count <= room:
            self._buffer[n : n + count] = watts  # same length: the list keeps its size
            self._n = n + count
        elif room > 0:
            self._buffer[n:] = watts[:room]
            self._n = SPAN_READINGS
        self._changes += changes
        self._holds += holds
        self._hold_sum += hold_sum
        self._hold_sq += hold_sq
        if n >= SPAN_READINGS or (n >= SPAN_MIN_READINGS and self._changes >= SPAN_MIN_CHANGES):
            self._judge_span()
        return sum(watts) / count

    def observe_energy(self, energy_mj: int | None, now: float, readings_mean: float | None) -> None:
        """The tick's energy counter (``energy_millijoules_total``), and the mean of the readings
        since the last tick: over enough reports, the two means must agree."""
        if energy_mj is None:
            self._energy_mj, self.energy_advances = -1, False
            return
        previous, at = self._energy_mj, self._energy_at
        self._energy_mj, self._energy_at = energy_mj, now
        if previous < 0 or energy_mj < previous or now <= at:
            return  # the first reading, or the counter reset (driver reload)
        self.energy_advances = energy_mj > previous
        if readings_mean is None or not self.energy_advances:
            return  # a counter that stands still says nothing of the readings
        seconds = now - at
        self._energy_read += readings_mean * seconds
        self._energy_watts += (energy_mj - previous) / 1000.0
        self._energy_seconds += seconds
        if self._energy_seconds >= ENERGY_SPAN_SECONDS:
            span = self._energy_seconds
            read, counted = self._energy_read / span, self._energy_watts / span
            self._energy_read = self._energy_watts = self._energy_seconds = 0.0
            if abs(read - counted) <= max(ENERGY_APART_WATTS, ENERGY_APART_SHARE * counted):
                self._apart = 0
                self.source, self.reason = self._voted
                return
            self._apart += 1
            if self._apart >= ENERGY_SPANS_TO_SWITCH:
                self.source = ENERGY
                self.reason = (
                    f"readings average {read:.0f} W, the energy counter {counted:.0f} W "
                    f"({self._apart} spans of {span:.0f} s): not the draw"
                )

    def tells_per_report(self, *, undecided: bool) -> bool:
        """Whether a reading a report says all there is (the GPU may rest from reads between
        reports, ``power_samples.py``): readings that are not the draw (``energy``), or a moving
        mean while the energy counter advances (the collector takes the report's draw from the
        counter, never the readings), that the latest span's vote confirmed, or ``undecided``: a
        job whose draw cast no vote for long enough."""
        if self.source == ENERGY:
            return True
        if self.source != POWER_MEAN or not self.energy_advances:
            return False
        return undecided or (bool(self._votes) and self._votes[-1][0] == POWER_MEAN)

    def forget_span(self) -> None:
        """Readings stopped (no process on the GPU): the next span starts afresh."""
        self._n = self._changes = self._holds = 0
        self._hold_sum = self._hold_sq = 0.0

    # -- a span's vote --

    def _judge_span(self) -> None:
        buffer, n = self._buffer, self._n
        holds, hold_sum, hold_sq = self._holds, self._hold_sum, self._hold_sq
        self.forget_span()
        if holds >= CADENCE_HOLDS:
            hold = hold_sum / holds
            cv = math.sqrt(max(0.0, hold_sq / holds - hold * hold)) / hold
            if CADENCE_SECONDS[0] <= hold <= CADENCE_SECONDS[1] and cv <= CADENCE_CV:
                self._vote(
                    POWER_MEAN,
                    f"readings change every {hold:.2f} s like a clock (spread {cv:.0%}): a mean updated each second",
                )
                return
        span = buffer[:n]
        low, high = min(span), max(span)
        spread = high - low
        if spread < WIDE_SHARE * high:
            return  # flat or narrow: any source reads a resting or steady GPU so; the source stands
        lower, upper = low + spread / 4.0, high - spread / 4.0
        jump = max(abs(after - before) for before, after in pairwise(span))
        between = sum(1 for value in span if lower < value < upper)
        jump_share, between_share = jump / spread, between / n
        said = f"{between_share:.0%} between {low:.0f} and {high:.0f} W"
        if between_share <= TWO_GROUPS_BETWEEN:
            self._vote(POWER_INSTANT, f"readings fall in two groups ({said}): instantaneous")
        elif jump_share < JUMP_SHARE:
            self._vote(POWER_MEAN, f"readings move in small steps (at most {jump_share:.0%}; {said}): a moving mean")
        else:
            self._vote(POWER_INSTANT, f"readings jump {jump_share:.0%} of their range ({said}): instantaneous")

    def _vote(self, source: str, reason: str) -> None:
        votes = self._votes
        votes.append((source, reason))
        if len(votes) > VOTES_KEPT:
            del votes[0]
        if source == self._voted[0]:
            self._voted = (source, reason)  # the latest evidence for the source in force
        else:
            agreeing = sum(1 for voted, _ in votes if voted == source)
            if agreeing < VOTES_TO_SWITCH:
                return
            self._voted = (source, f"{reason} ({agreeing} of {len(votes)} spans)")
        if self.source != ENERGY:
            self.source, self.reason = self._voted


def decide(regime: PowerRegime, sample: pb.GpuSample, info: pb.GpuInfo, in_mig_mode: bool, reads: str) -> None:
    """The GPU's source into its sample, after the tick's readings. ``reads``: "between" while the
    draw is read between reports (``power_samples.py``), "off" where it is not read between reports
    (``gpu_power_sample_seconds = 0``), "unreadable" where neither field 186 nor
    ``nvmlDeviceGetPowerUsage`` answers. A source the DCGM reader set stands."""
    if sample.computing_source == DCGM:
        return
    if info.gpm_supported:
        sample.computing_source, sample.computing_source_reason = GPM, _GPM_REASON
    elif in_mig_mode:
        sample.computing_source, sample.computing_source_reason = NONE, _MIG_REASON
    elif reads == "between":
        sample.computing_source, sample.computing_source_reason = regime.source, regime.reason
    elif regime.energy_advances:
        sample.computing_source = ENERGY
        sample.computing_source_reason = _UNREADABLE_ENERGY if reads == "unreadable" else _OFF_ENERGY
    else:
        sample.computing_source = NONE
        sample.computing_source_reason = _UNREADABLE_NONE if reads == "unreadable" else _OFF_NONE


# Sent in every report: short.
_GPM_REASON: Final = "GPM SM activity"
_MIG_REASON: Final = "MIG mode without GPM: the draw is every instance's"
_UNREADABLE_ENERGY: Final = "power not supported (field 186, GetPowerUsage); the energy counter advances"
_UNREADABLE_NONE: Final = "power not supported (field 186, GetPowerUsage); no energy counter"
_OFF_ENERGY: Final = "power not read between reports (gpu_power_sample_seconds = 0); energy counter"
_OFF_NONE: Final = "power not read between reports (gpu_power_sample_seconds = 0); no energy counter"
