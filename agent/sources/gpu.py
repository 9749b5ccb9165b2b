"""NVIDIA GPUs through NVML: topology at scan, one GpuSample per GPU per tick.

Per GPU and tick: utilization, memory, compute processes with their jobs (and per multi-node job
on the node one ``JobSample``, ``agent/gpu/job_samples.py``), every counter in one
batched field-value call (PCIe bytes and replays, NVLink state, bytes and errors per link, ECC,
row remapping, power, temperature), clock-event reasons, SM clock, and on GPM-capable
GPUs (Hopper and newer) SM activity, occupancy, tensor activity and PCIe/NVLink rates over the
tick. The memory clock, PCIe link, idle video engines and the fabric are read at a scan and every
30 s (``slow_readings``), each tick carrying the last reading. XID and double-bit ECC events
arrive from a background thread and go out in the next report.
This module scans and ticks; what it keeps per GPU between ticks and how a scan opens a GPU are
in ``gpu_state``, one GPU's readings of a tick in ``tick_sample``.
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
from functools import partial
from typing import TYPE_CHECKING

from nodeagent.agent.gpu import mig, nvml_library
from nodeagent.agent.gpu.deadlines import (
    GpuReaders,
    Overrun,
    responsive_event,
    unresponsive_event,
    unresponsive_sample,
)
from nodeagent.agent.gpu.events import EventWatcher, WatchedGpu
from nodeagent.agent.gpu.fabric import FabricWatch
from nodeagent.agent.gpu.gpu_state import GpuState, open_gpu, unopened
from nodeagent.agent.gpu.job_samples import JobMember, JobPressure, job_samples
from nodeagent.agent.gpu.power_samples import PowerSamples, wanted
from nodeagent.agent.gpu.process_share import ProcessShares
from nodeagent.agent.gpu.processes import ProcessReader
from nodeagent.agent.gpu.suspect_fields import SuspectReadings
from nodeagent.agent.gpu.tick_sample import add_processes, fill_sample
from nodeagent.agent.gpu.xid_counts import XidLedger
from nodeagent.agent.sources.base import Source, SourceContext
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.agent.gpu.dcgm_exporter import DcgmProfiling


@register
class GpuSource(Source):
    name = "gpu"
    help = "NVIDIA GPUs through NVML: utilization, memory, jobs, GPM, PCIe, NVLink, health, XID events"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self.unavailable_reason = ""
        self._reported_reason = ""
        self._gpus: list[GpuState] = []
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
            state.round.make_fresh()  # and every reading of the round
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

    def _open_all(self, count: int, previous: dict[int, GpuState]) -> list[GpuState]:
        """Each GPU opened on its own thread within the scan's bound; one that does not answer keeps
        its last state, or a placeholder until it answers."""
        bound = self._readers.deadlines.scan_seconds
        work = {i: partial(open_gpu, i, previous.get(i)) for i in range(count)}
        opened = self._readers.read(work, bound, count=False)
        states: list[GpuState] = []
        for index in range(count):
            got = opened.get(index)
            if isinstance(got, Overrun):
                got = previous.get(index) or unopened(index)
            if got is not None:
                states.append(got)
        return states

    def _sample_power_between(self, states: list[GpuState]) -> None:
        """Which GPUs may read their draw between ticks (``power_samples``): those without GPM. Each
        tick turns the reads on while a process runs on the GPU and off when none does
        (``tick_sample.power_while_busy``); a scan leaves a GPU's reads as they are."""
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

    def _restart_watcher(self, states: list[GpuState]) -> None:
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
            s.index: partial(self._sample_alone, s, now) if s.opened else partial(open_gpu, s.index, None)
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

    def _sample_alone(self, state: GpuState, now: float) -> tuple[pb.GpuSample, list[pb.Event], set[int]]:
        """One GPU's sample on its own thread: its events and pids kept apart until the tick merges them."""
        side = pb.NodeReport(time_unix_seconds=now)
        pids: set[int] = set()
        sample = self._sample(state, side, pids)
        return sample, list(side.events), pids

    def _sample(self, state: GpuState, report: pb.NodeReport, pids: set[int]) -> pb.GpuSample:
        sample = pb.GpuSample(index=state.index, uuid=state.uuid)
        if not state.gpu.lost:
            slow_read = fill_sample(state, sample, pids, self._processes, self._readers)
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

    def _beside(
        self, state: GpuState, sample: pb.GpuSample, report: pb.NodeReport, pids: set[int], slow_read: bool
    ) -> None:
        """The fabric (asked with the slowly changing readings), the MIG instances and the processes'
        shares (after ``tick_sample.fill_sample``)."""
        gpu = state.gpu
        self._fabric.read(gpu, sample, report, ask=slow_read)
        if state.mig is not None:
            answered = mig.fill(
                gpu, state.mig, sample, state.info.gpm_supported,
                lambda device, instance: add_processes(device, instance, pids, self._processes),
            )  # fmt: skip
            if not answered:
                self.needs_rescan = True  # an instance was destroyed or changed
        elif sample.processes:
            self._shares.fill(gpu, sample, read=state.round.reads("shares"))
