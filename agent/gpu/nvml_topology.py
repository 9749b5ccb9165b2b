"""What a scan asks of a GPU through NVML: identity, PCIe, its NVLink fabric, its MIG devices.

Asked at scan and when the layout may have changed (``mig.py``, ``fabric.py``), not for each
reading of a tick (``nvml_readings.py``). Errors are taken as ``nvml_handle.py`` says.
"""

from __future__ import annotations

import ctypes
from typing import Any, Final, Self

import pynvml

from nodeagent.agent.gpu.nvml_handle import GpuHandle
from nodeagent.agent.gpu.nvml_library import optional_text, text
from nodeagent.agent.gpu.nvml_types import FabricInfo, Identity, MigIdentity

# Versioned structures: nvmlDeviceGetGpuFabricInfoV takes a v3 structure (with the health summary)
# from drivers that have one, else v2 (the health mask alone); a driver that refuses v3 with
# ARGUMENT_VERSION_MISMATCH is asked with v2 from then on (``TopologyQueries.fabric``).
_FABRIC_STRUCTS: Final[tuple[Any, ...]] = tuple(
    s for s in (getattr(pynvml, "c_nvmlGpuFabricInfo_v3_t", None), pynvml.c_nvmlGpuFabricInfo_v2_t) if s is not None
)


class TopologyQueries(GpuHandle):
    """A GPU's identity and place: UUID, name, PCIe, fabric, MIG mode and devices."""

    __slots__ = ()

    def uuid(self) -> str | None:
        """uuid"""
        return optional_text(self._query("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID))

    def identity(self) -> Identity:
        """name, serial, pci.bus_id, architecture, pcie.link.gen.max, pcie.link.width.max, GPM support."""
        pci = self._query("nvmlDeviceGetPciInfo_v3", pynvml.nvmlDeviceGetPciInfo_v3)
        gpm = self._query("nvmlGpmQueryDeviceSupport", pynvml.nvmlGpmQueryDeviceSupport)
        return Identity(
            name=optional_text(self._query("nvmlDeviceGetName", pynvml.nvmlDeviceGetName)),
            serial=optional_text(self._query("nvmlDeviceGetSerial", pynvml.nvmlDeviceGetSerial)),
            pci_bus_id=None if pci is None else text(pci.busId),
            architecture=self._query("nvmlDeviceGetArchitecture", pynvml.nvmlDeviceGetArchitecture),
            pcie_max_generation=self._query(
                "nvmlDeviceGetMaxPcieLinkGeneration", pynvml.nvmlDeviceGetMaxPcieLinkGeneration
            ),
            pcie_max_width=self._query("nvmlDeviceGetMaxPcieLinkWidth", pynvml.nvmlDeviceGetMaxPcieLinkWidth),
            gpm_supported=bool(gpm is not None and gpm.isSupportedDevice),
        )

    def gpu_max_pcie_generation(self) -> int | None:
        """pcie.link.gen.gpumax: what the GPU itself supports (``pcie.link.gen.max`` is what this slot
        allows it)."""
        return self._query("nvmlDeviceGetGpuMaxPcieLinkGeneration", pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration)

    # -- NVLink fabric (Hopper and newer on NVSwitch systems; GB200/GB300 NVL72) --

    def fabric(self) -> FabricInfo | None:
        """nvidia-smi -q's Fabric section; None on a GPU that is not fabric-attached (NVML says
        NOT_SUPPORTED, or state NOT_SUPPORTED), which is then not asked again."""
        symbol = "nvmlDeviceGetGpuFabricInfoV"
        info = self._query(symbol, _fabric_info, _FABRIC_STRUCTS[self._fabric_struct])
        if info is None and symbol in self.mismatched and self._fabric_struct + 1 < len(_FABRIC_STRUCTS):
            self._fabric_struct += 1  # an older driver: its structure from now on
            self.mismatched.discard(symbol)
            info = self._query(symbol, _fabric_info, _FABRIC_STRUCTS[self._fabric_struct])
        if info is None:
            return None
        if info.state == pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
            self.unsupported.add(symbol)
            return None
        summary = getattr(info, "healthSummary", None)
        return FabricInfo(
            state=int(info.state),
            status=int(info.status),
            cluster_uuid=_uuid_text(bytes(info.clusterUuid)),
            clique_id=int(info.cliqueId),
            health_mask=int(info.healthMask),
            health_summary=None if summary is None else int(summary),
        )

    # -- MIG (Ampere and newer data-center GPUs) --

    def mig_enabled(self) -> bool | None:
        """mig.mode.current; None on a GPU without MIG."""
        mode = self._query("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode)
        return None if mode is None else mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE

    def mig_devices(self) -> list[tuple[int, Self]]:
        """The MIG devices of this GPU by their index under it (nvidia-smi -L), each a GPU of this
        GPU's class for the calls NVML answers on a MIG handle (UUID, name, memory, processes,
        ``mig_identity``)."""
        count = self._query("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount) or 0
        out: list[tuple[int, Self]] = []
        for slot in range(count):
            handle = self._query("nvmlDeviceGetMigDeviceHandleByIndex", _mig_handle, slot)
            if handle is not None and handle is not False:
                out.append((slot, type(self)(self.index, handle)))
        return out

    def mig_identity(self) -> MigIdentity:
        """On a MIG device: its name (with the profile), instance ids and size."""
        attributes = self._query("nvmlDeviceGetAttributes_v2", pynvml.nvmlDeviceGetAttributes_v2)
        return MigIdentity(
            name=optional_text(self._query("nvmlDeviceGetName", pynvml.nvmlDeviceGetName)),
            gpu_instance_id=self._query("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId),
            compute_instance_id=self._query("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId),
            multiprocessor_count=None if attributes is None else int(attributes.multiprocessorCount),
            slice_count=None if attributes is None else int(attributes.gpuInstanceSliceCount),
            memory_bytes=None if attributes is None else int(attributes.memorySizeMB) * 1024 * 1024,
        )


def _fabric_info(handle: Any, struct: Any) -> Any:
    info = struct()  # its __init__ sets the version
    pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    return info


def _mig_handle(handle: Any, slot: int) -> Any:
    """The MIG device at ``slot``, or False where the slot holds none (not an error)."""
    try:
        return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
    except pynvml.NVMLError as err:
        if err.value == pynvml.NVML_ERROR_NOT_FOUND:
            return False
        raise


def _uuid_text(raw: bytes) -> str:
    """A fabric cluster UUID's 16 bytes as text; "" when all zero (none assigned)."""
    if not any(raw):
        return ""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
