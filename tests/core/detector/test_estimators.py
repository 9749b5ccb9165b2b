"""Each power regime's estimator on synthetic readings (``synthetic_power.py``): a job computing
part of each step at 400 W and spinning at 120 W in the collective, after idling at 55 W. Where
the regime can tell, the window's computing share is within the lab's 0.06 of the truth (the
ranks' timers); where it cannot, it is unknown with its reason, never a number
(core/detector/computing_source.py)."""

from __future__ import annotations

import statistics

import pytest

from nodeagent.core.detector.computing_source import BLURRED, NO_READING, NO_SWING, SHORT_PHASES, unknown_words
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.core.detector.node_evidence import EMPTY
from nodeagent.core.detector.power_share import PowerTrack
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.core.detector.synthetic_power import Draw, Regime, run, truth

GIB = 1 << 30
TOLERANCE = 0.06
SEEDS = range(4)


def _errors(step: float, computing: float, regime: dict[str, object]) -> list[float]:
    """The estimate's error against the truth for a few seeds (steps that vary 10%, as real ones do)."""
    out = []
    for seed in SEEDS:
        draw = Draw(step, computing, start=20.0, seed=seed, jitter=0.1)
        track = run(draw, Regime(seed=seed + 10, **regime))  # type: ignore[arg-type]
        estimate = track.estimate
        assert estimate.unknown is None and estimate.computing_ratio is not None, estimate
        out.append(estimate.computing_ratio - truth(draw, track))
    return out


@pytest.mark.parametrize(
    ("step", "computing", "regime"),
    [
        (0.5, 0.49, {"source": "power_instant"}),
        (0.5, 0.49, {"source": "power_instant", "lag": (0.05, 0.1)}),
        # A100/H100: the sensor samples 25 ms of each 100 ms, read with 50-100 ms of lag.
        (0.5, 0.49, {"source": "power_instant", "lag": (0.05, 0.1), "sensor_window": 0.025}),
        (0.15, 0.5, {"source": "power_instant", "lag": (0.05, 0.1), "sensor_window": 0.025}),
        (2.0, 0.3, {"source": "power_instant", "lag": (0.05, 0.1), "sensor_window": 0.025}),
        # Not inferred: an older agent that says nothing, readings between reports as today's.
        (0.5, 0.49, {"source": "", "lag": (0.05, 0.1)}),
    ],
    ids=["ideal", "lagged", "quarter-sampled-lagged", "quarter-sampled-0.15s", "quarter-sampled-2s", "undecided"],
)
def test_instantaneous_readings_give_the_share_within_the_labs_tolerance(
    step: float, computing: float, regime: dict[str, object]
) -> None:
    errors = _errors(step, computing, regime)
    assert max(abs(e) for e in errors) <= TOLERANCE, errors
    assert abs(statistics.mean(errors)) <= 0.02, errors  # no bias: the seeds' errors cancel


def test_readings_smoothed_over_the_phase_edges_count_by_the_jobs_own_two_draws() -> None:
    """Readings that are the last 0.1 s's mean pass through the draws between at each edge. The
    midpoint of the learned extremes (idle at 55 W before the job, not the 120 W spin) counted
    those as computing: +0.05 at 0.5-s steps, +0.24 at 0.15-s steps; the midpoint of the two
    groups' own centres counts them as often one way as the other."""
    for step in (0.5, 0.15):
        errors = _errors(step, 0.5, {"source": "power_instant", "averaging": 0.1})
        assert abs(statistics.mean(errors)) <= 0.03, (step, errors)


def test_the_boundary_is_the_midpoint_of_the_two_groups_kept_inside_the_learned_draws() -> None:
    p = PowerTrack()
    p.observe_samples([55.0] * 10, False, 1.0, 600.0)  # idle first: the low learned is 55 W
    for _ in range(60):
        p.observe_samples([400.0] * 5 + [250.0] + [120.0] * 4, False, 1.0, 600.0)
    assert p.low == pytest.approx(55.0, abs=10.0)
    assert p.rest == pytest.approx(120.0) and p.busy == pytest.approx(400.0)
    assert p.boundary(400.0, 55.0) == pytest.approx(260.0)  # not (400 + 55) / 2
    assert p.boundary(400.0, 300.0) == pytest.approx(310.0)  # at least a tenth inside


