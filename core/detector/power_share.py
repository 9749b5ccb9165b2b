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

Known bias, without readings between reports: ``low`` is the lowest draw seen lately, so where
the GPU idled before its job (idle draw below the collective's spin) the spin counts a little as
computing, until the drift brings ``low`` to the spin draw. Phases shorter than a report average
out: a job that never computes a whole report shows no swing, and power does not tell.
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


class PowerTrack:
    """One GPU's power as the computing share follows it; allocation-free per report."""

    __slots__ = ("above", "energy_mj", "energy_t", "high", "last", "low")

    def __init__(self) -> None:
        self.energy_mj: int | None = None
        self.energy_t = 0.0
        self.last: float | None = None
        self.high: float | None = None
        self.low: float | None = None
        self.above: float | None = None  # the report's share of readings above the midpoint

    def observe(self, g: pb.GpuSample, t: float, dt: float, throttle_mask: int, learn_seconds: float) -> float | None:
        """The report's draw, learned from; None when unread or throttled (it counts nothing).
        Per GPU per report: one call, the reading inlined."""
        self.above = None
        samples = g.power_samples_watts
        if len(samples) >= MIN_SUBSAMPLES:
            if g.clock_event_reasons & throttle_mask:
                return None
            return self.observe_samples(samples, bool(g.clock_event_reasons & SW_POWER_CAP), dt, learn_seconds)
        if g.HasField("energy_millijoules_total"):
            watts = self.watts(g, t)
        elif g.HasField("power_watts"):
            watts = g.power_watts
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
        self.above = (count - bisect_left(valid, 0.5 * (high + low))) / count
        return mean

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
        self.energy_mj, self.last, self.above = None, None, None


def _sane(watts: float) -> float | None:
    return watts if math.isfinite(watts) and 0.0 <= watts < _MAX_WATTS else None
