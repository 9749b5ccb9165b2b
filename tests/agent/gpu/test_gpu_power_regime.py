"""Which reading tells a GPU's computing share (agent/gpu/power_regime.py), decided from the
readings themselves.

First the decision alone, on readings made on a clock the test keeps (a step's phases read
instantaneously, a mean that changes once a second, a moving mean, flat readings, readings the
energy counter contradicts); then through pynvml's real ctypes path against the fake NVML, the
fake's draw driven over time through its live file ($FAKE_NVML_POWER_LIVE)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.config import AgentConfig, GpuDeadlines
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.gpu import power_samples
from nodeagent.agent.gpu.power_regime import VOTES_TO_SWITCH, PowerRegime, decide, prior
from nodeagent.agent.gpu.power_samples import PowerSamples
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, a100_sxm4, h100_sxm5
from tests.fakes.trees import REPO

A100 = pb.GpuInfo(name="NVIDIA A100-SXM4-80GB")
L40S = pb.GpuInfo(name="NVIDIA L40S")
Signal = Callable[[float], float]


# -- the decision, on a clock the test keeps ------------------------------------------------------


class _Clock:
    now = 1000.0


class _Board:
    """What PowerSamples asks of a GPU: its draw now, in mW, from ``signal`` on the test's clock."""

    def __init__(self, signal: Signal, clock: _Clock) -> None:
        self.signal, self.clock = signal, clock
        self.unsupported_fields: set[tuple[int, int]] = set()
        self.unsupported: set[str] = set()

    def power_instant_mw(self) -> int:
        return int(self.signal(self.clock.now) * 1000)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    made = _Clock()
    monkeypatch.setattr(power_samples, "_now", lambda: made.now)
    return made


def _read(
    clock: _Clock, signal: Signal, regime: PowerRegime, seconds: float, period: float = 0.1,
    energy: Callable[[float], float] | None = None,
) -> PowerRegime:  # fmt: skip
    """Read ``signal`` every ``period`` (with a little jitter, as a busy reader thread does) and
    tick every second; ``energy``: the energy counter's watts, else the true mean of the signal."""
    samples = PowerSamples(_Board(signal, clock))  # type: ignore[arg-type]
    end, next_tick, energy_mj, k = clock.now + seconds, clock.now + 1.0, 0.0, 0
    while clock.now < end:
        k += 1
        step = period * (1.0 + 0.15 * ((k * 7919) % 10) / 10)  # 0.100 to 0.115 s
        draw = energy(clock.now) if energy is not None else signal(clock.now)
        energy_mj += draw * step * 1000.0
        clock.now += step
        samples.read()
        if clock.now >= next_tick:
            mean = samples.drain_into(pb.GpuSample(), regime)
            regime.observe_energy(int(energy_mj), clock.now, mean)
            next_tick += 1.0
    return regime


def _phases(step: float, duty: float, high: float = 400.0, low: float = 120.0) -> Signal:
    """A training step's draw: computing for ``duty`` of each step, then waiting in the collective."""
    return lambda t: high if (t % step) < duty * step else low


def _mean_phases(step: float, duty: float, window: float = 1.0, high: float = 400.0, low: float = 120.0) -> Signal:
    """The last ``window`` seconds' mean of ``_phases(step, duty)``, exactly."""

    def computing(t: float) -> float:  # seconds spent computing from 0 to t
        return math.floor(t / step) * duty * step + min(t % step, duty * step)

    return lambda t: low + (high - low) * (computing(t) - computing(t - window)) / window


def _held(signal: Signal, every: float = 1.0) -> Signal:
    """``signal`` as a sensor updated every ``every`` seconds gives it."""
    return lambda t: signal(math.floor(t / every) * every)


def test_the_model_is_the_prior() -> None:
    assert prior(A100)[0] == "power_instant" and "GA100" in prior(A100)[1]
    assert prior(pb.GpuInfo(name="NVIDIA A30"))[0] == "power_instant"
    assert prior(L40S)[0] == "power_mean" and prior(L40S)[1].startswith("prior:")
    assert prior(pb.GpuInfo(name="NVIDIA A10"))[0] == "power_mean"


@pytest.mark.parametrize("step", [0.15, 0.5, 2.0])
def test_instantaneous_readings_of_a_steps_phases_read_as_instant(clock: _Clock, step: float) -> None:
    regime = _read(clock, _phases(step, 0.6), PowerRegime(L40S), seconds=60)
    assert regime.source == "power_instant"
    assert "two groups" in regime.reason and "prior" not in regime.reason


@pytest.mark.parametrize("step", [0.17, 2.0])
def test_readings_that_change_once_a_second_read_as_a_mean(clock: _Clock, step: float) -> None:
    # 0.17 s: the mean of many steps, nearly flat, but its value changes on the sensor's 1 s clock
    # (a step that divides the second exactly would give the very same mean each second: flat).
    regime = _read(clock, _held(_mean_phases(step, 0.6)), PowerRegime(A100), seconds=60)
    assert regime.source == "power_mean"
    assert "like a clock" in regime.reason


