"""Power read between reports on one shared thread (agent/gpu/power_sampler.py), only where the
GPU's regime makes sub-second readings tell (agent/gpu/power_samples.py): counts, not times.

An instantaneous GPU is read at every round of the sampler (one wake-up a period for all GPUs);
a GPU whose regime is a moving mean with the energy counter advancing rests between probes; a GPU
whose read hangs turns unresponsive and the others go on being read."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.agent.config import AgentConfig, GpuDeadlines
from nodeagent.agent.gpu import nvml_library, power_samples
from nodeagent.agent.gpu.power_regime import POWER_INSTANT, POWER_MEAN, PowerRegime
from nodeagent.agent.gpu.power_samples import PowerSamples
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, a100_sxm4

DEADLINES = GpuDeadlines(call_seconds=0.3, tick_seconds=0.6, scan_seconds=2.0, backoff_max_seconds=2.0)
L40S = pb.GpuInfo(name="NVIDIA L40S")
A100 = pb.GpuInfo(name="NVIDIA A100-SXM4-80GB")


# -- the plan alone, on a clock the test keeps ------------------------------------------------------


class _Clock:
    now = 1000.0


class _Board:
    """A GPU's draw from ``signal`` on the test's clock; ``calls`` counts the power reads."""

    def __init__(self, signal: Callable[[float], float], clock: _Clock) -> None:
        self.signal, self.clock, self.calls = signal, clock, 0
        self.unsupported_fields: set[tuple[int, int]] = set()
        self.unsupported: set[str] = set()

    def power_instant_mw(self) -> int:
        self.calls += 1
        return int(self.signal(self.clock.now) * 1000)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    made = _Clock()
    monkeypatch.setattr(power_samples, "_now", lambda: made.now)
    return made


def _run(clock: _Clock, samples: PowerSamples, regime: PowerRegime, seconds: float, watts: float) -> list[int]:
    """A job's ``seconds``: the sampler's call every 0.1 s (skipped while the GPU rests), a tick each
    second with the energy counter at ``watts``; the reads each tick carried."""
    busy = pb.GpuSample(processes=[pb.GpuProcess(pid=1)])
    carried: list[int] = []
    energy_mj, end, next_tick = 0, clock.now + seconds, clock.now + 1.0
    while clock.now < end:
        clock.now += 0.1
        energy_mj += int(watts * 100)
        samples.read()
        if clock.now >= next_tick:
            sample = pb.GpuSample()
            sample.CopyFrom(busy)
            mean = samples.drain_into(sample, regime)
            regime.observe_energy(energy_mj, clock.now, mean)
            carried.append(len(sample.power_samples_watts))
            next_tick += 1.0
    return carried


def _mean_once_a_second(t: float) -> float:
    """A moving mean the sensor updates once a second, over a job whose steps vary."""
    return (280.0, 240.0, 300.0, 260.0)[int(t) % 4]


def test_a_moving_mean_with_the_energy_counter_rests_between_probes(clock: _Clock) -> None:
    board = _Board(_mean_once_a_second, clock)
    samples, regime = PowerSamples(board), PowerRegime(L40S)  # type: ignore[arg-type]
    first = _run(clock, samples, regime, power_samples.PROBE_SECONDS + 5, watts=270.0)
    assert regime.source == POWER_MEAN and "like a clock" in regime.reason
    assert samples.resting
    reads = board.calls
    assert reads >= 10 * power_samples.PROBE_SECONDS - 5  # the job's first seconds decide it
    # Resting: no reads, and the reports carry none, until the next probe.
    rest = _run(clock, samples, regime, power_samples.PROBE_EVERY_SECONDS - 30, watts=270.0)
    assert board.calls == reads and set(rest) == {0}
    assert first[0] >= 9
    # The probe: reads again for its seconds, confirms the mean, and rests again.
    _run(clock, samples, regime, 30 + power_samples.PROBE_SECONDS + 5, watts=270.0)
    probe = board.calls - reads
    assert 10 * power_samples.PROBE_SECONDS - 5 <= probe <= 10 * (power_samples.PROBE_SECONDS + 2)
    assert samples.resting and regime.source == POWER_MEAN


def test_instantaneous_readings_are_read_at_every_call_for_the_whole_job(clock: _Clock) -> None:
    board = _Board(lambda t: 400.0 if (t % 0.5) < 0.3 else 120.0, clock)
    samples, regime = PowerSamples(board), PowerRegime(L40S)  # type: ignore[arg-type]
    carried = _run(clock, samples, regime, 120.0, watts=290.0)
    assert regime.source == POWER_INSTANT
    assert not samples.resting
    assert board.calls >= 1195  # every 0.1 s for 120 s
    assert min(carried) >= 9  # about ten readings every report


def test_a_moving_mean_without_the_energy_counter_keeps_reading(clock: _Clock) -> None:
    """The collector then takes the report's draw from the readings' mean: they still tell."""
    board = _Board(_mean_once_a_second, clock)
    samples, regime = PowerSamples(board), PowerRegime(L40S)  # type: ignore[arg-type]
    busy = pb.GpuSample(processes=[pb.GpuProcess(pid=1)])
    for _ in range(900):  # 90 s
        clock.now += 0.1
        samples.read()
        if round(clock.now * 10) % 10 == 0:
            sample = pb.GpuSample()
            sample.CopyFrom(busy)
            regime.observe_energy(None, clock.now, samples.drain_into(sample, regime))
    assert regime.source == POWER_MEAN
    assert not samples.resting and board.calls == 900


def test_a_flat_draw_keeps_the_prior_and_rests_once_undecided(clock: _Clock) -> None:
    board = _Board(lambda t: 250.0, clock)
    samples, regime = PowerSamples(board), PowerRegime(L40S)  # type: ignore[arg-type]
    _run(clock, samples, regime, power_samples.UNDECIDED_SECONDS - 5, watts=250.0)
    assert not samples.resting  # no vote yet: still deciding
    _run(clock, samples, regime, 10.0, watts=250.0)
    assert samples.resting and regime.reason.startswith("prior:")
    flat_a100 = PowerSamples(_Board(lambda t: 250.0, clock))  # type: ignore[arg-type]
    a100 = PowerRegime(A100)
    _run(clock, flat_a100, a100, 2 * power_samples.UNDECIDED_SECONDS, watts=250.0)
    assert not flat_a100.resting  # GA100's prior is instantaneous: it keeps reading


def test_a_new_job_samples_its_first_seconds_afresh(clock: _Clock) -> None:
    board = _Board(_mean_once_a_second, clock)
    samples, regime = PowerSamples(board), PowerRegime(L40S)  # type: ignore[arg-type]
    _run(clock, samples, regime, power_samples.PROBE_SECONDS + 5, watts=270.0)
    assert samples.resting
    samples.drain_into(pb.GpuSample(), regime)  # a tick with no process: the job ended
    assert not samples.resting
    reads = board.calls
    _run(clock, samples, regime, 5.0, watts=270.0)
    assert board.calls - reads >= 45


def test_a_gpu_that_answers_no_power_read_rests_at_once(clock: _Clock) -> None:
    board = _Board(lambda t: 0.0, clock)
    board.unsupported_fields.add((186, 0))
    board.unsupported.add("nvmlDeviceGetPowerUsage")
    samples, regime = PowerSamples(board), PowerRegime(A100)  # type: ignore[arg-type]
    _run(clock, samples, regime, 60.0, watts=250.0)
    assert samples.resting and board.calls <= 10  # the first second's calls, then none


# -- the shared thread, against the fake NVML ---------------------------------------------------


def _source(fake: FakeNvml, state: FakeNvmlState, made: list[GpuSource], period: float = 0.02) -> GpuSource:
    for g in state.gpus:
        g.procs = {os.getpid(): 1 << 30}
    fake.load(state)
    config = AgentConfig(gpu_deadlines=DEADLINES, gpu_power_sample_seconds=period)
    source = GpuSource(SourceContext(roots=Roots(), files=KernelFiles(), config=config))
    made.append(source)
    source.scan(pb.NodeInfo())
    return source


def _tick(source: GpuSource) -> pb.NodeReport:
    report = pb.NodeReport(time_unix_seconds=time.time())
    source.collect(report)
    return report


def _reads(source: GpuSource) -> list[int]:
    return [s.power.reads if s.power is not None else 0 for s in source._gpus]


def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_one_wakeup_a_period_reads_every_sampled_gpu(fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]) -> None:
    live.write_text("300000 " * 8 + "\n")
    source = _source(fake_nvml, a100_sxm4(count=8), sources)
    _tick(source)  # sees the processes: reads begin
    sampler = source._readers.sampler
    wakeups, reads = sampler.wakeups, _reads(source)
    _until(lambda: sampler.wakeups >= wakeups + 20)
    woke = sampler.wakeups - wakeups
    grew = [after - before for before, after in zip(reads, _reads(source), strict=True)]
    # Every GPU read once a round (one may be skipped while the tick reads it), one thread for all.
    assert all(woke - 2 <= n <= woke + 1 for n in grew), (woke, grew)
    assert sum(t.name == "nvml-power" for t in threading.enumerate()) == 1
    assert not any(t.name.startswith("nvml-gpu") and t.is_alive() and _in_read(t) for t in threading.enumerate())


def _in_read(thread: threading.Thread) -> bool:
    """Whether a reader thread is inside an NVML call (it must not be: reads are the sampler's)."""
    return thread.ident is not None and nvml_library.call_in_flight(thread.ident) is not None


def test_a_hung_gpu_does_not_stop_the_others_readings(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    live.write_text("300000 300000 300000\n")
    source = _source(fake_nvml, a100_sxm4(count=3), sources)
    _tick(source)
    assert fake_nvml.state is not None
    fake_nvml.state.gpus[1].hang = 1
    fake_nvml.write()
    sampler = source._readers.sampler
    try:
        _until(lambda: sampler.in_flight(1) is not None)  # the shared thread blocks in GPU 1's read
        _until(lambda: _tick(source).gpus[1].unresponsive)
        assert _tick(source).gpus[1].unresponsive_call == "nvmlDeviceGetFieldValues"
        hung = _reads(source)[1]
        before = _reads(source)
        _until(lambda: min(_reads(source)[i] - before[i] for i in (0, 2)) >= 10)
        report = _tick(source)
        assert report.gpus[0].power_samples_watts and report.gpus[2].power_samples_watts
        assert _reads(source)[1] == hung  # skipped while unresponsive
        # One thread left blocked in GPU 1's read, one reading the others.
        assert sum(t.name == "nvml-power" for t in threading.enumerate()) == 2
    finally:
        fake_nvml.state.gpus[1].hang = 0
        fake_nvml.write()
    # The blocked read returns, its thread ends; GPU 1 answers a probe and is read again.
    _until(lambda: sum(t.name == "nvml-power" for t in threading.enumerate()) == 1)
    _until(lambda: not _tick(source).gpus[1].unresponsive)
    again = _reads(source)[1]
    _until(lambda: _reads(source)[1] >= again + 5)
