"""A GPU's draw through a training job's steps, and what each power regime reads of it: the
synthetic readings the estimators' tests (``test_estimators.py``) feed a GPU's track.

The job computes ``computing`` of each step at ``high`` watts and waits the rest spinning at
``spin`` (the collective's kernel); step lengths vary by ``jitter`` around ``step_seconds`` (real
steps are not locked to the 0.1 s reading period). Before ``start`` the GPU idles at ``idle``.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass, field

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.core.detector.node_evidence import EMPTY
from nodeagent.v1 import nodeagent_pb2 as pb

GIB = 1 << 30


@dataclass
class Draw:
    step_seconds: float
    computing: float
    high: float = 400.0
    spin: float = 120.0
    idle: float = 55.0
    start: float = 0.0
    jitter: float = 0.05
    seconds: float = 200.0
    seed: int = 1
    _starts: list[float] = field(default_factory=list)
    _lengths: list[float] = field(default_factory=list)
    _energy: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        t, energy = self.start, 0.0
        while t < self.start + self.seconds + 5:
            length = self.step_seconds * (1 + rng.uniform(-self.jitter, self.jitter))
            self._starts.append(t)
            self._lengths.append(length)
            self._energy.append(energy)
            energy += length * (self.computing * self.high + (1 - self.computing) * self.spin)
            t += length

    def at(self, t: float) -> float:
        """The instantaneous draw."""
        if t < self.start:
            return self.idle
        i = bisect_right(self._starts, t) - 1
        return self.high if t - self._starts[i] < self.computing * self._lengths[i] else self.spin

    def joules(self, t: float) -> float:
        """Energy since ``start`` (negative before it: the idle draw counts back)."""
        if t <= self.start:
            return (t - self.start) * self.idle
        i = bisect_right(self._starts, t) - 1
        into = t - self._starts[i]
        on = min(into, self.computing * self._lengths[i])
        return self._energy[i] + on * self.high + (into - on) * self.spin

    def mean(self, a: float, b: float) -> float:
        return (self.joules(b) - self.joules(a)) / (b - a)

    def computing_share(self, a: float, b: float) -> float:
        """The true share of [a, b] computing (the ranks' timers)."""
        computed = 0.0
        for s, length in zip(self._starts, self._lengths, strict=True):
            on_end = s + self.computing * length
            computed += max(0.0, min(b, on_end) - max(a, s))
        return computed / (b - a)


@dataclass
class Regime:
    """How the GPU's power is read: every ``period`` seconds between reports, each reading the
    draw ``lag`` seconds before (drawn from the range), averaged over ``averaging`` seconds
    (0: instantaneous), by a sensor that samples ``sensor_window`` of each ``sensor_period``
    (0: all the time); ``energy``: the counter too; ``samples``: the readings between reports."""

    source: str
    averaging: float = 0.0
    lag: tuple[float, float] = (0.0, 0.0)
    sensor_window: float = 0.0
    sensor_period: float = 0.1
    period: float = 0.1
    samples: bool = True
    energy: bool = False
    seed: int = 2

    def reading(self, draw: Draw, t: float, rng: random.Random, phase: float) -> float:
        t -= rng.uniform(*self.lag)
        if self.sensor_window:
            # The latest sensor window that ended by t.
            end = phase + ((t - phase) // self.sensor_period) * self.sensor_period + self.sensor_window
            if end > t:
                end -= self.sensor_period
            return draw.mean(end - self.sensor_window, end)
        if self.averaging:
            return draw.mean(t - self.averaging, t)
        return draw.at(t)


def run(draw: Draw, regime: Regime, seconds: float = 120.0, config: DetectorConfig | None = None) -> GpuTrack:
    """Reports every second from ``draw.start - 20`` (the GPU idles first) for ``seconds`` after
    it, a window step every ``evaluate_seconds``; the track after them."""
    config = config or DetectorConfig()
    track = GpuTrack(0, config, pb.GpuInfo(index=0, gpm_supported=False))
    rng = random.Random(regime.seed)
    phase = rng.uniform(0, regime.sensor_period)
    t = draw.start - 20.0
    next_step = t + config.evaluate_seconds
    at = t
    while t < draw.start + seconds:
        t += 1.0
        g = pb.GpuSample(index=0, memory_used_bytes=8 * GIB, utilization_gpu_ratio=0.98)
        g.computing_source = regime.source
        if regime.samples:
            # The agent's reader sleeps its period between reads: the times drift, on no grid.
            while at <= t:
                g.power_samples_watts.append(regime.reading(draw, at, rng, phase))
                at += regime.period * (1.0 + rng.uniform(0.0, 0.1))
        if regime.energy:
            g.energy_millijoules_total = int(1e9 + draw.joules(t) * 1000.0)
        elif regime.samples:
            g.power_watts = g.power_samples_watts[-1]
        track.tick(g, t, 1.0, 0)
        if t >= next_step:
            track.step(g, t, EMPTY, first=next_step == draw.start - 20.0 + config.evaluate_seconds)
            next_step += config.evaluate_seconds
    return track


def truth(draw: Draw, track: GpuTrack, config: DetectorConfig | None = None) -> float:
    """The true computing share over the track's window (its last ``window_seconds``)."""
    config = config or DetectorConfig()
    end = track.last_seen
    return draw.computing_share(end - config.window_seconds, end)
