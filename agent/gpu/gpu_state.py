"""What the `gpu` source keeps per GPU between ticks, and how a scan opens a GPU into it.

A scan opens every GPU (``open_gpu``): a board seen before, with the same UUID and MIG layout,
keeps its state (what it refused, its GPM buffers, its power readings); a GPU lost before or
during the scan keeps its identity from the last scan; any other is described afresh. GPM's two
buffers are refilled in turn, each tick's metrics covering the interval since the previous
sample (``GpuState.read_gpm``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu import mig
from nodeagent.agent.gpu.describe import describe_gpu
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.nvml_sampling import GpmSample
from nodeagent.agent.gpu.power_regime import PowerRegime
from nodeagent.agent.gpu.power_samples import PowerSamples
from nodeagent.agent.gpu.round_readings import RoundReadings
from nodeagent.agent.gpu.slow_readings import SlowReadings
from nodeagent.v1 import nodeagent_pb2 as pb


@dataclass(slots=True)
class GpuState:
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
    round: RoundReadings = field(default_factory=RoundReadings)  # what is read in turn, one a tick
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

    def read_gpm(self, sample: pb.GpuSample) -> None:
        """GPM metrics cover the interval between this tick's sample and the previous one."""
        if not self.gpm_buffers:
            buffers = [GpmSample.alloc(), GpmSample.alloc()]
            self.gpm_buffers = [b for b in buffers if b is not None]
            if len(self.gpm_buffers) < 2:
                self.drop_gpm()
                return
        previous = self.gpm_newest
        target = 1 - previous if previous >= 0 else 0
        if not self.gpu.gpm_sample(self.gpm_buffers[target]):
            self.gpm_newest = -1
            return
        self.gpm_newest = target
        if previous >= 0:
            older, newer = self.gpm_buffers[previous], self.gpm_buffers[target]
            gpu_fields.fill_gpm(self.gpu.gpm_metrics(older, newer, gpu_fields.GPM_METRICS), sample)


def unopened(index: int) -> GpuState:
    """A placeholder for a GPU that did not answer at its first scan."""
    return GpuState(index=index, uuid="", gpu=Gpu(index, None), info=pb.GpuInfo(index=index), opened=False)


def open_gpu(index: int, previous: GpuState | None) -> GpuState | None:
    """GPU ``index`` opened, or its state from the last scan where it is the same board (or lost)."""
    gpu = Gpu.open(index)
    if gpu is None:
        return None
    if gpu.lost:
        # A GPU lost before or during the scan keeps its identity from the last scan.
        if previous is not None and previous.opened:
            previous.gpu.lost = True
            return previous
        return GpuState(index=index, uuid="", gpu=gpu, info=pb.GpuInfo(index=index))
    uuid = gpu.uuid() or ""
    if previous is not None and previous.uuid == uuid and not previous.gpu.lost:
        if not mig.layout_changed(previous.gpu, previous.info):
            return previous  # same board: keep what it said it does not support, and GPM state
        previous.drop_gpm()  # MIG mode or instances changed: described afresh, caches and all
    state = GpuState(index=index, uuid=uuid, gpu=gpu, info=describe_gpu(index, uuid, gpu))
    state.mig = mig.describe(gpu, state.info)
    return state
