"""One GPU's readings of a tick, into its `GpuSample`: what the `gpu` source reads of each GPU
on the GPU's own reader thread (``deadlines``).

Each tick's calls (every counter in one batched field-value call, the SM clock, utilization, or
GPM where the GPU has it) and one of the round's (``round_readings``: memory, processes, ...),
then the last of the slowly changing readings (``slow_readings``), the draw read between ticks
while a process runs (``power_samples``) and which reading tells the GPU's computing share
(``power_regime``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu.deadlines import GpuReaders
from nodeagent.agent.gpu.describe import job_ref
from nodeagent.agent.gpu.gpu_state import GpuState
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.nvml_types import ProcessUsage
from nodeagent.agent.gpu.power_regime import PowerRegime, decide
from nodeagent.agent.gpu.processes import ProcessReader
from nodeagent.agent.gpu.round_readings import COUNTED_BITS
from nodeagent.core.wire.clock_events import clock_event_reason_names
from nodeagent.v1 import nodeagent_pb2 as pb


def fill_sample(
    state: GpuState, sample: pb.GpuSample, pids: set[int], processes: ProcessReader, readers: GpuReaders
) -> bool:
    """The tick's readings into ``sample``: each tick's calls, one of the round's
    (``round_readings``), then the last of the slowly changing ones (``slow_readings``); True
    when those were read this tick."""
    gpu = state.gpu
    plan = state.tick_plan()
    values = gpu.field_values(plan.requests)
    gpu_fields.fill_sample(values, plan, sample)
    gpm = state.info.gpm_supported
    turn = state.round
    counted = turn.counted_reasons(values)
    turn.turn(gpm=gpm, counted=counted is not None, shares=bool(turn.processes) and state.mig is None)
    fill_round(state, sample, pids, processes)
    if not sample.HasField("temperature_celsius"):  # a driver without field 308
        temperature = gpu.temperature_celsius()
        if temperature is not None:
            sample.temperature_celsius = float(temperature)
    if (gpu_fields.FI_PCIE_COUNT_RX_BYTES, 0) in gpu.unsupported_fields:
        rx, tx = gpu.pcie_throughput()
        if rx is not None:
            sample.pcie_rx_bytes_per_second = rx
        if tx is not None:
            sample.pcie_tx_bytes_per_second = tx
    fill_reasons(state, sample, counted)
    sm_clock = gpu.sm_clock_mhz()
    if sm_clock is not None:
        sample.sm_clock_mhz = sm_clock
    slow_read = state.slow.read(gpu)
    state.slow.fill(sample)
    if state.info.HasField("pcie_max_generation"):
        sample.pcie_max_link_generation = state.info.pcie_max_generation
    if state.info.HasField("pcie_max_width"):
        sample.pcie_max_link_width = state.info.pcie_max_width
    if gpm:
        state.read_gpm(sample)
    readings_mean = power_while_busy(state, sample, readers) if state.power is not None else None
    computing_source(state, sample, readings_mean)
    return slow_read


def fill_round(state: GpuState, sample: pb.GpuSample, pids: set[int], processes: ProcessReader) -> None:
    """Utilization (every tick without GPM), memory and processes: read on their turn of the
    round, else the last reading; one NVML did not give is read again at the next tick."""
    gpu, turn = state.gpu, state.round
    util = gpu.utilization() if not state.info.gpm_supported or turn.reads("utilization") else turn.utilization
    turn.utilization = util
    if util is not None:
        sample.utilization_gpu_ratio = util.gpu_ratio
        sample.utilization_memory_ratio = util.memory_ratio
    if turn.reads("memory"):
        turn.memory = gpu.memory()
        if turn.memory is None:
            turn.retry = "memory"
    gpu_fields.fill_memory(turn.memory, sample)
    if turn.reads("processes"):
        turn.processes = gpu.processes()
        if turn.processes is None:
            turn.retry = "processes"
    add_process_list(turn.processes or (), sample, pids, processes)


def fill_reasons(state: GpuState, sample: pb.GpuSample, counted: int | None) -> None:
    """The clock-event reasons: the throttling ones from their counters, the rest from the
    bitmask of the round's turn; the bitmask every tick where the GPU has no counters."""
    turn = state.round
    reasons: int | None
    if counted is None or turn.reads("reasons"):
        reasons = state.gpu.clock_event_reasons()
        if reasons is not None:
            turn.rest_bits = reasons & ~COUNTED_BITS
        if counted is not None:
            reasons = counted | turn.rest_bits
    else:
        reasons = counted | turn.rest_bits
    if reasons is not None:
        sample.clock_event_reasons = reasons
        sample.clock_event_reason_names.extend(clock_event_reason_names(reasons))


def add_processes(gpu: Gpu, sample: pb.GpuSample, pids: set[int], processes: ProcessReader) -> None:
    """The compute processes of a GPU or of a MIG device, with their name, user and job."""
    add_process_list(gpu.processes() or (), sample, pids, processes)


def add_process_list(
    usages: Iterable[ProcessUsage], sample: pb.GpuSample, pids: set[int], processes: ProcessReader
) -> None:
    """These compute processes into ``sample``, with their name, user and job."""
    for proc in usages:
        pids.add(proc.pid)
        info = processes.info(proc.pid)
        entry = sample.processes.add(pid=proc.pid, name=info.name, user=info.user)
        if proc.used_memory_bytes is not None:
            entry.used_memory_bytes = proc.used_memory_bytes
        entry.job.CopyFrom(job_ref(info))


def computing_source(state: GpuState, sample: pb.GpuSample, readings_mean: float | None) -> None:
    """Which reading tells the GPU's computing share, from its readings (``power_regime``)."""
    regime = state.regime
    if regime is None:
        regime = state.regime = PowerRegime(state.info)
    energy = sample.energy_millijoules_total if sample.HasField("energy_millijoules_total") else None
    regime.observe_energy(energy, time.monotonic(), readings_mean)
    power = state.power
    reads = "off" if power is None else "unreadable" if power.unreadable else "between"
    decide(regime, sample, state.info, state.mig is not None, reads)


def power_while_busy(state: GpuState, sample: pb.GpuSample, readers: GpuReaders) -> float | None:
    """A GPU without GPM reads its draw between ticks only while a process runs on it: an idle
    GPU's draw tells nothing the report's mean does not. On the GPU's own reader thread, which
    picks up the change when this tick's work is done. The readings' mean, None without any."""
    power = state.power
    assert power is not None
    regime = state.regime
    if regime is None:
        regime = state.regime = PowerRegime(state.info)
    reader = readers.reader(state.index)
    mean = power.drain_into(sample, regime)
    if sample.processes:
        if reader.between is None:
            reader.between = power.read
    elif reader.between is not None:
        reader.between = None
        regime.forget_span()  # the next job's readings start a span of their own
    return mean