def test_a_moving_mean_updated_at_every_read_reads_as_a_mean(clock: _Clock) -> None:
    regime = _read(clock, _held(_mean_phases(2.0, 0.6), 0.1), PowerRegime(A100), seconds=60)
    assert regime.source == "power_mean"
    assert "small steps" in regime.reason


def test_flat_readings_keep_the_prior_and_the_source_decided(clock: _Clock) -> None:
    regime = _read(clock, lambda t: 300.0 + (t * 10 % 3), PowerRegime(A100), seconds=60)  # steady: 300-303 W
    assert regime.source == "power_instant" and regime.reason.startswith("prior:")
    regime = _read(clock, _phases(0.5, 0.6), PowerRegime(L40S), seconds=30)
    assert regime.source == "power_instant"
    # The job ends its steps (a GPU at rest, or a long steady compute): flat from any source.
    _read(clock, lambda t: 62.0, regime, seconds=120)
    _read(clock, lambda t: 401.0 + (t * 10 % 2), regime, seconds=120)
    assert regime.source == "power_instant"


def test_one_or_two_contrary_spans_do_not_switch(clock: _Clock) -> None:
    regime = _read(clock, _phases(0.5, 0.6), PowerRegime(L40S), seconds=30)
    assert regime.source == "power_instant"
    mean = _held(_mean_phases(2.0, 0.6))
    _read(clock, mean, regime, seconds=4.5)  # one span's worth
    assert regime.source == "power_instant"
    _read(clock, mean, regime, seconds=4.0 * (VOTES_TO_SWITCH + 1))
    assert regime.source == "power_mean"


def test_readings_the_energy_counter_contradicts_read_as_energy(clock: _Clock) -> None:
    # The readings swing as a step's phases, but the energy counter says the GPU draws 100 W.
    regime = _read(clock, _phases(0.5, 0.6), PowerRegime(A100), seconds=40, energy=lambda t: 100.0)
    assert regime.source == "energy"
    assert "the energy counter 100 W" in regime.reason
    agreeing = _read(clock, _phases(0.5, 0.6), PowerRegime(A100), seconds=40)
    assert agreeing.source == "power_instant"


def test_a_tick_copies_its_readings_without_growing(clock: _Clock) -> None:
    regime = PowerRegime(L40S)
    buffer = regime._buffer
    _read(clock, _phases(0.5, 0.6), regime, seconds=120)
    assert regime._buffer is buffer and len(buffer) == 128


# -- through the fake NVML -------------------------------------------------------------------------


class _NoSender:
    connected_to = None
    reconnects_total = 0
    reports_resent_total = 0


DEADLINES = GpuDeadlines(call_seconds=0.5, tick_seconds=1.0, scan_seconds=2.0, backoff_max_seconds=2.0)


class _Draw(threading.Thread):
    """Writes the fake's live draw (mW, GPU 0) from ``signal`` every ``every`` seconds, on absolute
    deadlines, until stopped."""

    def __init__(self, path: Path, signal: Callable[[int], float], every: float) -> None:
        super().__init__(daemon=True)
        self.path, self.signal, self.every = path, signal, every
        self.halt = threading.Event()

    def run(self) -> None:
        start, k = time.monotonic(), 0
        while not self.halt.is_set():
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(f"{int(self.signal(k) * 1000)}\n")
            tmp.replace(self.path)
            k += 1
            self.halt.wait(max(0.0, start + k * self.every - time.monotonic()))


def _source(fake: FakeNvml, state: FakeNvmlState, made: list[GpuSource], period: float = 0.02) -> GpuSource:
    for g in state.gpus:
        g.procs = {os.getpid(): 1 << 30}  # a job's rank on every GPU: the draw is read between ticks
    fake.load(state)
    config = AgentConfig(gpu_deadlines=DEADLINES, gpu_power_sample_seconds=period)
    source = GpuSource(SourceContext(roots=Roots(), files=KernelFiles(), config=config))
    made.append(source)
    source.scan(pb.NodeInfo())
    return source


def _until(source: GpuSource, wanted: str, fake: FakeNvml | None = None, timeout: float = 40.0) -> pb.GpuSample:
    """Tick every 0.2 s until GPU 0's source is ``wanted``; its sample. With ``fake``, the energy
    counter advances 20 J a tick (100 W)."""
    deadline = time.monotonic() + timeout
    while True:
        if fake is not None and fake.state is not None:
            fake.state.gpus[0].energy_mj += 20_000
            fake.write()
        report = pb.NodeReport(time_unix_seconds=time.time())
        source.collect(report)
        sample = report.gpus[0]
        if sample.computing_source == wanted:
            return sample
        assert time.monotonic() < deadline, f"still {sample.computing_source}: {sample.computing_source_reason}"
        time.sleep(0.2)


