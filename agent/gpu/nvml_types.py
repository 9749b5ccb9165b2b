"""What NVML queries return (agent/gpu/nvml_*.py): small frozen records, units in the names, each field
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
    event_type: int  # nvml_events.EVENT_XID, nvml_events.EVENT_DOUBLE_BIT_ECC, ...
    data: int  # the Xid number for Xid events
    time_unix_seconds: float
    # The MIG GPU and compute instance the event hit; None on a GPU without MIG, or all of it.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """nvidia-smi -q, "Fabric": the GPU's registration with the NVLink fabric manager."""

    state: int  # NVML_GPU_FABRIC_STATE_*: 1 not started, 2 in progress, 3 completed
    status: int  # nvmlReturn_t of the registration, once completed (0: success)
    cluster_uuid: str  # "" when the driver reports none (all zeros)
    clique_id: int
    health_mask: int | None  # NVML_GPU_FABRIC_HEALTH_MASK_* parts; None from the v1 structure
    health_summary: int | None  # NVML_GPU_FABRIC_HEALTH_SUMMARY_*; None before the v3 structure


@dataclass(frozen=True, slots=True)
class MigIdentity:
    """A MIG device as ``nvidia-smi -L`` and ``nvidia-smi mig -lgi`` show it."""

    name: str | None  # "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    gpu_instance_id: int | None
    compute_instance_id: int | None
    multiprocessor_count: int | None
    slice_count: int | None  # the GPU instance's compute slices
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class ProcessUtilization:
    """nvidia-smi pmon's sm and mem columns, one driver sample of one process."""

    pid: int
    timestamp_us: int  # CPU time of the sample, microseconds
    sm_ratio: float  # share of the sample period the process ran kernels
    memory_ratio: float  # share the memory controller served it
