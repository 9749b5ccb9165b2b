"""The computing share from power (core/detector/power_share.py): the draw from the energy
counter or the power reading, the computing and resting draws learned from the GPU's own
readings, capping, throttling, MIG and GPM."""

from __future__ import annotations

import pytest

from nodeagent.core.detector.config import DetectorConfig, DetectorConfigError
from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.core.detector.power_share import PowerTrack
from nodeagent.v1 import nodeagent_pb2 as pb

HW_THERMAL_SLOWDOWN = 0x40
GIB = 1 << 30


def _sample(
    watts: float | None = None, energy_mj: int | None = None, samples: list[float] | None = None, **fields: object
) -> pb.GpuSample:
    g = pb.GpuSample(index=0, memory_used_bytes=8 * GIB, utilization_gpu_ratio=0.98, **fields)  # type: ignore[arg-type]
    g.power_samples_watts.extend(samples or ())
    if watts is not None:
        g.power_watts = watts
    if energy_mj is not None:
        g.energy_millijoules_total = energy_mj
    return g


def test_the_draw_is_the_energy_counters_mean_else_the_power_reading() -> None:
    p = PowerTrack()
    assert p.watts(_sample(300.0, 1_000_000), 0.0) == 300.0  # first energy reading: power this once
    assert p.watts(_sample(300.0, 1_250_000), 1.0) == pytest.approx(250.0)  # 250 J over 1 s
    assert p.watts(_sample(300.0, 5), 2.0) == 300.0  # the counter reset: power this once
    assert p.observe(_sample(0.0, suspect_fields=["power_watts"]), 3.0, 1.0, 0, 600.0) is None
    assert p.watts(_sample(float("nan")), 4.0) is None
    assert p.watts(_sample(), 5.0) is None


def _learn(p: PowerTrack, readings: list[float], *, capped: bool = False) -> None:
    for w in readings:
        p.learn(w, capped, 1.0, 600.0)


def test_the_share_needs_a_swing_and_is_placed_between_the_learned_draws() -> None:
    p = PowerTrack()
    _learn(p, [400.0] * 5)
    assert p.computing(400.0, 2.0) is None  # steady computing: power does not tell
    _learn(p, [90.0, 90.0, 400.0, 400.0])
    assert p.computing(400.0, 2.0) == pytest.approx(1.0, abs=0.01)
    assert p.computing(90.0, 2.0) == pytest.approx(0.0, abs=0.01)
    assert p.computing(245.0, 2.0) == pytest.approx(0.5, abs=0.02)


def test_a_one_report_spike_teaches_no_draw() -> None:
    p = PowerTrack()
    _learn(p, [90.0, 90.0, 400.0, 400.0, 90.0, 700.0, 90.0])
    assert p.high == pytest.approx(400.0, abs=5.0)


def test_a_lowered_power_cap_is_followed_within_a_few_reports() -> None:
    p = PowerTrack()
    _learn(p, [90.0, 90.0, 400.0, 400.0])
    _learn(p, [250.0] * 6, capped=True)  # the enforced limit went to 250 W
    assert p.high == pytest.approx(250.0, abs=5.0)
    assert p.computing(250.0, 2.0) == pytest.approx(1.0, abs=0.05)


def _track(gpm: bool = False, *, mig_instance: bool = False) -> GpuTrack:
    return GpuTrack(0, DetectorConfig(), pb.GpuInfo(index=0, gpm_supported=gpm), mig_instance=mig_instance)


def test_throttled_reports_teach_nothing_and_count_nothing() -> None:
    track = _track()
    mask = HW_THERMAL_SLOWDOWN
    t = 0.0
    for w in (90.0, 90.0, 400.0, 400.0):
        t += 1.0
        track.tick(_sample(w), t, 1.0, mask)
    before = track.steps[track.pos].power_seconds
    for _ in range(5):
        t += 1.0
        track.tick(_sample(200.0, clock_event_reasons=HW_THERMAL_SLOWDOWN), t, 1.0, mask)
    assert track.power.high == pytest.approx(400.0, abs=5.0)
    assert track.steps[track.pos].power_seconds == before


