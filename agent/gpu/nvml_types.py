"""What NVML queries return (agent/gpu/nvml.py): small frozen records, units in the names, each field
commented with the ``nvidia-smi --query-gpu=`` name that shows the same value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DriverInfo:
    driver_version: str  # nvidia-smi --query-gpu=driver_version
    nvml_version: str
    cuda_driver_version: int | None  # e.g. 12080 for CUDA 12.8


@dataclass(frozen=True, slots=True)
class Identity:
    name: str | None  # name
    serial: str | None  # serial
    pci_bus_id: str | None  # pci.bus_id, e.g. 00000000:07:00.0
    architecture: int | None  # NVML_DEVICE_ARCH_*: 7 Ampere, 9 Hopper, 10 Blackwell
    pcie_max_generation: int | None  # pcie.link.gen.max
    pcie_max_width: int | None  # pcie.link.width.max
    gpm_supported: bool  # GPM metrics (Hopper and newer)


@dataclass(frozen=True, slots=True)
class Utilization:
    gpu_ratio: float  # utilization.gpu / 100: share of time any kernel ran
    memory_ratio: float  # utilization.memory / 100: share of time memory was read or written


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    total_bytes: int  # memory.total
    used_bytes: int  # memory.used
    reserved_bytes: int | None  # memory.reserved (None from the v1 call, which counts it as used)
    free_bytes: int | None = None  # memory.free


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    pid: int
    used_memory_bytes: int | None  # --query-compute-apps=used_memory


@dataclass(frozen=True, slots=True)
class GpuEvent:
    handle_id: int  # the device handle's address; matches Gpu.handle_id
    event_type: int  # nvml.EVENT_XID, nvml.EVENT_DOUBLE_BIT_ECC, ...
    data: int  # the Xid number for Xid events
    time_unix_seconds: float
