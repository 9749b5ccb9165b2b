"""What a GPU's tick reports but reads on a slower schedule: the values that change slowly.

Every NVML call costs a real driver a round trip into the kernel (tenths of a millisecond), per
GPU, per tick. Some readings change on a scale of minutes, or only when something is wrong for
good: the memory clock (HBM runs at one clock), the PCIe link's current generation and width (a
link that trained down stays down), an idle video engine's utilization, the NVLink fabric's
registration and health. These are read at each scan and every ``SLOW_SECONDS`` after, on the
GPU's own reader thread (so behind the per-GPU deadlines, like the tick's calls), and every
tick's sample carries the last reading: a value at most ``SLOW_SECONDS`` (or a rescan) old.

One exception keeps a busy engine's value fresh: while the encoder or decoder reads busy, both
are read every tick, and go back to the slow schedule once both read idle.
"""

from __future__ import annotations

import time
from typing import Final

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.v1 import nodeagent_pb2 as pb

SLOW_SECONDS: Final = 30.0


class SlowReadings:
    """One GPU's slowly changing readings, and when they are next due."""

    __slots__ = ("decoder", "due", "encoder", "memory_clock_mhz", "pcie_generation", "pcie_width")

    def __init__(self) -> None:
        self.due = 0.0  # monotonic; 0: at the next tick
        self.memory_clock_mhz: int | None = None
        self.pcie_generation: int | None = None
        self.pcie_width: int | None = None
        self.encoder: float | None = None
        self.decoder: float | None = None

    def make_due(self) -> None:
        """Read everything at the next tick (a scan asks it)."""
        self.due = 0.0

    def read(self, gpu: Gpu, now: float | None = None) -> bool:
        """Refresh what is due from ``gpu``; True when the slow schedule's reads were made this tick
        (the fabric is then read too)."""
        now = time.monotonic() if now is None else now
        if now < self.due:
            if self.encoder or self.decoder:  # a busy video engine: read each tick
                self.encoder, self.decoder = gpu.encoder_decoder_utilization()
            return False
        self.due = now + SLOW_SECONDS
        self.memory_clock_mhz = gpu.memory_clock_mhz()
        self.pcie_generation, self.pcie_width = gpu.pcie_link()
        self.encoder, self.decoder = gpu.encoder_decoder_utilization()
        return True

    def fill(self, sample: pb.GpuSample) -> None:
        """The last readings into this tick's sample; a value NVML did not give stays unset."""
        if self.encoder is not None:
            sample.utilization_encoder_ratio = self.encoder
        if self.decoder is not None:
            sample.utilization_decoder_ratio = self.decoder
        if self.memory_clock_mhz is not None:
            sample.memory_clock_mhz = self.memory_clock_mhz
        if self.pcie_generation is not None:
            sample.pcie_link_generation = self.pcie_generation
        if self.pcie_width is not None:
            sample.pcie_link_width = self.pcie_width