def test_readings_that_mostly_fall_between_the_draws_are_unknown_not_a_share() -> None:
    """A sensor whose own averaging spans the job's phases: after a minute of clean steps, most
    readings fall between the computing and resting draws; the share above the boundary would be
    a guess."""
    config = DetectorConfig()
    track = GpuTrack(0, config, pb.GpuInfo(index=0))
    clean = [400.0] * 5 + [120.0] * 5
    blurred = [200.0 + 12.0 * k for k in range(10)]  # 200 .. 308 W
    t = 0.0
    for k in range(130):
        t += 1.0
        g = pb.GpuSample(
            index=0, memory_used_bytes=8 * GIB, utilization_gpu_ratio=0.98, computing_source="power_instant"
        )
        g.power_samples_watts.extend(clean if k < 60 else blurred)
        track.tick(g, t, 1.0, 0)
        if k % 10 == 9:
            track.step(g, t, EMPTY, first=k == 9)
    assert track.estimate.computing_ratio is None and track.estimate.unknown == BLURRED
    assert "fall between the computing and resting draws" in unknown_words("power_instant", track.estimate)


@pytest.mark.parametrize("step", [0.5, 2.0, 3.0])
def test_a_one_second_mean_at_steps_of_a_few_seconds_or_less_is_unknown(step: float) -> None:
    """The lab's 1-s mean read 0.17 and 0.29 against 0.51: the mean never reaches either draw."""
    draw = Draw(step, 0.49, start=20.0)
    track = run(draw, Regime("power_mean", averaging=1.0))
    estimate = track.estimate
    assert estimate.computing_ratio is None
    assert estimate.unknown in (NO_SWING, SHORT_PHASES)
    words = unknown_words("power_mean", estimate)
    assert words.startswith("read power as a 1-s mean; the job's phases") and words.endswith("wait share unknown")


@pytest.mark.parametrize("energy", [True, False], ids=["energy-counter", "one-second-mean"])
def test_draws_that_swing_with_phases_shorter_than_the_averaging_allows_are_unknown(energy: bool) -> None:
    """Steps of 3 s (phases of 1.5 s) against reports a second apart: the energy counter's report
    draws swing far enough (a 40 W spin), but cross the midpoint every 1.5 s, under the 2 s the
    estimator needs; a 1-s mean flattens them further."""
    draw = Draw(3.0, 0.5, start=20.0, spin=40.0, jitter=0.1)
    track = run(draw, Regime("energy" if energy else "power_mean", averaging=1.0, samples=not energy, energy=energy))
    estimate = track.estimate
    assert estimate.computing_ratio is None
    if energy:
        assert estimate.unknown == SHORT_PHASES
        assert estimate.phase_seconds == pytest.approx(1.5, abs=0.1)
        assert "the job's phases of about 1.5 s are shorter than the 2 s it needs" in unknown_words("energy", estimate)
    else:
        assert estimate.unknown == NO_SWING


@pytest.mark.parametrize(
    ("step", "computing", "regime"),
    [
        (10.0, 0.6, {"source": "power_mean", "averaging": 1.0}),
        (8.0, 0.3, {"source": "power_mean", "averaging": 1.0, "lag": (0.05, 0.1)}),
        (10.0, 0.6, {"source": "energy", "samples": False, "energy": True}),
        (8.0, 0.5, {"source": "energy", "samples": False, "energy": True}),
        (12.0, 0.25, {"source": "", "samples": False, "energy": True}),  # inferred: energy
    ],
    ids=["mean-10s", "mean-8s-lagged", "energy-10s", "energy-8s", "undecided-energy-12s"],
)
def test_a_mean_or_the_energy_counter_with_long_phases_gives_the_share(
    step: float, computing: float, regime: dict[str, object]
) -> None:
    errors = _errors(step, computing, regime)
    assert max(abs(e) for e in errors) <= TOLERANCE, errors


