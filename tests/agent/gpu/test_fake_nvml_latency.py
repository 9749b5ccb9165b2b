"""The fake NVML's cost model: each call charged the latency its state names (issue 44, item 5).

Judged by lower bounds a slow machine cannot break (a call charged L takes at least L of wall
time), never by how fast this machine is.
"""

from __future__ import annotations

import ctypes
import dataclasses
import time

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4

CHARGED_US = 20_000


def _timed_count(fake: FakeNvml) -> tuple[float, float]:
    """(wall, this thread's CPU) seconds of one nvmlDeviceGetCount_v2 on the fake."""
    count = ctypes.c_uint()
    wall, cpu = time.perf_counter(), time.thread_time()
    fake.lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    return time.perf_counter() - wall, time.thread_time() - cpu


def test_a_call_takes_its_symbols_latency_slept_or_spun(fake_nvml: FakeNvml) -> None:
    state = fake_nvml.load(a100_sxm4(1))
    state.latency_us_by_symbol = {"nvmlDeviceGetCount_v2": CHARGED_US}
    fake_nvml.write()
    slept_wall, slept_cpu = _timed_count(fake_nvml)
    assert slept_wall >= CHARGED_US / 1e6
    state.latency_spin = True
    fake_nvml.write()
    spun_wall, spun_cpu = _timed_count(fake_nvml)
    assert spun_wall >= CHARGED_US / 1e6
    assert spun_cpu > slept_cpu  # spun on this thread's CPU, as a driver's ioctl; slept is not
    assert fake_nvml.calls("nvmlDeviceGetCount_v2") == 2


def test_a_tick_of_n_calls_on_a_gpu_takes_at_least_n_latencies(fake_nvml: FakeNvml) -> None:
    latency_us = 2_000
    state = fake_nvml.load(a100_sxm4(2))
    config = dataclasses.replace(AgentConfig(), gpu_power_sample_seconds=0)  # the tick's calls alone
    ctx = SourceContext(roots=Roots(), files=KernelFiles(), config=config)
    source = GpuSource(ctx)
    try:
        source.scan(pb.NodeInfo())
        source.collect(pb.NodeReport(time_unix_seconds=1000.0))
        state.latency_us = latency_us
        fake_nvml.write()
        fake_nvml.reset_counts()
        started = time.perf_counter()
        source.collect(pb.NodeReport(time_unix_seconds=1001.0))
        wall = time.perf_counter() - started
        # Each GPU's calls run one after another on its reader; the GPUs' readers side by side.
        per_gpu = [
            fake_nvml.calls(gpu=i) - fake_nvml.calls("nvmlEventSetWait_v2", gpu=i) for i in range(len(state.gpus))
        ]
        assert min(per_gpu) >= 4  # the tick's calls (round_readings): several latencies each
        assert wall >= max(per_gpu) * latency_us / 1e6
    finally:
        source.close()
        ctx.files.close()
