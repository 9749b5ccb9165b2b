"""NVIDIA GPUs through NVML: topology at scan, one GpuSample per GPU per tick.

Per GPU and tick: utilization, memory, compute processes with their jobs (and per multi-node job
on the node one ``JobSample``, ``agent/gpu/job_samples.py``), every counter in one
batched field-value call (PCIe bytes and replays, NVLink state, bytes and errors per link, ECC,
row remapping, power, temperature), clock-event reasons, SM clock, and on GPM-capable
GPUs (Hopper and newer) SM activity, occupancy, tensor activity and PCIe/NVLink rates over the
tick. The memory clock, PCIe link, idle video engines and the fabric are read at a scan and every
30 s (``slow_readings``), each tick carrying the last reading. XID and double-bit ECC events
arrive from a background thread and go out in the next report.
Beside them, each in its module: the GPU's NVLink fabric (``fabric``), its MIG instances as
samples of their own (``mig``), each process's share of a shared GPU (``process_share``), Xid
counts and the process each Xid hit (``xid_counts``), and readings the rest of the GPU contradicts
(``suspect_fields``). Where ``[dcgm_exporter]`` names a local dcgm-exporter, DCGM's SM and tensor
activity fill the GPUs the agent reads no GPM on (``dcgm_exporter``).

A node without a driver is not an error: the reason lands in ``info.gpu.unavailable_reason`` and
once in an event, and everything else keeps working. A lost GPU is reported lost (with one
critical event) while the others keep being sampled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu import mig, nvml_library
from nodeagent.agent.gpu.deadlines import (
    GpuReaders,
    Overrun,
    responsive_event,
    unresponsive_event,
    unresponsive_sample,
)
from nodeagent.agent.gpu.describe import describe_gpu, job_ref
from nodeagent.agent.gpu.events import EventWatcher, WatchedGpu
from nodeagent.agent.gpu.fabric import FabricWatch
from nodeagent.agent.gpu.job_samples import JobMember, JobPressure, job_samples
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.nvml_sampling import GpmSample
from nodeagent.agent.gpu.power_regime import PowerRegime, decide
from nodeagent.agent.gpu.power_samples import PowerSamples, wanted
from nodeagent.agent.gpu.process_share import ProcessShares
from nodeagent.agent.gpu.processes import ProcessReader
from nodeagent.agent.gpu.slow_readings import SlowReadings
from nodeagent.agent.gpu.suspect_fields import SuspectReadings
from nodeagent.agent.gpu.xid_counts import XidLedger
from nodeagent.agent.sources.base import Source, SourceContext
from nodeagent.agent.sources.registry import register
from nodeagent.core.wire.clock_events import clock_event_reason_names
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.agent.gpu.dcgm_exporter import DcgmProfiling


@dataclass(slots=True)
class _GpuState:
    """What the source keeps per GPU between ticks (mutable on purpose: GPM's last sample,
    whether the loss was reported)."""

    index: int
    uuid: str
    gpu: Gpu
    info: pb.GpuInfo
    # Two GPM buffers, refilled in turn: metrics come from the newest and the one before.
    gpm_buffers: list[GpmSample] = field(default_factory=list)
    gpm_newest: int = -1  # which buffer holds the last good sample; -1: none yet
    lost_reported: bool = False
    plan: gpu_fields.TickPlan | None = None
    plan_refusals: int = -1  # how many fields the GPU had refused when the plan was made
    mig: mig.MigState | None = None  # a GPU in MIG mode: its instances
    opened: bool = True  # False: it did not answer at the scan (opened when it answers again)
    power: PowerSamples | None = None  # its draw read between ticks (no GPM), while a process runs
    slow: SlowReadings = field(default_factory=SlowReadings)  # what is read every 30 s and at scan
    regime: PowerRegime | None = None  # which reading tells its computing share (``power_regime``)

    def tick_plan(self) -> gpu_fields.TickPlan:
        """This tick's field requests; remade only when the GPU refused another field."""
        if self.plan is None or self.plan_refusals != len(self.gpu.unsupported_fields):
            self.plan = gpu_fields.tick_plan(self.info.nvlink_count, self.gpu.unsupported_fields)
            self.plan_refusals = len(self.gpu.unsupported_fields)
        return self.plan

    def drop_gpm(self) -> None:
        for buffer in self.gpm_buffers:
            buffer.free()
        self.gpm_buffers = []
        self.gpm_newest = -1
        if self.mig is not None:
            self.mig.drop_gpm()