@pytest.mark.parametrize(
    ("step", "computing"),
    [(4.0, 0.42), (4.2, 0.4), (4.2, 0.6), (5.0, 0.35), (6.0, 0.3)],
)
@pytest.mark.parametrize("source", ["power_mean", "energy"])
def test_phases_too_short_to_hold_a_draw_over_two_reports_are_unknown_never_off(
    step: float, computing: float, source: str
) -> None:
    """Steps of 4-6 s whose shorter phase lasts 1.7-2.5 s: the report draws cross the midpoint
    about every 2 s (enough by the phase length alone), but no two reports in a row read the
    whole computing (or resting) draw, so the sustained draws fell short of the job's and the
    share read 0.07-0.15 off. Now the share between the sustained draws and the one between the
    single reports' extremes must agree, else it is unknown: every seed is within the lab's
    tolerance or ``short_phases``."""
    regime = {"averaging": 1.0} if source == "power_mean" else {"samples": False, "energy": True}
    for seed in SEEDS:
        draw = Draw(step, computing, start=20.0, seed=seed, jitter=0.1)
        track = run(draw, Regime(source, seed=seed + 10, **regime))  # type: ignore[arg-type]
        estimate = track.estimate
        if estimate.computing_ratio is None:
            assert estimate.unknown == SHORT_PHASES, (seed, estimate)
        else:
            assert abs(estimate.computing_ratio - truth(draw, track)) <= TOLERANCE, (seed, estimate)


@pytest.mark.parametrize("step", [0.5, 1.5])
def test_the_energy_counter_alone_at_short_steps_is_unknown(step: float) -> None:
    draw = Draw(step, 0.49, start=20.0)
    track = run(draw, Regime("energy", samples=False, energy=True))
    assert track.estimate.computing_ratio is None and track.estimate.unknown == NO_SWING
    assert unknown_words("energy", track.estimate).startswith("read only the energy counter")


def test_a_gpu_the_agent_says_nothing_reads_is_unknown_and_one_it_has_not_decided_is_as_before() -> None:
    draw = Draw(0.5, 0.49, start=20.0)
    assert run(draw, Regime("none", samples=False)).estimate.unknown == NO_READING
    before = run(draw, Regime("", samples=False)).estimate  # no reading at all, not decided
    assert before.unknown is None and before.computing_ratio is None


def test_the_estimate_follows_the_agents_source_when_it_changes() -> None:
    """Instantaneous readings, then the agent says they are a moving mean (at 0.5-s steps the mean
    cannot tell): the window becomes unknown, and the step's share is no longer given."""
    draw = Draw(0.5, 0.49, start=20.0)
    track = run(draw, Regime("power_instant"))
    assert track.estimate.computing_ratio is not None
    mean = run(draw, Regime("power_mean", averaging=1.0))
    assert mean.estimate.unknown is not None
    a = mean.activity()
    assert a is not None and a.computing_ratio is None


def test_dcgm_sm_activity_is_the_source_as_gpm_is_and_power_is_not_read() -> None:
    """An A100 (no GPM) whose agent takes DCGM's SM-active: it arrives in sm_active_ratio and is
    read as GPM's; the draw is not learned from."""
    track = GpuTrack(0, DetectorConfig(), pb.GpuInfo(index=0, gpm_supported=False))
    t = 0.0
    for k in range(40):
        t += 1.0
        g = pb.GpuSample(index=0, memory_used_bytes=8 * GIB, utilization_gpu_ratio=0.98, sm_active_ratio=0.45)
        g.computing_source = "dcgm"
        g.power_samples_watts.extend([400.0] * 5 + [120.0] * 5)
        track.tick(g, t, 1.0, 0)
        if k % 10 == 9:
            track.step(g, t, EMPTY, first=k == 9)
    assert track.window_sm_active() == pytest.approx(0.45)
    assert track.power.high is None and track.estimate.computing_ratio is None and track.estimate.unknown is None
