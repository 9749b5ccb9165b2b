"""The fake NVML's state, written by tests and read by ``fake_nvml.c``.

The file is plain lines, one setting each, that the C side parses with ``strtok``-level effort:

    driver 570.133.20              nvml_version 12.570.133.20      cuda 12080
    gpus 8                         clock 1000.5        (seconds; the fake's time for GPM)
    init_error 9                   (nvmlInit fails with this nvmlReturn_t)
    gpu 0 name NVIDIA A100-SXM4-80GB            (strings run to the end of the line)
    gpu 0 util_gpu 75              gpu 0 mem_used 1073741824       gpu 0 lost 1
    gpu 0 nvlink 3 tx_kib 1000     gpu 0 nvlink 3 state 0          gpu 0 proc 4242 2147483648
    gpu 0 nvlink 3 replay_step 5   (the replay counter grows by 5 on every read: errors happening now)
    gpu 0 unsupported nvmlDeviceGetUtilizationRates                gpu 0 unsupported_field 198
    event 7 3 xid 79               (sequence, GPU, xid|dbe, data; each sequence delivered once)

The library re-reads the file whenever it changes; ``FakeNvmlState.write`` replaces it atomically.
Profiles (``a100_sxm4``, ``a800_sxm4``, ``h100_sxm5``) build states that look like real 8-GPU
HGX nodes.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path

XID_EVENT = "xid"
DOUBLE_BIT_ECC_EVENT = "dbe"

# NVML field ids (nvml.h) the profiles mark unsupported.
FI_RETIRED_SBE = 29
FI_RETIRED_DBE = 30
FI_RETIRED_PENDING = 31
FI_PCIE_COUNT_TX_BYTES = 197
FI_PCIE_COUNT_RX_BYTES = 198
FI_NVLINK_COUNT_XMIT_BYTES = 202
FI_NVLINK_COUNT_RCV_BYTES = 204

ARCH_AMPERE = 7
ARCH_HOPPER = 9
GIB = 1024**3


@dataclass
class LinkState:
    state: int = 1  # NVML_NVLINK_STATE_ACTIVE
    speed_mbps: int = 25_000
    tx_kib: int = 0
    rx_kib: int = 0
    replay: int = 0
    recovery: int = 0
    crc_flit: int = 0
    crc_data: int = 0
    # Added to replay / recovery on every read of them: errors that grow while someone watches.
    replay_step: int = 0
    recovery_step: int = 0


@dataclass
class GpuState:
    name: str
    uuid: str
    serial: str
    bus_id: str
    arch: int
    pci_device_id: int
    mem_total: int
    mem_reserved: int = 512 * 1024**2
    mem_used: int = 0
    lost: int = 0
    util_gpu: int = 0
    util_mem: int = 0
    power_mw: int = 65_000
    sm_clock: int = 1410
    mem_clock: int = 1593
    temp: int = 34
    mem_temp: int = 40
    energy_mj: int = 0  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    util_enc: int = 0  # percent
    util_dec: int = 0
    pcie_gen_max: int = 4  # what the link can reach in this slot (nvmlDeviceGetMaxPcieLinkGeneration)
    pcie_width_max: int = 16
    pcie_gen_gpu_max: int = 4  # what the GPU itself supports (nvmlDeviceGetGpuMaxPcieLinkGeneration)
    pcie_gen: int = 4
    pcie_width: int = 16
    pcie_rx_bytes: int = 0
    pcie_tx_bytes: int = 0
    pcie_rx_kbs: int = 0
    pcie_tx_kbs: int = 0
    pcie_replay: int = 0
    clock_reasons: int = 0
    ecc_dbe_vol: int = 0
    ecc_dbe_agg: int = 0
    remap_pending: int = 0
    remap_failure: int = 0
    remap_cor: int = 0  # rows remapped after correctable errors
    remap_unc: int = 0  # rows remapped after uncorrectable errors
    retired_sbe: int = 0  # pages retired (GPUs before Ampere; the profiles' GPUs remap rows instead)
    retired_dbe: int = 0
    retired_pending: int = 0
    gpm: int = 0
    gpm_sm_active: float = 0.0
    gpm_sm_occupancy: float = 0.0
    gpm_tensor: float = 0.0
    gpm_gr_active: float = 0.0
    gpm_dram: float = 0.0
    links: list[LinkState] = field(default_factory=list)
    procs: dict[int, int] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)
    unsupported_fields: set[int] = field(default_factory=set)

    def add_traffic(
        self,
        seconds: float,
        *,
        pcie_rx: float = 0,
        pcie_tx: float = 0,
        nvlink_rx_per_link: float = 0,
        nvlink_tx_per_link: float = 0,
    ) -> None:
        """Move the counters as if these bytes per second flowed for ``seconds``; NVLink traffic
        goes over every active link."""
        self.pcie_rx_bytes += round(pcie_rx * seconds)
        self.pcie_tx_bytes += round(pcie_tx * seconds)
        self.pcie_rx_kbs = round(pcie_rx / 1024)
        self.pcie_tx_kbs = round(pcie_tx / 1024)
        for link in self.links:
            if link.state == 1:
                link.rx_kib += round(nvlink_rx_per_link * seconds / 1024)
                link.tx_kib += round(nvlink_tx_per_link * seconds / 1024)


_LIST_FIELDS = {"links", "procs", "unsupported", "unsupported_fields"}


@dataclass
class FakeNvmlState:
    gpus: list[GpuState]
    driver: str = "570.133.20"
    nvml_version: str = "12.570.133.20"
    cuda: int = 12080
    # The fake's time for GPM; None: its own monotonic clock (a live agent that samples on its own).
    clock: float | None = 1000.0
    init_error: int = 0
    events: list[tuple[int, int, str, int]] = field(default_factory=list)

    def advance(self, seconds: float) -> None:
        assert self.clock is not None, "the fake runs on its monotonic clock"
        self.clock += seconds

    def inject_event(self, gpu: int, kind: str, data: int = 0) -> None:
        seq = max((e[0] for e in self.events), default=0) + 1
        self.events.append((seq, gpu, kind, data))

    def inject_xid(self, gpu: int, xid: int) -> None:
        self.inject_event(gpu, XID_EVENT, xid)

    def inject_double_bit_ecc(self, gpu: int) -> None:
        self.gpus[gpu].ecc_dbe_vol += 1
        self.gpus[gpu].ecc_dbe_agg += 1
        self.inject_event(gpu, DOUBLE_BIT_ECC_EVENT)

    def lines(self) -> list[str]:
        out = [
            "# fake NVML state (tests/fakes/nvml/state.py)",
            f"driver {self.driver}",
            f"nvml_version {self.nvml_version}",
            f"cuda {self.cuda}",
            *([f"clock {self.clock!r}"] if self.clock is not None else []),
            f"init_error {self.init_error}",
            f"gpus {len(self.gpus)}",
        ]
        for i, gpu in enumerate(self.gpus):
            for f in fields(gpu):
                if f.name not in _LIST_FIELDS:
                    out.append(f"gpu {i} {f.name} {getattr(gpu, f.name)}")
            out.append(f"gpu {i} link_count {len(gpu.links)}")
            for link_index, link in enumerate(gpu.links):
                out.extend(f"gpu {i} nvlink {link_index} {f.name} {getattr(link, f.name)}" for f in fields(link))
            out.extend(f"gpu {i} proc {pid} {mem}" for pid, mem in gpu.procs.items())
            out.extend(f"gpu {i} unsupported {name}" for name in sorted(gpu.unsupported))
            out.extend(f"gpu {i} unsupported_field {fid}" for fid in sorted(gpu.unsupported_fields))
        out.extend(f"event {seq} {gpu} {kind} {data}" for seq, gpu, kind, data in self.events)
        return out

    def write(self, path: Path) -> None:
        """Replace the file atomically: the library never reads half a state."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(self.lines()) + "\n")
        os.replace(tmp, path)


