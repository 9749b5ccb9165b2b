"""The computing share from power, for GPUs without GPM (A100, A10, L40S, T4): how much of a
step a GPU computed, where NVML utilization cannot tell (a GPU waiting in a collective keeps
NCCL's kernel resident and reads ~100%, like one computing).

A GPU computing draws several times what it draws spinning in NCCL's kernels or idle. Per report
the GPU's draw is its energy counter's increase over the interval (``energy_millijoules_total``:
the mean over the interval, whatever NVML's own power averaging), else ``power_watts`` (0 W,
what the agent holds suspect on a busy GPU, is no reading). Two draws are learned from the GPU's own readings:

- ``high``, what it draws computing: a decaying maximum of its readings, each the lower of two
  consecutive ones (a one-report spike is not a draw); it drifts down toward what the GPU reads
  over ``power_learn_seconds``. Power capping: while ``sw_power_cap`` is set the GPU draws its
  enforced limit, so a lower reading then pulls ``high`` halfway down at once (a cap lowered is
  followed in a few reports, not over the drift's minutes);
- ``low``, what it draws at rest (idle, or waiting in the collective): a decaying minimum, each
  reading the higher of two consecutive ones, drifting up the same way.

A report's computing share is ``(draw - low) / (high - low)``, within 0..1, and only where
``high`` is at least ``power_swing_factor`` times ``low``: a GPU that has shown no swing (one
that computes steadily, or has never rested) says nothing, and utilization stays the measure.
Reports with a throttle reason set (``throttle_reasons``) neither teach a draw nor count: a
throttled GPU draws less and computes less, and the detector's `throttled` (step 3) and the job
roll-up's throttled share already name it. A MIG instance has no power of its own (the GPU's
draw is its tenants' together): MIG-split GPUs are skipped. Where GPM exists its SM activity
stays the source (``NodeDetector.activity``'s consumers prefer it).

Readings between reports (``power_samples_watts``: the agent reads the instantaneous draw every
0.1 s on GPUs without GPM, ``agent/gpu/power_samples.py``) are what makes this work for real
steps, whose phases are sub-second: a report's mean averages computing and waiting out, so no
report's draw swings. Where a report carries at least ``MIN_SUBSAMPLES`` of them, ``high`` learns
from the second-highest of them and ``low`` from the second-lowest (one reading is not a draw),
drifting as above, and the computing share is the share of the readings above the midpoint of
``high`` and ``low``: a reading is a GPU computing or not. That also removes the bias below: the
collective's spin (a fifth of the way from rest to computing on the lab's emulated GPU) reads
under the midpoint even where ``low`` is the idle draw from before the job.

The boundary between the two groups of readings is the midpoint of their own centres (the
median of the readings under the boundary and of those over it, each report whose readings fall
in both groups, followed over ``CENTRE_SECONDS``), kept at least a tenth of the learned swing
inside ``low`` and ``high``: the midpoint of the extremes sits low where the GPU idled before its
job (idle below the collective's spin), and a reading taken across a phase edge (a sensor window,
or a reading lagged and smoothed over the edge) counts by which side it is nearer, on average as
much one way as the other, only against the midpoint of the job's own two draws. A lag alone
shifts the readings in time and leaves the share over whole steps as it is; so does a sensor
that samples part of the time in short windows, as long as the readings are not locked to the
step (``computing_source.py`` says which readings this applies to).

Known bias, without readings between reports: ``low`` is the lowest draw seen lately, so where
the GPU idled before its job (idle draw below the collective's spin) the spin counts a little as
computing, until the drift brings ``low`` to the spin draw. Phases shorter than a report average
out: a job that never computes a whole report shows no swing, and power does not tell
(``computing_source.py``: where the draw is a moving mean or the energy counter's, the window's
own sustained draws and its phase length decide whether it tells at all).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Final

from nodeagent.v1 import nodeagent_pb2 as pb

SW_POWER_CAP: Final = 0x004  # core/wire/clock_events.py
# A draw above this is a bad reading (no GPU draws 5 kW): it teaches nothing and counts nothing.
_MAX_WATTS: Final = 5000.0
# Readings between reports that make a report's share (fewer: the report's mean draw as before).
MIN_SUBSAMPLES: Final = 4
# How long the centres of the computing and resting readings take to follow a change.
CENTRE_SECONDS: Final = 30.0
# The boundary stays at least this share of the learned swing inside the learned draws.
_BOUNDARY_MARGIN: Final = 0.1


class PowerTrack:
    """One GPU's power as the computing share follows it; allocation-free per report."""

    __slots__ = (
        "above", "busy", "crossed", "energy_mj", "energy_t", "high", "kind", "last", "low", "middle", "rest",
        "sustained", "sustained_high", "sustained_low",
    )  # fmt: skip

    def __init__(self) -> None:
        self.energy_mj: int | None = None
        self.energy_t = 0.0
        self.last: float | None = None
        self.high: float | None = None
        self.low: float | None = None
        # The centres of the readings between reports over and under the boundary.
        self.busy: float | None = None
        self.rest: float | None = None
        self.above: float | None = None  # the report's share of readings above the boundary
        # The report's share of readings in the middle third between the learned draws.
        self.middle = 0.0
        # The report's draw as the moving-mean estimator learns it: the higher and lower of it and
        # the previous report's (each held two reports; ``sustained``: they are of this report),
        # and whether it crossed the midpoint.
        self.sustained = False
        self.sustained_high = self.sustained_low = 0.0
        self.crossed = False
        # What the last report's draw was: "energy" (the counter's increase), "power_mean" (a
        # reading, or the readings' mean), "power_instant" (readings between reports); "" none yet.
        self.kind = ""

    def observe(
        self, g: pb.GpuSample, t: float, dt: float, throttle_mask: int, learn_seconds: float, *, instant: bool = True
    ) -> float | None:
        """The report's draw, learned from; None when unread or throttled (it counts nothing).
        ``instant``: the readings between reports are instantaneous (else a moving mean: the
        report's draw is their mean, or the energy counter's). Per GPU per report: one call."""
        self.above, self.sustained, self.crossed, self.middle = None, False, False, 0.0
        samples = g.power_samples_watts
        if len(samples) >= MIN_SUBSAMPLES and (instant or not g.HasField("energy_millijoules_total")):
            if g.clock_event_reasons & throttle_mask:
                return None
            if instant:
                self.kind = "power_instant"
                return self.observe_samples(samples, bool(g.clock_event_reasons & SW_POWER_CAP), dt, learn_seconds)
            watts = _sane(math.fsum(samples) / len(samples))
            self.kind = "power_mean"
        elif g.HasField("energy_millijoules_total"):
            watts = self.watts(g, t)
            self.kind = "energy"
        elif g.HasField("power_watts"):
            watts = g.power_watts
            self.kind = "power_mean"
            # 0 W is what the agent holds suspect on a busy GPU (``suspect_fields``): no reading,
            # told without reading that list on every report. NaN fails the range too.
            if not 0.0 < watts < _MAX_WATTS:
                return None
        else:
            return None
        reasons = g.clock_event_reasons
        if watts is None or reasons & throttle_mask:
            return None
        self.learn(watts, bool(reasons & SW_POWER_CAP), dt, learn_seconds)
        return watts

    def watts(self, g: pb.GpuSample, t: float) -> float | None:
        """The GPU's mean draw since its previous report (energy), else its power reading."""
        if g.HasField("energy_millijoules_total"):
            energy, before, since = g.energy_millijoules_total, self.energy_mj, self.energy_t
            self.energy_mj, self.energy_t = energy, t
            if before is not None and t > since and energy >= before:
                return _sane((energy - before) / 1000.0 / (t - since))
            # The first reading, or the counter reset (driver reload): the power reading this once.
        if g.HasField("power_watts") and "power_watts" not in g.suspect_fields:
            return _sane(g.power_watts)
        return None

    def observe_samples(self, samples: Sequence[float], capped: bool, dt: float, learn_seconds: float) -> float | None:
        """A report's readings between reports: the draws learned from their extremes, the share
        above the midpoint kept for ``computing``; their mean returned. Sorted and bisected in C
        (a loop over them in Python cost 5 us a GPU); the validator has refused NaN and infinity."""
        ordered = sorted(samples)
        valid = ordered[bisect_right(ordered, 0.0) : bisect_left(ordered, _MAX_WATTS)]
        count = len(valid)
        if count < MIN_SUBSAMPLES:
            return None
        mean = sum(valid) / count
        self.last = mean
        second_top, second_bottom = valid[-2], valid[1]  # one reading is not a draw
        drift = dt / learn_seconds if learn_seconds > dt else 1.0
        high = self.high
        if high is None or second_top > high:
            self.high = high = second_top
        elif capped and second_top < high:
            self.high = high = high - 0.5 * (high - second_top)
        else:
            self.high = high = high - drift * (high - second_top)
        low = self.low
        if low is None or second_bottom < low:
            self.low = low = second_bottom
        else:
            self.low = low = low + drift * (second_bottom - low)
        busy, rest = self.busy, self.rest  # ``boundary``, inlined: this runs per GPU per report
        if busy is None or rest is None:
            boundary = 0.5 * (high + low)
        else:
            margin = _BOUNDARY_MARGIN * (high - low)
            boundary = 0.5 * (busy + rest)
            if boundary < low + margin:
                boundary = low + margin
            elif boundary > high - margin:
                boundary = high - margin
        under = bisect_left(valid, boundary)
        self.above = (count - under) / count
        if 2 <= under <= count - 2:  # both groups in this report: their centres move toward it
            follow = dt / CENTRE_SECONDS if dt < CENTRE_SECONDS else 1.0
            rested, computed = valid[under // 2], valid[under + (count - under) // 2]
            self.rest = rested if rest is None else rest + follow * (rested - rest)
            self.busy = computed if busy is None else busy + follow * (computed - busy)
        # Readings in the middle third between the draws are neither: a sensor whose own
        # window spans the job's phases reads mostly those (bisected in C, not looped over).
        # (The learned draws, not the centres: those follow such readings within a minute.)
        third = (high - low) / 3.0
        middle = bisect_left(valid, high - third) - bisect_right(valid, low + third)
        self.middle = middle / count if middle > 0 else 0.0
        return mean

    def boundary(self, high: float, low: float) -> float:
        """Between computing and resting readings: the midpoint of their centres where known,
        kept inside the learned draws; else the midpoint of the learned draws."""
        busy, rest = self.busy, self.rest
        if busy is None or rest is None:
            return 0.5 * (high + low)
        margin = _BOUNDARY_MARGIN * (high - low)
        return min(high - margin, max(low + margin, 0.5 * (busy + rest)))

    def learn(self, watts: float, capped: bool, dt: float, learn_seconds: float) -> None:
        """Teach the computing and resting draws one unthrottled reading (comparisons, not
        min/max calls: this runs for every GPU at every report)."""
        last, self.last = self.last, watts
        if last is None:
            return
        drift = dt / learn_seconds if learn_seconds > dt else 1.0
        if watts < last:
            sustained_high, sustained_low = watts, last
        else:
            sustained_high, sustained_low = last, watts
        self.sustained, self.sustained_high, self.sustained_low = True, sustained_high, sustained_low
        if self.high is not None and self.low is not None:
            middle = 0.5 * (self.high + self.low)
            self.crossed = (watts >= middle) is not (last >= middle)
        high = self.high
        if high is None or sustained_high > high:
            self.high = sustained_high
        elif capped and watts < high:
            self.high = high - 0.5 * (high - watts)  # the enforced limit went down
        else:
            self.high = high - drift * (high - sustained_high)
        low = self.low
        if low is None or sustained_low < low:
            self.low = sustained_low
        else:
            self.low = low + drift * (sustained_low - low)

    def computing(self, watts: float, swing_factor: float) -> float | None:
        """The share of the interval the GPU computed at this draw; None while power cannot tell."""
        high, low = self.high, self.low
        if high is None or low is None or high < swing_factor * max(low, 1.0):
            return None
        if self.above is not None:
            return self.above
        return min(1.0, max(0.0, (watts - low) / (high - low)))

    def forget(self) -> None:
        self.energy_mj, self.last, self.above, self.sustained = None, None, None, False
        self.busy = self.rest = None


def _sane(watts: float) -> float | None:
    return watts if math.isfinite(watts) and 0.0 <= watts < _MAX_WATTS else None