def test_with_gpm_or_on_a_mig_instance_power_is_not_read() -> None:
    gpm = _track(gpm=True)
    mig = _track(mig_instance=True)
    for t in range(1, 8):
        w = 400.0 if t % 2 else 90.0
        gpm.tick(_sample(w), float(t), 1.0, 0)
        mig.tick(_sample(w), float(t), 1.0, 0)
    assert gpm.power.high is None and gpm.window_computing() is None
    assert mig.power.high is None


def test_dcgm_sm_activity_counts_as_gpm_does_on_a_gpu_without_gpm() -> None:
    """The agent sends DCGM's SM activity in the GPM field with computing_source "dcgm": the window's
    SM activity (the job's wait share) comes from it; the same field unmarked is not believed."""
    dcgm, unmarked = _track(), _track()
    for t in range(1, 12):
        dcgm.tick(_sample(300.0, sm_active_ratio=0.4, computing_source="dcgm"), float(t), 1.0, 0)
        unmarked.tick(_sample(300.0, sm_active_ratio=0.4), float(t), 1.0, 0)
    for track in (dcgm, unmarked):
        track.pos += 1  # close the open step, as an evaluation does
    assert dcgm.window_sm_active() == pytest.approx(0.4)
    assert unmarked.window_sm_active() is None


def test_power_swing_factor_must_be_above_one() -> None:
    with pytest.raises(DetectorConfigError, match="power_swing_factor"):
        DetectorConfig.from_mapping({"power_swing_factor": 1.0}, source="collector.toml [detector]")


def test_readings_between_reports_teach_the_draws_and_give_the_share_above_the_midpoint() -> None:
    p = PowerTrack()
    # 0.6 of each report computing at 400 W, 0.4 spinning at 120 W; the GPU idled at 55 W first.
    assert p.observe_samples([55.0] * 10, False, 1.0, 600.0) == pytest.approx(55.0)
    assert p.computing(55.0, 2.0) is None  # no swing yet
    step = [400.0] * 6 + [120.0] * 4
    for _ in range(5):
        mean = p.observe(_sample(288.0, samples=step), 1.0, 1.0, 0, 600.0)
    assert mean == pytest.approx(288.0)
    assert p.high == pytest.approx(400.0) and p.low == pytest.approx(55.0, abs=2.0)
    # The spin (120 W) is below the midpoint: 0.6, not the 0.67 the mean would say.
    assert p.computing(288.0, 2.0) == pytest.approx(0.6)


def test_one_reading_is_not_a_draw_and_bad_readings_count_nothing() -> None:
    p = PowerTrack()
    p.observe_samples([90.0] * 9 + [900.0], False, 1.0, 600.0)
    assert p.high == pytest.approx(90.0)  # the one 900 W reading taught nothing
    assert p.observe_samples([90.0, float("nan"), -1.0, 9000.0, 90.0], False, 1.0, 600.0) is None
    throttled = _sample(200.0, samples=[400.0] * 5 + [90.0] * 5, clock_event_reasons=HW_THERMAL_SLOWDOWN)
    assert p.observe(throttled, 2.0, 1.0, HW_THERMAL_SLOWDOWN, 600.0) is None
    assert p.high == pytest.approx(90.0)


def test_the_source_in_words_is_kept_until_the_source_changes() -> None:
    """The agent sends a GPU's reason when it says something new: the collector keeps the last."""
    track = _track()
    track.tick(_sample(300.0, computing_source="power_mean", computing_source_reason="a 1-s mean"), 1.0, 1.0, 0)
    track.tick(_sample(300.0, computing_source="power_mean"), 2.0, 1.0, 0)
    assert (track.source, track.source_reason) == ("power_mean", "a 1-s mean")
    track.tick(_sample(300.0, computing_source="power_instant"), 3.0, 1.0, 0)  # its words come later
    assert (track.source, track.source_reason) == ("power_instant", "")
