"""Idle gaps (core/detector/idle_share.py): a pause (a checkpoint, an epoch boundary) shorter than
``gap_seconds`` is not starvation and is dropped; but a job whose steps last seconds, starved of
data, idles for a whole report or more in every step, and those gaps come back within
``gap_seconds``: they count."""

from __future__ import annotations

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.core.detector.node_evidence import EMPTY
from nodeagent.v1 import nodeagent_pb2 as pb

GIB = 1 << 30


def _idle_share(pattern: list[float], seconds: int, config: DetectorConfig) -> float:
    """The window's idle share after ``seconds`` reports, a second apart, of utilization
    ``pattern`` repeated (the window's steps summed, as the detector reads them)."""
    track = GpuTrack(0, config, pb.GpuInfo(index=0))
    evaluate = round(config.evaluate_seconds)
    for k in range(seconds):
        g = pb.GpuSample(index=0, memory_used_bytes=8 * GIB, utilization_gpu_ratio=pattern[k % len(pattern)])
        track.tick(g, float(k + 1), 1.0, 0)
        if k % evaluate == evaluate - 1:
            track.step(g, float(k + 1), EMPTY, first=k == evaluate - 1)
    steps = [track.steps[(track.pos - j) % len(track.steps)] for j in range(1, config.window_steps + 1)]
    counted = sum(s.seconds for s in steps)
    return sum(s.idle for s in steps) / counted if counted else 0.0


CONFIG = DetectorConfig(window_seconds=20.0, evaluate_seconds=5.0, warmup_seconds=0.0, gap_seconds=10.0)


def test_gaps_that_come_back_every_step_count() -> None:
    """A 4-s step: 2 s computing, 2 s idle waiting for data (the lab's 2-s step, slowed)."""
    share = _idle_share([1.0, 1.0, 0.0, 0.0], 80, CONFIG)
    assert 0.45 <= share <= 0.55, share


def test_a_lone_pause_shorter_than_the_gap_bound_is_dropped() -> None:
    """Busy for 60 s, a 5-s pause, busy again: the window that holds the pause reads no idle."""
    pattern = [1.0] * 60 + [0.0] * 5 + [1.0] * 15
    assert _idle_share(pattern, 80, CONFIG) == 0.0


def test_pauses_further_apart_than_the_gap_bound_are_each_dropped() -> None:
    """A 3-s pause every 14 s (11 s busy between: more than gap_seconds): none counts."""
    share = _idle_share([1.0] * 11 + [0.0] * 3, 84, CONFIG)
    assert share == 0.0
