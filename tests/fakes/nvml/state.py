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
    event 8 0 xid 13 2 0           (... and the MIG GPU and compute instance it hit)
    gpu 0 fabric_state 3           gpu 0 fabric_health 0x1AA       gpu 0 fabric_cluster 7c9e...
    gpu 0 c2c_links 10             gpu 0 proc_util 4242 55 20      (pid, SM %, memory %)
    gpu 0 mig_capable 1            gpu 0 mig_mode 1                gpu 0 mig_count 3
    gpu 0 mig 1 gi 2               gpu 0 mig 1 profile 2g.20gb     gpu 0 mig 1 proc 4242 1048576
    gpu 3 delay_ms 2000            gpu 3 hang 1                    gpu 3 lost_after 40
                                   (a failing GPU: slow calls, calls that block, lost after N calls)
    latency_us 300                 latency_us nvmlDeviceGetPowerUsage 900        latency_spin 1
                                   (a real driver's cost: us charged per call, by symbol; spun, not slept)
    gpu 0 power_mode mean1s        gpu 0 power_lag_ms 75           gpu 0 power_offset_ms 30
                                   (how the power sensor answers: ideal, sampled, mean1s, energy; read
                                   from a power timeline, ``PowerTimeline``; see fake_nvml.c)

The library re-reads the file whenever it changes; ``FakeNvmlState.write`` replaces it atomically.
Profiles (``a100_sxm4``, ``a800_sxm4``, ``h100_sxm5``, ``b200``) build states that look like
real 8-GPU HGX nodes; ``gb200`` and ``gb300`` a 4-GPU compute tray of an NVL72 rack (NVLink5 to the
rack's NVSwitches, a fabric clique, NVLink-C2C to the Grace CPUs). ``split_mig`` turns a GPU into
MIG instances.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
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

FI_NVLINK_THROUGHPUT_DATA_TX = 138
FI_NVLINK_THROUGHPUT_DATA_RX = 139

ARCH_AMPERE = 7
ARCH_HOPPER = 9
ARCH_BLACKWELL = 10
GIB = 1024**3
MIB = 1024**2

# nvmlGpuFabricInfo: NVML_GPU_FABRIC_STATE_*, and the health mask's 2-bit parts (1 true, 2 false).
FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 0, 1, 2, 3
FABRIC_SUMMARY_HEALTHY, FABRIC_SUMMARY_UNHEALTHY, FABRIC_SUMMARY_LIMITED = 1, 2, 3
NVML_ERROR_NOT_READY = 10  # a status a registration can fail with


def fabric_health_mask(
    *,
    degraded_bandwidth: bool = False,
    route_recovery: bool = False,
    route_unhealthy: bool = False,
    access_timeout_recovery: bool = False,
    incorrect_configuration: int = 1,
) -> int:
    """The healthMask a driver reports; every part "false" (2) unless set, the configuration
    NONE (1, correct) unless another NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*."""
    mask = 0
    for shift, flag in (
        (0, degraded_bandwidth),
        (2, route_recovery),
        (4, route_unhealthy),
        (6, access_timeout_recovery),
    ):
        mask |= (1 if flag else 2) << shift
    return mask | incorrect_configuration << 8


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
    temp_fraction: float = 0.0  # the sensor's sub-degree part: field 308 (GPU_TEMP) has it, the integer calls drop it
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
    # The NVLink fabric; state 0: not fabric-attached (nvmlDeviceGetGpuFabricInfoV not supported).
    fabric_state: int = FABRIC_NOT_SUPPORTED
    fabric_status: int = 0
    fabric_cluster: str = ""
    fabric_clique: int = 0
    fabric_health: int = 0
    fabric_summary: int = 0  # 0: a driver without the v3 health summary
    c2c_links: int = 0  # NVLink-C2C to the CPU (Grace)
    c2c_mbps: int = 0  # per link
    mig_capable: int = 0
    mig_mode: int = 0
    mig: list[MigInstance] = field(default_factory=list)
    proc_util: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (SM %, memory %)
    # A failing GPU: each call on it takes delay_ms more; while hang is 1 each call blocks (until
    # a new state clears it); after lost_after calls on it (counted since the test began) every
    # call fails with GPU_IS_LOST. The other GPUs' calls go on meanwhile.
    delay_ms: int = 0
    hang: int = 0
    lost_after: int = 0
    # The power sensor (fake_nvml.c, power_reading_mw), over a ``PowerTimeline``: "ideal" (the draw
    # now), "sampled" (the mean of a power_window_ms window every power_period_ms, held between),
    # "mean1s" (the last whole second's mean; field 186 not supported), "energy" (no power reading,
    # the energy counter only); readings trail the draw by power_lag_ms. 0 ms: the mode's own.
    power_mode: str = "ideal"
    power_lag_ms: int = 0
    power_window_ms: int = 0
    power_period_ms: int = 0
    power_offset_ms: int = 0

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


@dataclass
class MigInstance:
    """One MIG device (a compute instance of a GPU instance) of a GPU in MIG mode."""

    gi: int
    ci: int
    profile: str  # "1g.10gb"
    uuid: str
    mem_total: int
    slices: int
    sms: int
    mem_used: int = 0
    mem_reserved: int = 0
    gpm_sm_active: float = 0.0  # percent, as GPM gives it, for this GPU instance
    gpm_sm_occupancy: float = 0.0
    gpm_tensor: float = 0.0
    gpm_gr_active: float = 0.0
    gpm_dram: float = 0.0
    procs: dict[int, int] = field(default_factory=dict)


_LIST_FIELDS = {"links", "procs", "unsupported", "unsupported_fields", "mig", "proc_util"}


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
    # The MIG (GPU, compute) instance an event hit, by its sequence.
    event_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    # A cost model for real drivers: microseconds every call takes (nvmlEventSetWait_v2 only by
    # name), per symbol where named; spun on the caller's CPU (an ioctl the driver serves) when
    # latency_spin, else slept. Either way without the library's lock: other threads' calls go on.
    latency_us: int = 0
    latency_us_by_symbol: dict[str, int] = field(default_factory=dict)
    latency_spin: bool = False

    def advance(self, seconds: float) -> None:
        assert self.clock is not None, "the fake runs on its monotonic clock"
        self.clock += seconds

    def inject_event(self, gpu: int, kind: str, data: int = 0) -> None:
        seq = max((e[0] for e in self.events), default=0) + 1
        self.events.append((seq, gpu, kind, data))

    def inject_xid(self, gpu: int, xid: int, instance: tuple[int, int] | None = None) -> None:
        """An Xid on ``gpu``; ``instance``: the (GPU instance, compute instance) it hit."""
        self.inject_event(gpu, XID_EVENT, xid)
        if instance is not None:
            self.event_instances[self.events[-1][0]] = instance

    def split_mig(self, gpu: int, instances: list[tuple[int, str, int, int]]) -> list[MigInstance]:
        """Put ``gpu`` in MIG mode with these (GPU instance id, profile, slices, memory GiB)
        instances, one compute instance each; returns them."""
        g = self.gpus[gpu]
        g.mig_capable, g.mig_mode = 1, 1
        g.mig = [
            MigInstance(
                gi=gi,
                ci=0,
                profile=profile,
                slices=slices,
                sms=slices * 16,
                mem_total=mem_gib * GIB - 256 * MIB,
                uuid=f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{g.uuid}/{gi}')}",
            )
            for gi, profile, slices, mem_gib in instances
        ]
        return g.mig

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
            f"latency_us {self.latency_us}",
            *(f"latency_us {symbol} {us}" for symbol, us in sorted(self.latency_us_by_symbol.items())),
            f"latency_spin {int(self.latency_spin)}",
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
            out.extend(f"gpu {i} proc_util {pid} {sm} {mem}" for pid, (sm, mem) in gpu.proc_util.items())
            out.append(f"gpu {i} mig_count {len(gpu.mig)}")
            for m, instance in enumerate(gpu.mig):
                for f in fields(instance):
                    if f.name != "procs":
                        out.append(f"gpu {i} mig {m} {f.name} {getattr(instance, f.name)}")
                out.extend(f"gpu {i} mig {m} proc {pid} {mem}" for pid, mem in instance.procs.items())
        for seq, gpu, kind, data in self.events:
            hit = self.event_instances.get(seq)
            out.append(f"event {seq} {gpu} {kind} {data}" + (f" {hit[0]} {hit[1]}" if hit else ""))
        return out

    def write(self, path: Path) -> None:
        """Replace the file atomically: the library never reads half a state."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(self.lines()) + "\n")
        os.replace(tmp, path)


POWER_MODES = ("ideal", "sampled", "mean1s", "energy")


class PowerTimeline:
    """A GPU's draw over its recent past, in the file the fake answers power from
    (``$FAKE_NVML_POWER_LIVE``): lines ``at GPU SECONDS MW MJ``, the draw from SECONDS on (the fake's
    clock: ``time.monotonic`` where the state has no ``clock``) and the energy counter then. The
    fake derives every reading from it as the GPU's ``power_mode`` says; the file keeps ``keep``
    seconds (and the edge in force before them), rewritten whole at each edge (rename)."""

    def __init__(self, path: Path, gpu: int = 0, keep: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.path, self.gpu, self.keep, self.clock = path, gpu, keep, clock
        self.edges: list[tuple[float, float, float]] = []  # (seconds, mW, mJ at seconds)

    def resume(self) -> PowerTimeline:
        """Go on from the file's edges (the energy counter never goes back)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return self
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0] == "at" and int(parts[1]) == self.gpu:
                self.edges.append((float(parts[2]), float(parts[3]), float(parts[4])))
        return self

    def energy_mj(self, at: float) -> float:
        """The counter at ``at`` (mJ): the draw's integral."""
        before = [e for e in self.edges if e[0] <= at]
        if not before:
            return self.edges[0][2] if self.edges else 0.0
        t, mw, mj = before[-1]
        return mj + mw * (at - t)

    def set(self, mw: float, at: float | None = None) -> None:
        """The draw is ``mw`` from ``at`` (now) on."""
        at = self.clock() if at is None else at
        self.edges.append((at, float(mw), self.energy_mj(at)))
        cut = at - self.keep
        while len(self.edges) > 1 and self.edges[1][0] <= cut:
            self.edges.pop(0)
        lines = [f"at {self.gpu} {t:.6f} {w:.0f} {e:.1f}" for t, w, e in self.edges]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.path)


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
    link_mbps: int = 25_000,
    buses: tuple[str, ...] | None = None,
) -> FakeNvmlState:
    gpus = []
    for i in range(count):
        gpus.append(
            GpuState(
                name=model,
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{model}/{i}')}",
                serial=f"16520220{i:05d}",
                bus_id=buses[i % len(buses)] if buses else f"00000000:{_HGX_BUSES[i % len(_HGX_BUSES)]}:00.0",
                arch=arch,
                pci_device_id=pci_device_id,
                mem_total=mem_total,
                pcie_gen_max=pcie_gen,
                pcie_gen_gpu_max=pcie_gen,
                pcie_gen=pcie_gen,
                gpm=int(gpm),
                links=[LinkState(speed_mbps=link_mbps) for _ in range(links)],
                mig_capable=1,  # every HGX board since A100 can be split
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


# NVLink5 (Blackwell) counts payload bytes in NVML_FI_DEV_NVLINK_COUNT_*_BYTES; the NVLink 2-4
# THROUGHPUT_DATA fields are not supported there.
_NVLINK5_FIELDS = {FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX}
# The GB200 NVL72 trays' four GPUs sit in the two Grace CPUs' PCIe domains.
_TRAY_BUSES = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")


def _fabric(state: FakeNvmlState, cluster: str, clique: int, summary: int) -> FakeNvmlState:
    """Every GPU registered with the fabric manager, healthy, in one clique of one cluster."""
    for g in state.gpus:
        g.fabric_state, g.fabric_status = FABRIC_COMPLETED, 0
        g.fabric_cluster, g.fabric_clique = cluster, clique
        g.fabric_health, g.fabric_summary = fabric_health_mask(), summary
        g.power_mw = 140_000
    return state


def b200(count: int = 8) -> FakeNvmlState:
    """8x B200 180GB HBM3e (HGX B200): 18 NVLink5 links of 50 GB/s each way (1.8 TB/s per GPU) to
    the baseboard's NVSwitches, registered with the fabric manager (no multi-node cluster), PCIe
    Gen5 x16 to the x86 host, GPM, MIG-capable."""
    state = _hgx(
        "NVIDIA B200",
        count=count,
        arch=ARCH_BLACKWELL,
        pci_device_id=0x290110DE,
        mem_total=183_359 * MIB,
        links=18,
        link_mbps=50_000,
        pcie_gen=5,
        gpm=True,
        unsupported_fields=_NVLINK5_FIELDS,
    )
    return _fabric(state, cluster="", clique=0, summary=FABRIC_SUMMARY_HEALTHY)


def gb200(count: int = 4) -> FakeNvmlState:
    """A GB200 NVL72 compute tray: 4x B200 186GB HBM3e, 18 NVLink5 links each to the rack's
    NVSwitch trays, one clique of the rack's NVLink domain (cluster UUID from the fabric manager),
    NVLink-C2C to the Grace CPUs (10 links of 45 GB/s), PCIe Gen5 x16, GPM, MIG-capable."""
    state = _hgx(
        "NVIDIA GB200",
        count=count,
        arch=ARCH_BLACKWELL,
        pci_device_id=0x294110DE,
        mem_total=189_471 * MIB,
        links=18,
        link_mbps=50_000,
        pcie_gen=5,
        gpm=True,
        unsupported_fields=_NVLINK5_FIELDS,
        buses=_TRAY_BUSES,
    )
    for g in state.gpus:
        g.c2c_links, g.c2c_mbps = 10, 45_000
    return _fabric(state, cluster="7c9e6679-7425-40de-944b-e07fc1f90ae7", clique=32766, summary=FABRIC_SUMMARY_HEALTHY)


def gb300(count: int = 4) -> FakeNvmlState:
    """A GB300 NVL72 compute tray: 4x Blackwell Ultra 288GB HBM3e, as ``gb200`` otherwise, with
    PCIe Gen6 to the ConnectX-8 SuperNICs."""
    state = gb200(count)
    for i, g in enumerate(state.gpus):
        g.name, g.pci_device_id = "NVIDIA GB300", 0x31C210DE
        g.uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{g.name}/{i}')}"
        g.mem_total = 288_000 * MIB
        g.pcie_gen_max = g.pcie_gen_gpu_max = g.pcie_gen = 6
    return state


PROFILES = {
    "a100_sxm4": a100_sxm4, "a800_sxm4": a800_sxm4, "h100_sxm5": h100_sxm5,
    "b200": b200, "gb200": gb200, "gb300": gb300,
}  # fmt: skip