# HGX baseboards put the eight GPUs on these buses.
_HGX_BUSES = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")


def _hgx(
    model: str,
    *,
    count: int,
    arch: int,
    pci_device_id: int,
    mem_total: int,
    links: int,
    pcie_gen: int,
    gpm: bool,
    unsupported_fields: set[int],
) -> FakeNvmlState:
    gpus = []
    for i in range(count):
        gpus.append(
            GpuState(
                name=model,
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{model}/{i}')}",
                serial=f"16520220{i:05d}",
                bus_id=f"00000000:{_HGX_BUSES[i % len(_HGX_BUSES)]}:00.0",
                arch=arch,
                pci_device_id=pci_device_id,
                mem_total=mem_total,
                pcie_gen_max=pcie_gen,
                pcie_gen_gpu_max=pcie_gen,
                pcie_gen=pcie_gen,
                gpm=int(gpm),
                links=[LinkState() for _ in range(links)],
                # Ampere and newer remap rows instead of retiring pages: NVML has no page counts there.
                unsupported_fields={*unsupported_fields, FI_RETIRED_SBE, FI_RETIRED_DBE, FI_RETIRED_PENDING},
            )
        )
    return FakeNvmlState(gpus=gpus)


def a100_sxm4(count: int = 8) -> FakeNvmlState:
    """8x A100-SXM4-80GB: 12 NVLink3 links of 25 GB/s each way (600 GB/s per GPU), PCIe Gen4 x16,
    no GPM."""
    return _hgx(
        "NVIDIA A100-SXM4-80GB",
        count=count,
        arch=ARCH_AMPERE,
        pci_device_id=0x20B210DE,
        mem_total=80 * GIB,
        links=12,
        pcie_gen=4,
        gpm=False,
        unsupported_fields={FI_NVLINK_COUNT_XMIT_BYTES, FI_NVLINK_COUNT_RCV_BYTES},
    )


def a800_sxm4(count: int = 8) -> FakeNvmlState:
    """8x A800-SXM4-80GB: 8 NVLink3 links (400 GB/s per GPU), PCIe Gen4 x16, no GPM, and a driver
    without the PCIe byte counters (the agent falls back to nvmlDeviceGetPcieThroughput)."""
    return _hgx(
        "NVIDIA A800-SXM4-80GB",
        count=count,
        arch=ARCH_AMPERE,
        pci_device_id=0x20F310DE,
        mem_total=80 * GIB,
        links=8,
        pcie_gen=4,
        gpm=False,
        unsupported_fields={
            FI_PCIE_COUNT_TX_BYTES,
            FI_PCIE_COUNT_RX_BYTES,
            FI_NVLINK_COUNT_XMIT_BYTES,
            FI_NVLINK_COUNT_RCV_BYTES,
        },
    )


def h100_sxm5(count: int = 8) -> FakeNvmlState:
    """8x H100 80GB HBM3 (SXM5): 18 NVLink4 links (900 GB/s per GPU), PCIe Gen5 x16, GPM."""
    return _hgx(
        "NVIDIA H100 80GB HBM3",
        count=count,
        arch=ARCH_HOPPER,
        pci_device_id=0x233010DE,
        mem_total=81_559 * 1024**2,
        links=18,
        pcie_gen=5,
        gpm=True,
        unsupported_fields={FI_NVLINK_COUNT_XMIT_BYTES, FI_NVLINK_COUNT_RCV_BYTES},
    )


PROFILES = {"a100_sxm4": a100_sxm4, "a800_sxm4": a800_sxm4, "h100_sxm5": h100_sxm5}
