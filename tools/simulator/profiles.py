"""GPU boards the simulator can put in a node, with the figures the pipeline model needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nodeagent.core.quantities.units import pcie_bytes_per_second


@dataclass(frozen=True, slots=True)
class GpuProfile:
    name: str
    architecture: str
    memory_total_bytes: int
    nvlink_count: int
    # One direction, per link (NVML's FI_DEV_NVLINK_GET_SPEED, in bytes).
    nvlink_speed_bytes_per_second: float
    pcie_generation: int
    pcie_width: int
    gpm_supported: bool
    max_sm_clock_mhz: int
    power_limit_watts: float
    # Compute speed relative to an A100/A800 on the same training step.
    relative_speed: float

    @property
    def nvlink_bytes_per_second(self) -> float:
        return self.nvlink_count * self.nvlink_speed_bytes_per_second

    @property
    def pcie_bytes_per_second(self) -> float:
        return pcie_bytes_per_second(self.pcie_generation, self.pcie_width) or 0.0


_GB = 1_000_000_000
_GIB = 1 << 30

PROFILES: Final = {
    # PCIe 4.0 card: all-reduce goes over PCIe (the "ordinary cloud" of DESIGN.md's table).
    "a800-pcie": GpuProfile("NVIDIA A800 80GB PCIe", "ampere", 80 * _GIB, 0, 0.0, 4, 16, False, 1410, 300.0, 1.0),
    # A800: 8 NVLinks x 25 GB/s = 200 GB/s per direction (400 GB/s both ways).
    "a800-sxm4": GpuProfile("NVIDIA A800-SXM4-80GB", "ampere", 80 * _GIB, 8, 25 * _GB, 4, 16, False, 1410, 400.0, 1.0),
    # A100: 12 NVLinks x 25 GB/s = 300 GB/s per direction (600 GB/s both ways).
    "a100-sxm4": GpuProfile("NVIDIA A100-SXM4-80GB", "ampere", 80 * _GIB, 12, 25 * _GB, 4, 16, False, 1410, 400.0, 1.0),
    # H100: 18 NVLinks x 25 GB/s = 450 GB/s per direction; GPM metrics (SM activity).
    "h100-sxm5": GpuProfile("NVIDIA H100 80GB HBM3", "hopper", 80 * _GIB, 18, 25 * _GB, 5, 16, True, 1980, 700.0, 2.0),
}