@register
class GpuSource(Source):
    name = "gpu"
    help = "NVIDIA GPUs through NVML: utilization, memory, jobs, GPM, PCIe, NVLink, health, XID events"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self.unavailable_reason = ""
        self._reported_reason = ""
        self._gpus: list[_GpuState] = []
        self._watcher: EventWatcher | None = None
        self._processes = ProcessReader(ctx.roots.procfs)
        self._job_pressure = JobPressure(ctx.files, ctx.roots.sysfs)
        self._fabric = FabricWatch()
        self._shares = ProcessShares()
        self._xids = XidLedger()
        self._suspects = SuspectReadings()
        self._readers = GpuReaders(ctx.config.gpu_deadlines)
        self._watched: list[tuple[int, str]] = []
        self._dcgm: DcgmProfiling | None = None
        if ctx.config.dcgm_exporter.url:
            from nodeagent.agent.gpu.dcgm_exporter import DcgmProfiling  # noqa: PLC0415  (2.5 MB: only where configured)

            self._dcgm = DcgmProfiling(ctx.config.dcgm_exporter)

    def scan(self, info: pb.NodeInfo) -> None:
        self._job_pressure.locate()
        topology = info.gpu
        topology.Clear()
        reason = nvml_library.init()
        count = nvml_library.device_count() if not reason else None
        if not reason and count is None:
            reason = "NVML could not count the GPUs"
        self.unavailable_reason = reason
        if reason or count is None:
            topology.unavailable_reason = reason
            self._forget_gpus()
            return
        driver = nvml_library.driver_info()
        topology.driver_version = driver.driver_version
        topology.nvml_version = driver.nvml_version
        if driver.cuda_driver_version is not None:
            topology.cuda_driver_version = driver.cuda_driver_version
        previous = {state.index: state for state in self._gpus}
        states = self._open_all(count, previous)
        kept = {id(state) for state in states}
        for dropped in previous.values():
            if id(dropped) not in kept:
                dropped.drop_gpm()
        topology.gpus.extend(state.info for state in states)
        for state in states:
            state.slow.make_due()  # a scan reads the slowly changing values afresh
        self._sample_power_between(states)
        uuids = {state.uuid for state in states}
        self._fabric.retain(uuids)
        self._shares.retain(uuids)
        self._xids.retain(uuids)
        self._suspects.retain(uuids)
        # A GPU that does not answer is left out of the event set: registering it would block.
        live = [s for s in states if s.opened and self._readers.answering(s.index)]
        watched = [(s.index, s.uuid) for s in live]
        if self._watcher is None or watched != self._watched:
            self._restart_watcher(live)
            self._watched = watched
        self._gpus = states

    def collect(self, report: pb.NodeReport) -> None:
        if self.unavailable_reason:
            if self._reported_reason != self.unavailable_reason:
                report.events.add(
                    time_unix_seconds=report.time_unix_seconds or time.time(),
                    kind="gpu_unavailable",
                    severity="info",
                    subject="gpu",
                    message=self.unavailable_reason,
                )
                self._reported_reason = self.unavailable_reason
            return
        self._reported_reason = ""
        if self._watcher is not None:
            report.events.extend(self._watcher.drain())
        pids: set[int] = set()
        self._sample_all(report, pids)
        if self._dcgm is not None:
            self._dcgm.apply(report.gpus)  # before the suspect rules: DCGM's SM activity is held to them too
        members = (
            JobMember(gpu=g.index, pid=p.pid, identity=self._processes.info(p.pid).identity)
            for g in report.gpus
            for p in g.processes
        )
        report.jobs.extend(job_samples(members))
        self._job_pressure.fill(report.jobs)
        self._processes.retain(pids)
        self._xids.record(report.events, report.gpus)
        self._suspects.observe(report)

    def close(self) -> None:
        """Stop the event thread, the GPUs' threads, and free GPM buffers; NVML itself shuts down at exit."""
        self._forget_gpus()
        self._readers.close()
        if self._dcgm is not None:
            self._dcgm.close()

    # -- scan helpers --

    def _open_all(self, count: int, previous: dict[int, _GpuState]) -> list[_GpuState]:
        """Each GPU opened on its own thread within the scan's bound; one that does not answer keeps
        its last state, or a placeholder until it answers."""
        bound = self._readers.deadlines.scan_seconds
        work = {i: partial(self._open, i, previous.get(i)) for i in range(count)}
        opened = self._readers.read(work, bound, count=False)
        states: list[_GpuState] = []
        for index in range(count):
            got = opened.get(index)
            if isinstance(got, Overrun):
                got = previous.get(index) or _GpuState(
                    index=index, uuid="", gpu=Gpu(index, None), info=pb.GpuInfo(index=index), opened=False
                )
            if got is not None:
                states.append(got)
        return states

    def _open(self, index: int, previous: _GpuState | None) -> _GpuState | None:
        gpu = Gpu.open(index)
        if gpu is None:
            return None
        if gpu.lost:
            # A GPU lost before or during the scan keeps its identity from the last scan.
            if previous is not None and previous.opened:
                previous.gpu.lost = True
                return previous
            return _GpuState(index=index, uuid="", gpu=gpu, info=pb.GpuInfo(index=index))
        uuid = gpu.uuid() or ""
        if previous is not None and previous.uuid == uuid and not previous.gpu.lost:
            if not mig.layout_changed(previous.gpu, previous.info):
                return previous  # same board: keep what it said it does not support, and GPM state
            previous.drop_gpm()  # MIG mode or instances changed: described afresh, caches and all
        state = _GpuState(index=index, uuid=uuid, gpu=gpu, info=describe_gpu(index, uuid, gpu))
        state.mig = mig.describe(gpu, state.info)
        return state

    def _sample_power_between(self, states: list[_GpuState]) -> None:
        """Which GPUs may read their draw between ticks (``power_samples``): those without GPM. Each
        tick turns the reads on while a process runs on the GPU and off when none does
        (``_power_while_busy``); a scan leaves a GPU's reads as they are."""
        period = self.ctx.config.gpu_power_sample_seconds
        for state in states:
            reader = self._readers.reader(state.index)
            if period > 0 and state.opened and wanted(state.info, state.mig is not None):
                if state.power is None:  # a GPU described afresh starts with its reads off
                    state.power = PowerSamples(state.gpu)
                    reader.between = None
                reader.between_seconds = period
            else:
                state.power = None
                reader.between = None

    def _restart_watcher(self, states: list[_GpuState]) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        watcher = EventWatcher([WatchedGpu(s.index, s.uuid, s.gpu) for s in states])
        self._watcher = watcher if watcher.start() else None

    def _forget_gpus(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        for state in self._gpus:
            state.drop_gpm()
        self._gpus = []

    # -- per tick --

    def _sample_all(self, report: pb.NodeReport, pids: set[int]) -> None:
        """Every GPU read on its own thread at once (``deadlines.py``); one that overruns is reported
        unresponsive, and the report goes on with the others."""
        now = report.time_unix_seconds or time.time()
        work = {
            s.index: partial(self._sample_alone, s, now) if s.opened else partial(self._open, s.index, None)
            for s in self._gpus
        }
        results = self._readers.read(work, self._readers.deadlines.tick_seconds)
        for state in self._gpus:
            recovery = self._readers.recovered.get(state.index)
            if recovery is not None:
                report.events.append(responsive_event(state.index, state.uuid, recovery, now))
                if not state.opened:
                    self.needs_rescan = True
            got = results[state.index]
            if isinstance(got, Overrun):
                if state.opened and state.gpu.lost:
                    sample = self._sample(state, report, pids)  # lost: reported without a call
                else:
                    sample = unresponsive_sample(state.index, state.uuid, got, now)
                    if got.began:
                        report.events.append(
                            unresponsive_event(state.index, state.uuid, got, self._readers.deadlines, now)
                        )
            elif not state.opened:
                continue  # it answers again: described at the next scan, which comes at once
            else:
                answered: tuple[pb.GpuSample, list[pb.Event], set[int]] = got
                sample, events, gpu_pids = answered
                report.events.extend(events)
                pids.update(gpu_pids)
            sample.samples_taken_total, sample.samples_expected_total = self._readers.completeness(state.index)
            report.gpus.append(sample)

    def _sample_alone(self, state: _GpuState, now: float) -> tuple[pb.GpuSample, list[pb.Event], set[int]]:
        """One GPU's sample on its own thread: its events and pids kept apart until the tick merges them."""
        side = pb.NodeReport(time_unix_seconds=now)
        pids: set[int] = set()
        sample = self._sample(state, side, pids)
        return sample, list(side.events), pids

    def _sample(self, state: _GpuState, report: pb.NodeReport, pids: set[int]) -> pb.GpuSample:
        sample = pb.GpuSample(index=state.index, uuid=state.uuid)
        if not state.gpu.lost:
            slow_read = self._fill(state, sample, pids)
            self._beside(state, sample, report, pids, slow_read)
        if not state.gpu.lost:
            return sample
        # Lost now or earlier: report only that; partial values of this tick mean nothing.
        state.drop_gpm()
        if not state.lost_reported:
            state.lost_reported = True
            report.events.add(
                time_unix_seconds=report.time_unix_seconds or time.time(),
                kind="gpu_lost",
                severity="critical",
                subject=f"gpu:{state.index}",
                message=f"GPU {state.index} ({state.uuid or 'unknown uuid'}) is lost (NVML: GPU is lost)",
                attributes={"uuid": state.uuid, "pci_bus_id": state.info.pci_bus_id},
            )
        return pb.GpuSample(index=state.index, uuid=state.uuid, lost=True)

    def _fill(self, state: _GpuState, sample: pb.GpuSample, pids: set[int]) -> bool:
        """The tick's readings into ``sample``: each tick's calls, then the last of the slowly
        changing ones (``slow_readings``); True when those were read this tick."""
        gpu = state.gpu
        util = gpu.utilization()
        if util is not None:
            sample.utilization_gpu_ratio = util.gpu_ratio
            sample.utilization_memory_ratio = util.memory_ratio
        gpu_fields.fill_memory(gpu.memory(), sample)
        self._add_processes(gpu, sample, pids)
        plan = state.tick_plan()
        gpu_fields.fill_sample(gpu.field_values(plan.requests), plan, sample)
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
        reasons = gpu.clock_event_reasons()
        if reasons is not None:
            sample.clock_event_reasons = reasons
            sample.clock_event_reason_names.extend(clock_event_reason_names(reasons))
        sm_clock = gpu.sm_clock_mhz()
        if sm_clock is not None:
            sample.sm_clock_mhz = sm_clock
        slow_read = state.slow.read(gpu)
        state.slow.fill(sample)
        if state.info.HasField("pcie_max_generation"):
            sample.pcie_max_link_generation = state.info.pcie_max_generation
        if state.info.HasField("pcie_max_width"):
            sample.pcie_max_link_width = state.info.pcie_max_width
        if state.info.gpm_supported:
            self._gpm(state, sample)
        readings_mean = self._power_while_busy(state, sample) if state.power is not None else None
        self._computing_source(state, sample, readings_mean)
        return slow_read

    @staticmethod
    def _computing_source(state: _GpuState, sample: pb.GpuSample, readings_mean: float | None) -> None:
        """Which reading tells the GPU's computing share, from its readings (``power_regime``)."""
        regime = state.regime
        if regime is None:
            regime = state.regime = PowerRegime(state.info)
        energy = sample.energy_millijoules_total if sample.HasField("energy_millijoules_total") else None
        regime.observe_energy(energy, time.monotonic(), readings_mean)
        power = state.power
        reads = "off" if power is None else "unreadable" if power.unreadable else "between"
        decide(regime, sample, state.info, state.mig is not None, reads)

    def _power_while_busy(self, state: _GpuState, sample: pb.GpuSample) -> float | None:
        """A GPU without GPM reads its draw between ticks only while a process runs on it: an idle
        GPU's draw tells nothing the report's mean does not. On the GPU's own reader thread, which
        picks up the change when this tick's work is done. The readings' mean, None without any."""
        power = state.power
        assert power is not None
        regime = state.regime
        if regime is None:
            regime = state.regime = PowerRegime(state.info)
        reader = self._readers.reader(state.index)
        mean = power.drain_into(sample, regime)
        if sample.processes:
            if reader.between is None:
                reader.between = power.read
        elif reader.between is not None:
            reader.between = None
            regime.forget_span()  # the next job's readings start a span of their own
        return mean

    def _add_processes(self, gpu: Gpu, sample: pb.GpuSample, pids: set[int]) -> None:
        """The compute processes of a GPU or of a MIG device, with their name, user and job."""
        for proc in gpu.processes() or ():
            pids.add(proc.pid)
            info = self._processes.info(proc.pid)
            entry = sample.processes.add(pid=proc.pid, name=info.name, user=info.user)
            if proc.used_memory_bytes is not None:
                entry.used_memory_bytes = proc.used_memory_bytes
            entry.job.CopyFrom(job_ref(info))

    def _beside(
        self, state: _GpuState, sample: pb.GpuSample, report: pb.NodeReport, pids: set[int], slow_read: bool
    ) -> None:
        """The fabric (asked with the slowly changing readings), the MIG instances and the processes'
        shares (after ``_fill``)."""
        gpu = state.gpu
        self._fabric.read(gpu, sample, report, ask=slow_read)
        if state.mig is not None:
            answered = mig.fill(
                gpu, state.mig, sample, state.info.gpm_supported,
                lambda device, instance: self._add_processes(device, instance, pids),
            )  # fmt: skip
            if not answered:
                self.needs_rescan = True  # an instance was destroyed or changed
        elif sample.processes:
            self._shares.fill(gpu, sample)

    @staticmethod
    def _gpm(state: _GpuState, sample: pb.GpuSample) -> None:
        """GPM metrics cover the interval between this tick's sample and the previous one."""
        if not state.gpm_buffers:
            buffers = [GpmSample.alloc(), GpmSample.alloc()]
            state.gpm_buffers = [b for b in buffers if b is not None]
            if len(state.gpm_buffers) < 2:
                state.drop_gpm()
                return
        previous = state.gpm_newest
        target = 1 - previous if previous >= 0 else 0
        if not state.gpu.gpm_sample(state.gpm_buffers[target]):
            state.gpm_newest = -1
            return
        state.gpm_newest = target
        if previous >= 0:
            older, newer = state.gpm_buffers[previous], state.gpm_buffers[target]
            gpu_fields.fill_gpm(state.gpu.gpm_metrics(older, newer, gpu_fields.GPM_METRICS), sample)