def test_two_phase_steps_read_instantaneously_through_nvml_are_power_instant(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    state = a100_sxm4(count=1)
    state.gpus[0].name = "NVIDIA L40S"  # a board whose prior is a moving mean
    source = _source(fake_nvml, state, sources)
    first = pb.NodeReport(time_unix_seconds=time.time())
    source.collect(first)
    assert first.gpus[0].computing_source == "power_mean"
    assert first.gpus[0].computing_source_reason.startswith("prior:")
    draw = _Draw(live, lambda k: 380.0 if k % 3 else 120.0, 0.06)  # 0.12 s computing, 0.06 s waiting
    draw.start()
    try:
        sample = _until(source, "power_instant")
    finally:
        draw.halt.set()
        draw.join()
    assert "two groups" in sample.computing_source_reason


def test_readings_that_change_once_a_second_through_nvml_are_power_mean(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The readings' clock runs 4x: a value that changes every 0.25 s holds one second to the agent.
    monkeypatch.setattr(power_samples, "_now", lambda: 4.0 * time.monotonic())
    source = _source(fake_nvml, a100_sxm4(count=1), sources)  # GA100: prior instantaneous
    draw = _Draw(live, lambda k: (280.0, 240.0, 300.0, 260.0)[k % 4], 0.25)
    draw.start()
    try:
        sample = _until(source, "power_mean")
    finally:
        draw.halt.set()
        draw.join()
    assert "like a clock" in sample.computing_source_reason


def test_power_not_supported_with_the_energy_counter_advancing_is_energy(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    state = a100_sxm4(count=1)
    state.gpus[0].unsupported_fields.add(186)
    state.gpus[0].unsupported.add("nvmlDeviceGetPowerUsage")
    source = _source(fake_nvml, state, sources)
    sample = _until(source, "energy", fake=fake_nvml, timeout=10.0)
    assert "not supported" in sample.computing_source_reason
    assert not sample.power_samples_watts
    # Without the energy counter either: none.
    state.gpus[0].unsupported_fields.add(83)
    fake_nvml.write()
    _until(source, "none", timeout=10.0)


def test_a_gpu_with_gpm_is_gpm_and_a_dcgm_source_stands(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    source = _source(fake_nvml, h100_sxm5(count=1), sources)
    report = pb.NodeReport(time_unix_seconds=time.time())
    source.collect(report)
    assert report.gpus[0].computing_source == "gpm" and "GPM" in report.gpus[0].computing_source_reason
    sample = pb.GpuSample(computing_source="dcgm", computing_source_reason="DCGM_FI_PROF_SM_ACTIVE")
    decide(PowerRegime(A100), sample, pb.GpuInfo(name="NVIDIA A100", gpm_supported=True), False, "between")
    assert (sample.computing_source, sample.computing_source_reason) == ("dcgm", "DCGM_FI_PROF_SM_ACTIVE")


# -- where it shows: /metrics and `nodeagent sample --json` ------------------------------------------


def test_the_metrics_page_has_one_info_series_per_gpu_with_its_source(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    state = a100_sxm4(count=3)
    state.gpus[1].name = "NVIDIA L40S"
    state.gpus[2].unsupported_fields.add(186)
    state.gpus[2].unsupported.add("nvmlDeviceGetPowerUsage")
    source = _source(fake_nvml, state, sources)
    telemetry = AgentTelemetry("node-1", 1.0)
    info = pb.NodeInfo(hostname="node-1")
    source.scan(info)
    for t in range(3):  # GPU 2 learns its power calls are not supported, and its energy advances
        state.gpus[2].energy_mj += 100_000
        fake_nvml.write()
        report = pb.NodeReport(time_unix_seconds=1000.0 + t)
        if t == 0:
            report.info.CopyFrom(info)
        source.collect(report)
        telemetry.publish(report)
        time.sleep(0.1)
    metrics = AgentMetrics(telemetry, Spool(max_bytes=1 << 20, max_age_seconds=60), sender=_NoSender(), targets=())  # type: ignore[arg-type]
    page = AgentExposition(metrics, ("gpu",), None).render().decode()
    families = {f.name: f for f in text_string_to_metric_families(page)}
    family = families["nodeagent_gpu_computing_source_info"]
    assert family.type == "gauge"
    series = {s.labels["gpu"]: s for s in family.samples}
    assert {gpu: s.labels["source"] for gpu, s in series.items()} == {
        "0": "power_instant", "1": "power_mean", "2": "energy"
    }  # fmt: skip
    assert all(s.value == 1 for s in series.values())
    assert series["0"].labels["UUID"] == state.gpus[0].uuid and series["0"].labels["modelName"]
    assert "# TYPE nodeagent_gpu_computing_source_info gauge" in page


def test_sample_json_shows_each_gpus_source_and_its_reason(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = a100_sxm4(count=2)
    state.gpus[1].name = "NVIDIA L40S"
    h100 = h100_sxm5(count=1).gpus[0]
    h100.index = 2
    state.gpus.append(h100)
    path = tmp_path / "nvml.state"
    state.write(path)
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_STATE", "FAKE_NVML_POWER_LIVE")}
    env.update(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_STATE=str(path))
    result = subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "sample", "--json", "--count", "1",
         "--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = {row["index"]: row for row in json.loads(result.stdout)["gpus"]}
    assert [rows[i]["computing_source"] for i in range(3)] == ["power_instant", "power_mean", "gpm"]
    assert rows[0]["computing_source_reason"].startswith("prior: NVIDIA A100")
    assert "GPM" in rows[2]["computing_source_reason"]
