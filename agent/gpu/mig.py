"""MIG: a GPU split into instances, each a GPU to its tenant.

At scan (and every rescan) a MIG-capable GPU's mode is read; in MIG mode its MIG devices (one per
compute instance) are listed into ``GpuInfo.mig_instances``: UUID, GPU and compute instance ids,
the profile (``1g.10gb``, from the name NVML gives the MIG device, as ``nvidia-smi -L`` shows it),
memory, SMs and slices. ``layout_changed`` tells the source when the mode or the instances have
changed since, so the GPU is described afresh without a restart.

Per tick each MIG device becomes one ``GpuSample`` under its GPU (``GpuSample.mig_instances``):
its memory and processes (asked on the MIG device's handle, which needs no privilege) and, on
Hopper and newer, GPM's SM activity, occupancy, tensor and DRAM activity of its GPU instance
(``nvmlGpmMigSampleGet``). NVML gives no utilization per instance: GPM is the instance's busy
share. A device that stops answering (its instance destroyed) asks for a rescan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.nvml_sampling import GpmSample
from nodeagent.v1 import nodeagent_pb2 as pb

AddProcesses = Callable[[Gpu, pb.GpuSample], None]


@dataclass(slots=True)
class MigDevice:
    gpu: Gpu  # the MIG device's handle
    info: pb.MigInstanceInfo


@dataclass(slots=True)
class GpmPair:
    """Two GPM buffers refilled in turn: metrics come from the newest sample and the one before."""

    buffers: list[GpmSample] = field(default_factory=list)
    newest: int = -1  # which buffer holds the last good sample; -1: none yet

    def step(self, take: Callable[[GpmSample], bool]) -> tuple[GpmSample, GpmSample] | None:
        """Take a sample into the older buffer; (older, newer) once two good samples exist."""
        if not self.buffers:
            buffers = [GpmSample.alloc(), GpmSample.alloc()]
            self.buffers = [b for b in buffers if b is not None]
            if len(self.buffers) < 2:
                self.free()
                return None
        previous = self.newest
        target = 1 - previous if previous >= 0 else 0
        if not take(self.buffers[target]):
            self.newest = -1
            return None
        self.newest = target
        return (self.buffers[previous], self.buffers[target]) if previous >= 0 else None

    def free(self) -> None:
        for buffer in self.buffers:
            buffer.free()
        self.buffers = []
        self.newest = -1


@dataclass(slots=True)
class MigState:
    """A MIG-enabled GPU's devices until the next rescan, and each GPU instance's GPM buffers."""

    devices: list[MigDevice]
    gpm: dict[int, GpmPair] = field(default_factory=dict)  # by GPU instance id

    def drop_gpm(self) -> None:
        for pair in self.gpm.values():
            pair.free()
        self.gpm = {}


def describe(gpu: Gpu, info: pb.GpuInfo) -> MigState | None:
    """Fill ``info``'s MIG mode and instances; the state for per-tick sampling when MIG is on."""
    enabled = gpu.mig_enabled()
    if enabled is None:
        return None  # not a MIG-capable GPU
    info.mig_enabled = enabled
    if not enabled:
        return None
    devices = []
    for slot, device in gpu.mig_devices():
        ident = device.mig_identity()
        instance = info.mig_instances.add(
            uuid=device.uuid() or "",
            gpu_instance_id=ident.gpu_instance_id or 0,
            compute_instance_id=ident.compute_instance_id or 0,
            profile=profile_of(ident.name),
            memory_total_bytes=ident.memory_bytes or 0,
            multiprocessor_count=ident.multiprocessor_count or 0,
            slice_count=ident.slice_count or 0,
            mig_index=slot,
        )
        devices.append(MigDevice(device, instance))
    return MigState(devices)


def layout_changed(gpu: Gpu, info: pb.GpuInfo) -> bool:
    """Whether the GPU's MIG mode, or its MIG devices, differ from what ``info`` says."""
    enabled = gpu.mig_enabled()
    if enabled is None:
        return info.HasField("mig_enabled")
    if enabled != info.mig_enabled or not info.HasField("mig_enabled"):
        return True
    if not enabled:
        return False
    now = [(slot, device.uuid() or "") for slot, device in gpu.mig_devices()]
    return now != [(i.mig_index, i.uuid) for i in info.mig_instances]


def fill(gpu: Gpu, state: MigState, sample: pb.GpuSample, gpm: bool, add_processes: AddProcesses) -> bool:
    """One sample per MIG device into ``sample.mig_instances``; False when a device no longer
    answers (its instance was destroyed or changed: the GPU needs a rescan)."""
    answered = True
    metrics: dict[int, dict[int, float]] = {}
    for device in state.devices:
        info = device.info
        instance = sample.mig_instances.add(
            index=sample.index,
            uuid=info.uuid,
            gpu_instance_id=info.gpu_instance_id,
            compute_instance_id=info.compute_instance_id,
            mig_profile=info.profile,
        )
        if sample.HasField("clock_event_reasons"):  # an instance runs at its GPU's clocks
            instance.clock_event_reasons = sample.clock_event_reasons
        errors = sum(device.gpu.errors.values())
        gpu_fields.fill_memory(device.gpu.memory(), instance)
        add_processes(device.gpu, instance)
        if device.gpu.lost or sum(device.gpu.errors.values()) > errors:
            answered = False
        if gpm:
            gi = info.gpu_instance_id
            if gi not in metrics:  # the compute instances of one GPU instance share its GPM
                metrics[gi] = _gpm(gpu, state, gi)
            gpu_fields.fill_gpm(metrics[gi], instance)
    return answered


def profile_of(name: str | None) -> str:
    """The GPU instance profile in a MIG device's name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb"."""
    if not name or " MIG " not in name:
        return ""
    return name.rsplit(" MIG ", 1)[1].strip()


def _gpm(gpu: Gpu, state: MigState, gpu_instance_id: int) -> dict[int, float]:
    pair = state.gpm.get(gpu_instance_id)
    if pair is None:
        pair = state.gpm[gpu_instance_id] = GpmPair()
    samples = pair.step(lambda buffer: gpu.gpm_mig_sample(gpu_instance_id, buffer))
    if samples is None:
        return {}
    return gpu.gpm_metrics(samples[0], samples[1], gpu_fields.GPM_METRICS)
