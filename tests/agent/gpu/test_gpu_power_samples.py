"""The draw read between ticks on GPUs without GPM (agent/gpu/power_samples.py), against the fake
NVML: sub-second phases reach the report, only while a process runs on the GPU, GPM GPUs are left
alone, a hang stays behind the deadlines."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nodeagent.agent.config import AgentConfig, ConfigError, GpuDeadlines, config_from_mapping
from nodeagent.agent.gpu.round_readings import LONGEST_ROUND
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, a100_sxm4, h100_sxm5

DEADLINES = GpuDeadlines(call_seconds=0.5, tick_seconds=1.0, scan_seconds=2.0, backoff_max_seconds=2.0)


def _source(fake: FakeNvml, state: FakeNvmlState, period: float = 0.02, job: bool = True) -> GpuSource:
    """The GPU source over ``state``, with a process on every GPU (a job's rank: this test's own
    process) unless ``job`` is False."""
    if job:
        for g in state.gpus:
            g.procs = {os.getpid(): 1 << 30}
    fake.load(state)
    config = AgentConfig(gpu_deadlines=DEADLINES, gpu_power_sample_seconds=period)
    source = GpuSource(SourceContext(roots=Roots(), files=KernelFiles(), config=config))
    source.scan(pb.NodeInfo())
    return source


def _tick(source: GpuSource) -> pb.NodeReport:
    report = pb.NodeReport(time_unix_seconds=time.time())
    source.collect(report)
    return report


def _tick_until_processes(source: GpuSource, gpu: int, *, running: bool) -> pb.NodeReport:
    """Ticks until GPU ``gpu``'s sample shows a process (or none): its processes are read once a
    round (``round_readings``)."""
    for _ in range(LONGEST_ROUND):
        report = _tick(source)
        if bool(report.gpus[gpu].processes) == running:
            return report
    raise AssertionError(f"GPU {gpu}'s processes not read in {LONGEST_ROUND} ticks")


def _wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_sub_second_phases_reach_the_report_on_a_gpu_without_gpm(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    live.write_text("380000 55000\n")
    source = _source(fake_nvml, a100_sxm4(count=2))
    sources.append(source)
    _tick(source)  # drains what was read since the scan
    calls = fake_nvml.calls("nvmlDeviceGetFieldValues", 0)
    _wait_for(lambda: fake_nvml.calls("nvmlDeviceGetFieldValues", 0) >= calls + 3)
    live.write_text("120000 55000\n")  # GPU 0 leaves its compute phase for the collective
    calls = fake_nvml.calls("nvmlDeviceGetFieldValues", 0)
    _wait_for(lambda: fake_nvml.calls("nvmlDeviceGetFieldValues", 0) >= calls + 3)
    report = _tick(source)
    first, second = report.gpus
    assert 380.0 in first.power_samples_watts and 120.0 in first.power_samples_watts
    # Oldest first: the compute phase, then the collective.
    assert list(first.power_samples_watts).index(380.0) < list(first.power_samples_watts).index(120.0)
    assert set(second.power_samples_watts) == {55.0}
    assert first.power_watts == pytest.approx(120.0)  # the tick's own reading: one instant
    # Drained: the next tick carries only what was read after this one.
    live.write_text("200000 55000\n")
    calls = fake_nvml.calls("nvmlDeviceGetFieldValues", 0)
    _wait_for(lambda: fake_nvml.calls("nvmlDeviceGetFieldValues", 0) >= calls + 3)
    assert 380.0 not in _tick(source).gpus[0].power_samples_watts


def test_power_is_read_between_ticks_only_while_a_process_runs_on_the_gpu(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    live.write_text("60000 300000\n")
    state = a100_sxm4(count=2)
    source = _source(fake_nvml, state, job=False)
    sources.append(source)
    _tick(source)
    before = [fake_nvml.calls("nvmlDeviceGetFieldValues", i) for i in (0, 1)]
    time.sleep(0.2)  # ten periods: a sampler would have read by now
    assert [fake_nvml.calls("nvmlDeviceGetFieldValues", i) for i in (0, 1)] == before
    assert not any(g.power_samples_watts for g in _tick(source).gpus)
    state.gpus[1].procs = {os.getpid(): 1 << 30}  # a job starts on GPU 1
    fake_nvml.write()
    _tick_until_processes(source, 1, running=True)  # sees its process (a round at most): reads begin
    calls = fake_nvml.calls("nvmlDeviceGetFieldValues", 1)
    _wait_for(lambda: fake_nvml.calls("nvmlDeviceGetFieldValues", 1) >= calls + 3)
    idle, busy = _tick(source).gpus
    assert not idle.power_samples_watts and set(busy.power_samples_watts) == {300.0}
    state.gpus[1].procs = {}  # the job ends: the readings up to then, and no more
    fake_nvml.write()
    _tick_until_processes(source, 1, running=False)
    calls = fake_nvml.calls("nvmlDeviceGetFieldValues", 1)
    time.sleep(0.2)
    assert fake_nvml.calls("nvmlDeviceGetFieldValues", 1) == calls
    assert not _tick(source).gpus[1].power_samples_watts


def test_gpus_with_gpm_and_a_period_of_zero_read_nothing_between_ticks(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    live.write_text("600000\n")
    source = _source(fake_nvml, h100_sxm5(count=1))
    sources.append(source)
    _tick(source)
    time.sleep(0.2)  # ten periods: a sampler would have read by now
    assert not _tick(source).gpus[0].power_samples_watts
    source.close()
    off = _source(fake_nvml, a100_sxm4(count=1), period=0)
    sources.append(off)
    _tick(off)
    time.sleep(0.2)
    assert not _tick(off).gpus[0].power_samples_watts


def test_a_hang_between_ticks_makes_the_gpu_unresponsive_and_sampling_stops(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    live.write_text("300000 300000\n")
    source = _source(fake_nvml, a100_sxm4(count=2))
    sources.append(source)
    _tick(source)
    assert fake_nvml.state is not None
    fake_nvml.state.gpus[1].hang = 1
    fake_nvml.write()
    try:
        time.sleep(0.1)  # GPU 1's reader blocks in a between-ticks read
        report = _tick(source)
        assert report.gpus[1].unresponsive
        assert report.gpus[1].unresponsive_call == "nvmlDeviceGetFieldValues"
        assert report.gpus[0].power_samples_watts and not report.gpus[0].unresponsive
    finally:
        fake_nvml.state.gpus[1].hang = 0
        fake_nvml.write()


def test_the_field_unsupported_falls_back_to_power_usage(
    fake_nvml: FakeNvml, live: Path, sources: list[GpuSource]
) -> None:
    live.write_text("250000\n")
    state = a100_sxm4(count=1)
    state.gpus[0].unsupported_fields.add(186)
    source = _source(fake_nvml, state)
    sources.append(source)
    _tick(source)
    _wait_for(lambda: fake_nvml.calls("nvmlDeviceGetPowerUsage", 0) >= 2)
    assert set(_tick(source).gpus[0].power_samples_watts) == {250.0}


@pytest.mark.parametrize("bad", [-1, 0.01, 2, True, "0.1"])
def test_the_period_is_checked(bad: object) -> None:
    with pytest.raises(ConfigError, match="gpu_power_sample_seconds"):
        config_from_mapping({"gpu_power_sample_seconds": bad}, source="agent.toml")
    assert config_from_mapping({"gpu_power_sample_seconds": 0}).gpu_power_sample_seconds == 0.0
