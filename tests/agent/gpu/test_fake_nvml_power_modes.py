"""The fake NVML's power sensors (issue 43, item 6): what each class of board answers for power
and energy, read through pynvml's real ctypes path, on the fake's own clock (no sleeps).

A power timeline (``PowerTimeline``) holds the draw; the GPU's ``power_mode`` says how the board
reads it: ideal (the draw now), sampled (a 25 ms window every 100 ms, held between), mean1s (the
last whole second's mean, field 186 not supported), energy (no power reading, the counter only);
``power_lag_ms`` delays every reading.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pynvml
import pytest

from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, PowerTimeline, a100_sxm4

FI_POWER_INSTANT, FI_TOTAL_ENERGY = 186, 83
COMPUTE_MW, WAIT_MW = 380_000, 55_000
T0 = 1000.0


def _rig(fake: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str,
         lag_ms: int = 0) -> tuple[FakeNvmlState, PowerTimeline]:  # fmt: skip
    live = tmp_path / "power"
    monkeypatch.setenv("FAKE_NVML_POWER_LIVE", str(live))
    state = a100_sxm4(1)
    state.clock = T0
    state.gpus[0].power_mode, state.gpus[0].power_lag_ms = mode, lag_ms
    fake.load(state)
    timeline = PowerTimeline(live, keep=10.0, clock=lambda: state.clock or 0.0)
    return state, timeline


def _square(timeline: PowerTimeline, start: float, end: float, on: float = 0.3, off: float = 0.2) -> None:
    """A training step's draw: computing ``on`` seconds, then waiting ``off``."""
    t = start
    while t < end:
        timeline.set(COMPUTE_MW, t)
        timeline.set(WAIT_MW, t + on)
        t += on + off


def _at(fake: FakeNvml, state: FakeNvmlState, t: float) -> None:
    state.clock = t
    fake.write()


def _field(handle: object, field: int) -> tuple[int, int | None]:
    value = pynvml.nvmlDeviceGetFieldValues(handle, [field])[0]
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        return value.nvmlReturn, None
    raw = value.value.uiVal if value.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT else value.value.ullVal
    return value.nvmlReturn, int(raw)


def test_ideal_power_is_the_draw_now_and_a_lag_delays_it(
    fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, timeline = _rig(fake_nvml, tmp_path, monkeypatch, "ideal", lag_ms=75)
    timeline.set(WAIT_MW, T0)
    timeline.set(COMPUTE_MW, T0 + 1.0)
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        _at(fake_nvml, state, T0 + 1.05)  # 50 ms after the edge: the reading still trails it
        assert pynvml.nvmlDeviceGetPowerUsage(h) == WAIT_MW
        assert _field(h, FI_POWER_INSTANT) == (pynvml.NVML_SUCCESS, WAIT_MW)
        _at(fake_nvml, state, T0 + 1.08)
        assert pynvml.nvmlDeviceGetPowerUsage(h) == COMPUTE_MW
        state.gpus[0].power_lag_ms = 0
        _at(fake_nvml, state, T0 + 1.05)
        assert pynvml.nvmlDeviceGetPowerUsage(h) == COMPUTE_MW
    finally:
        pynvml.nvmlShutdown()


def test_a_one_second_mean_changes_about_once_a_second_and_equals_the_mean(
    fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, timeline = _rig(fake_nvml, tmp_path, monkeypatch, "mean1s")
    _square(timeline, T0, T0 + 8, on=0.3, off=0.45)  # 0.75 s steps: each whole second's mean differs
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        readings = []
        for i in range(60):  # 10 Hz from 2 s to 8 s
            t = T0 + 2 + i / 10
            _at(fake_nvml, state, t)
            readings.append((t, pynvml.nvmlDeviceGetPowerUsage(h)))
        changes = sum(1 for a, b in itertools.pairwise(readings) if a[1] != b[1])
        assert 4 <= changes <= 6  # six seconds: a new mean at each whole second
        for t, reading in readings:
            second = int(t) - 1  # the last whole second
            mean = (timeline.energy_mj(second + 1) - timeline.energy_mj(second)) / 1.0
            assert reading == pytest.approx(mean, abs=1)
            assert WAIT_MW < reading < COMPUTE_MW
        assert _field(h, FI_POWER_INSTANT)[0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    finally:
        pynvml.nvmlShutdown()


def test_a_sampled_sensor_misses_a_phase_outside_its_windows(
    fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, timeline = _rig(fake_nvml, tmp_path, monkeypatch, "sampled")
    # Windows are [k 0.1, k 0.1 + 0.025): a 50 ms burst at k 0.1 + 0.04 falls between them.
    timeline.set(WAIT_MW, T0)
    for k in range(30):
        timeline.set(COMPUTE_MW, T0 + k / 10 + 0.04)
        timeline.set(WAIT_MW, T0 + k / 10 + 0.09)
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        seen = set()
        for i in range(100):
            _at(fake_nvml, state, T0 + 0.5 + i * 0.013)
            seen.add(pynvml.nvmlDeviceGetPowerUsage(h))
            seen.add(_field(h, FI_POWER_INSTANT)[1])
        assert seen == {WAIT_MW}  # the GPU drew 380 W half of the time; the sensor never saw it
        # The same burst moved into the windows is seen, as the windows' mean.
        state.gpus[0].power_offset_ms = 50
        _at(fake_nvml, state, T0 + 1.2)
        assert pynvml.nvmlDeviceGetPowerUsage(h) == COMPUTE_MW
        # The energy counter is the whole draw's integral, burst included.
        assert _field(h, FI_TOTAL_ENERGY)[1] == pytest.approx(timeline.energy_mj(T0 + 1.2), abs=2)
    finally:
        pynvml.nvmlShutdown()


def test_energy_only_refuses_power_while_the_counter_advances(
    fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, timeline = _rig(fake_nvml, tmp_path, monkeypatch, "energy", lag_ms=50)
    _square(timeline, T0, T0 + 4)
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        _at(fake_nvml, state, T0 + 1.0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetPowerUsage(h)
        assert _field(h, FI_POWER_INSTANT)[0] == pynvml.NVML_ERROR_NOT_SUPPORTED
        first = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        _at(fake_nvml, state, T0 + 3.0)
        second = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        assert _field(h, FI_TOTAL_ENERGY) == (pynvml.NVML_SUCCESS, second)
        # 2 s of the square wave (mean 250 W) between the readings, each 50 ms behind.
        assert second - first == pytest.approx(timeline.energy_mj(T0 + 2.95) - timeline.energy_mj(T0 + 0.95), abs=1)
        assert second - first == pytest.approx(2 * (0.6 * COMPUTE_MW + 0.4 * WAIT_MW), rel=0.01)
    finally:
        pynvml.nvmlShutdown()


def test_without_a_timeline_the_state_answers_as_before(
    fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = tmp_path / "power"
    live.write_text("123000\n")  # the plain format: a draw per GPU
    monkeypatch.setenv("FAKE_NVML_POWER_LIVE", str(live))
    state = a100_sxm4(1)
    state.gpus[0].energy_mj = 777
    fake_nvml.load(state)
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetPowerUsage(h) == 123_000
        assert _field(h, FI_POWER_INSTANT) == (pynvml.NVML_SUCCESS, 123_000)
        assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) == 777
    finally:
        pynvml.nvmlShutdown()
