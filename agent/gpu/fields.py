"""What NVML's numbers mean: the field values one GPU is asked for each tick, the GPM metrics,
and where each lands in a ``GpuSample``.

All of a GPU's counters come from ONE nvmlDeviceGetFieldValues call per tick. Ids are nvml.h's
(13.x) ``NVML_FI_DEV_*`` and ``NVML_GPM_METRIC_*``; NVIDIA guarantees field ids never change. No
NVML calls here (agent/gpu/nvml_readings.py makes them), so this module is plain data and arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Final

from nodeagent.agent.gpu.nvml_types import MemoryInfo
from nodeagent.core.wire.validate import NEGATIVE_UINT
from nodeagent.v1 import nodeagent_pb2 as pb

FieldKey = tuple[int, int]  # (field id, scopeId)
FieldValues = Mapping[FieldKey, int | float]

# ---- Field ids (nvml.h) --------------------------------------------------------------------------
FI_ECC_DBE_VOL_TOTAL: Final = 4  # ecc.errors.uncorrected.volatile.total
FI_ECC_DBE_AGG_TOTAL: Final = 6  # ecc.errors.uncorrected.aggregate.total
FI_RETIRED_SBE: Final = 29  # retired_pages.single_bit_ecc.count (GPUs before Ampere)
FI_RETIRED_DBE: Final = 30  # retired_pages.double_bit.count
FI_RETIRED_PENDING: Final = 31  # retired_pages.pending
FI_NVLINK_CRC_DATA_ERROR_COUNT_L0: Final = 39  # ..44: data CRC errors of links 0-5 (link in the id, not the scope)
FI_MEMORY_TEMP: Final = 82  # temperature.memory, C
FI_TOTAL_ENERGY_CONSUMPTION: Final = 83  # mJ since the driver loaded
FI_NVLINK_LINK_COUNT: Final = 91
FI_PCIE_REPLAY_COUNTER: Final = 94  # pcie.replay_counter (nvidia-smi -q)
FI_NVLINK_CRC_DATA_ERROR_COUNT_L6: Final = 102  # ..107: links 6-11; later links have no data-CRC field
FI_C2C_LINK_COUNT: Final = 170  # NVLink-C2C links to the CPU (Grace)
FI_C2C_LINK_GET_MAX_BW: Final = 172  # MB/s, per link (scopeId)
FI_NVLINK_THROUGHPUT_DATA_TX: Final = 138  # KiB of payload, per link (scopeId)
FI_NVLINK_THROUGHPUT_DATA_RX: Final = 139
FI_REMAPPED_COR: Final = 142  # remapped_rows.correctable
FI_REMAPPED_UNC: Final = 143  # remapped_rows.uncorrectable
FI_REMAPPED_PENDING: Final = 144  # remapped_rows.pending
FI_REMAPPED_FAILURE: Final = 145  # remapped_rows.failure
FI_NVLINK_ERROR_DL_REPLAY: Final = 161  # per link
FI_NVLINK_ERROR_DL_RECOVERY: Final = 162
FI_NVLINK_ERROR_DL_CRC: Final = 163  # flit CRC errors
FI_NVLINK_GET_SPEED: Final = 164  # MB/s, one direction, per link
FI_NVLINK_GET_STATE: Final = 165  # NVML_NVLINK_STATE_*
FI_POWER_INSTANT: Final = 186  # milliwatts; power.draw.instant
FI_PCIE_COUNT_TX_BYTES: Final = 197  # cumulative, may wrap
FI_PCIE_COUNT_RX_BYTES: Final = 198
FI_NVLINK_COUNT_XMIT_BYTES: Final = 202  # NVLink5 (Blackwell) byte counters, per link
FI_NVLINK_COUNT_RCV_BYTES: Final = 204
FI_GPU_TEMP: Final = 308  # temperature.gpu, C with sub-degree precision (nvml.h 13; older drivers: not supported)
# How long each clock-event reason has held the clocks down, ns since the driver loaded (nvml.h 13's
# NVML_FI_DEV_CLOCKS_EVENT_REASON_*: 74 and 76 are the older PERF_POLICY counters, 269-271 are
# newer; older drivers: not supported). (field id, nvmlClocksEventReason bit).
CLOCK_EVENT_DURATIONS: Final = (
    (74, 0x004),  # SW_POWER_CAP
    (76, 0x010),  # SYNC_BOOST
    (269, 0x020),  # SW_THERM_SLOWDOWN
    (270, 0x040),  # HW_THERM_SLOWDOWN
    (271, 0x080),  # HW_POWER_BRAKE_SLOWDOWN
)

NVLINK_STATE_ACTIVE: Final = 1

# NVLink payload bytes, per link: the THROUGHPUT_DATA fields on NVLink 2-4 (V100 to H100); nvml.h
# 13 documents the COUNT_*_BYTES fields for NVLink5. (tx field, rx field, bytes per unit).
NVLINK_BYTE_SOURCES: Final = (
    (FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX, 1024),
    (FI_NVLINK_COUNT_XMIT_BYTES, FI_NVLINK_COUNT_RCV_BYTES, 1),
)

_DEVICE_FIELDS: Final = (
    FI_PCIE_COUNT_RX_BYTES, FI_PCIE_COUNT_TX_BYTES, FI_PCIE_REPLAY_COUNTER, FI_ECC_DBE_VOL_TOTAL,
    FI_ECC_DBE_AGG_TOTAL, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE, FI_POWER_INSTANT,
    FI_REMAPPED_COR, FI_REMAPPED_UNC, FI_MEMORY_TEMP, FI_TOTAL_ENERGY_CONSUMPTION, FI_GPU_TEMP,
    *(field_id for field_id, _bit in CLOCK_EVENT_DURATIONS),
)  # fmt: skip
_LINK_FIELDS: Final = (
    FI_NVLINK_GET_STATE, FI_NVLINK_ERROR_DL_REPLAY, FI_NVLINK_ERROR_DL_RECOVERY, FI_NVLINK_ERROR_DL_CRC,
)  # fmt: skip

# ---- GPM metric ids (nvml.h nvmlGpmMetricId_t) ---------------------------------------------------
GPM_GRAPHICS_UTIL: Final = 1  # % of time the graphics engine was active
GPM_SM_UTIL: Final = 2  # % of SMs busy: "SM activity"
GPM_SM_OCCUPANCY: Final = 3  # % of warps resident vs the maximum
GPM_ANY_TENSOR_UTIL: Final = 5
GPM_DRAM_BW_UTIL: Final = 10  # % of peak DRAM bandwidth in use
GPM_PCIE_TX_PER_SEC: Final = 20  # MiB/s
GPM_PCIE_RX_PER_SEC: Final = 21
GPM_NVLINK_TOTAL_RX_PER_SEC: Final = 60  # MiB/s, all links
GPM_NVLINK_TOTAL_TX_PER_SEC: Final = 61
GPM_METRICS: Final = (
    GPM_GRAPHICS_UTIL, GPM_DRAM_BW_UTIL, GPM_SM_UTIL, GPM_SM_OCCUPANCY, GPM_ANY_TENSOR_UTIL,
    GPM_PCIE_RX_PER_SEC, GPM_PCIE_TX_PER_SEC,
    GPM_NVLINK_TOTAL_RX_PER_SEC, GPM_NVLINK_TOTAL_TX_PER_SEC,
)  # fmt: skip
_MIB: Final = 1024 * 1024

# ---- Clock-event reasons: nodeagent.core.wire.clock_events (the collector reads them too) ---


# ---- Scan ----------------------------------------------------------------------------------------

LINK_COUNT_REQUEST: Final[tuple[FieldKey, ...]] = ((FI_NVLINK_LINK_COUNT, 0),)


def link_speed_requests(link_count: int) -> list[FieldKey]:
    return [(FI_NVLINK_GET_SPEED, link) for link in range(link_count)]


def link_speed_bytes(values: FieldValues, link_count: int) -> float | None:
    """Per-link bandwidth in bytes per second, one direction (the fastest link: a link that is down
    reports 0)."""
    speeds = [values.get((FI_NVLINK_GET_SPEED, link)) for link in range(link_count)]
    known = [float(s) for s in speeds if s]
    return max(known) * 1e6 if known else None


C2C_COUNT_REQUEST: Final[tuple[FieldKey, ...]] = ((FI_C2C_LINK_COUNT, 0),)


def c2c_speed_requests(link_count: int) -> list[FieldKey]:
    return [(FI_C2C_LINK_GET_MAX_BW, link) for link in range(link_count)]


def c2c_speed_bytes(values: FieldValues, link_count: int) -> float | None:
    """Per-link NVLink-C2C bandwidth in bytes per second (the fastest link's)."""
    speeds = [values.get((FI_C2C_LINK_GET_MAX_BW, link)) for link in range(link_count)]
    known = [float(s) for s in speeds if s]
    return max(known) * 1e6 if known else None


# ---- Per tick ------------------------------------------------------------------------------------


# Device fields copied as whole numbers: (field, GpuSample attribute).
_DEVICE_COUNTERS: Final = (
    ((FI_PCIE_COUNT_RX_BYTES, 0), "pcie_rx_bytes_total"),
    ((FI_PCIE_COUNT_TX_BYTES, 0), "pcie_tx_bytes_total"),
    ((FI_PCIE_REPLAY_COUNTER, 0), "pcie_replay_total"),
    ((FI_ECC_DBE_VOL_TOTAL, 0), "ecc_uncorrected_volatile_total"),
    ((FI_ECC_DBE_AGG_TOTAL, 0), "ecc_uncorrected_aggregate_total"),
    ((FI_REMAPPED_COR, 0), "remapped_rows_correctable_total"),
    ((FI_REMAPPED_UNC, 0), "remapped_rows_uncorrectable_total"),
    ((FI_TOTAL_ENERGY_CONSUMPTION, 0), "energy_millijoules_total"),
)


@dataclass(frozen=True, slots=True)
class LinkPlan:
    """Where one NVLink's readings are in the field values, worked out once per plan."""

    link: int
    state: FieldKey
    bytes: tuple[FieldKey, FieldKey] | None  # (tx, rx): the plan's byte source on this link
    errors: tuple[tuple[FieldKey, str], ...]  # (field, NvLinkSample attribute)


@dataclass(frozen=True, slots=True)
class TickPlan:
    """The field values one GPU is asked for this tick, and where each reading lands."""

    requests: tuple[FieldKey, ...]
    link_count: int
    nvlink_bytes: tuple[int, int, int] | None  # (tx field, rx field, bytes per unit)
    links: tuple[LinkPlan, ...]


def tick_plan(link_count: int, unsupported: Set[FieldKey]) -> TickPlan:
    """The fields to ask, given the GPU's links and what it said it does not support: the first
    NVLink byte source that it has not refused."""
    source = next((s for s in NVLINK_BYTE_SOURCES if (s[0], 0) not in unsupported), None)
    requests: list[FieldKey] = [(f, 0) for f in _DEVICE_FIELDS]
    links: list[LinkPlan] = []
    for link in range(link_count):
        requests.extend((f, link) for f in _LINK_FIELDS)
        pair = None if source is None else ((source[0], link), (source[1], link))
        if pair is not None:
            requests.extend(pair)
        errors = [
            ((FI_NVLINK_ERROR_DL_REPLAY, link), "replay_errors_total"),
            ((FI_NVLINK_ERROR_DL_RECOVERY, link), "recovery_errors_total"),
            ((FI_NVLINK_ERROR_DL_CRC, link), "crc_flit_errors_total"),
        ]
        crc_data = _crc_data_field(link)
        if crc_data is not None:
            requests.append((crc_data, 0))
            errors.append(((crc_data, 0), "crc_data_errors_total"))
        links.append(LinkPlan(link, (FI_NVLINK_GET_STATE, link), pair, tuple(errors)))
    return TickPlan(tuple(requests), link_count, source, tuple(links))


def fill_sample(values: FieldValues, plan: TickPlan, sample: pb.GpuSample) -> None:
    """Copy the field values of one tick into ``sample``; a value NVML did not give stays unset.
    Each reading is looked up where the plan says: no call per field or per link (100+ a GPU)."""
    get = values.get
    for key, name in _DEVICE_COUNTERS:
        value = get(key)
        if value is not None:
            setattr(sample, name, int(value))
    gpu_temp = get((FI_GPU_TEMP, 0))
    if gpu_temp is not None:  # whole degrees, as nvmlDeviceGetTemperature gives them (dcgm-exporter's too)
        sample.temperature_celsius = float(int(gpu_temp))
    memory_temp = get((FI_MEMORY_TEMP, 0))
    if memory_temp is not None:
        sample.memory_temperature_celsius = float(int(memory_temp))
    pending, failure = get((FI_REMAPPED_PENDING, 0)), get((FI_REMAPPED_FAILURE, 0))
    power = get((FI_POWER_INSTANT, 0))
    if pending is not None:
        sample.remapped_rows_pending = bool(int(pending))
    if failure is not None:
        sample.remapped_rows_failure = bool(int(failure))
    if power is not None:
        sample.power_watts = int(power) / 1000.0
    _fill_links(get, plan, sample)


def _fill_links(get: Callable[[FieldKey], int | float | None], plan: TickPlan, sample: pb.GpuSample) -> None:
    """One NvLinkSample per link, and the GPU's byte sums over them."""
    # The GPU's sums over its links, kept beside the links: a reader of the report (the /metrics
    # page's DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL) then need not walk 18 link messages per GPU.
    rx_sum: int | None = None
    tx_sum: int | None = None
    unit = 0 if plan.nvlink_bytes is None else plan.nvlink_bytes[2]
    add = sample.nvlinks.add
    for link in plan.links:
        nvlink = add(link=link.link)
        state = get(link.state)
        if state is not None:
            nvlink.active = int(state) == NVLINK_STATE_ACTIVE
        if link.bytes is not None:
            tx, rx = get(link.bytes[0]), get(link.bytes[1])
            if tx is not None:
                nvlink.tx_bytes_total = tx_bytes = int(tx) * unit
                tx_sum = (tx_sum or 0) + tx_bytes
            if rx is not None:
                nvlink.rx_bytes_total = rx_bytes = int(rx) * unit
                rx_sum = (rx_sum or 0) + rx_bytes
        for key, name in link.errors:
            value = get(key)
            if value is not None:
                setattr(nvlink, name, int(value))
    # A sum past 2^63 would read as a negative count sent as unsigned (and past 2^64 not fit):
    # 18 links get there 18 times sooner than one. Then it is left out, and readers sum the links.
    if rx_sum is not None and rx_sum < NEGATIVE_UINT:
        sample.nvlink_rx_bytes_total = rx_sum
    if tx_sum is not None and tx_sum < NEGATIVE_UINT:
        sample.nvlink_tx_bytes_total = tx_sum


def fill_gpm(metrics: Mapping[int, float], sample: pb.GpuSample) -> None:
    """GPM metrics (percent, MiB/s) as ratios and bytes per second."""
    for metric, name, scale in (
        (GPM_GRAPHICS_UTIL, "graphics_active_ratio", 0.01),
        (GPM_DRAM_BW_UTIL, "dram_active_ratio", 0.01),
        (GPM_SM_UTIL, "sm_active_ratio", 0.01),
        (GPM_SM_OCCUPANCY, "sm_occupancy_ratio", 0.01),
        (GPM_ANY_TENSOR_UTIL, "tensor_active_ratio", 0.01),
        (GPM_PCIE_RX_PER_SEC, "gpm_pcie_rx_bytes_per_second", _MIB),
        (GPM_PCIE_TX_PER_SEC, "gpm_pcie_tx_bytes_per_second", _MIB),
        (GPM_NVLINK_TOTAL_RX_PER_SEC, "gpm_nvlink_rx_bytes_per_second", _MIB),
        (GPM_NVLINK_TOTAL_TX_PER_SEC, "gpm_nvlink_tx_bytes_per_second", _MIB),
    ):
        value = metrics.get(metric)
        if value is not None:
            setattr(sample, name, value * scale)


def _crc_data_field(link: int) -> int | None:
    if link < 6:
        return FI_NVLINK_CRC_DATA_ERROR_COUNT_L0 + link
    if link < 12:
        return FI_NVLINK_CRC_DATA_ERROR_COUNT_L6 + link - 6
    return None


def fill_memory(memory: MemoryInfo | None, sample: pb.GpuSample) -> None:
    """A GPU's (or a MIG instance's) memory as NVML gave it, into its sample."""
    if memory is None:
        return
    sample.memory_used_bytes = memory.used_bytes
    sample.memory_total_bytes = memory.total_bytes
    if memory.free_bytes is not None:
        sample.memory_free_bytes = memory.free_bytes
    if memory.reserved_bytes is not None:
        sample.memory_reserved_bytes = memory.reserved_bytes
