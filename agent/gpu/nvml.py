"""The one door to NVML: the only module that imports ``pynvml``.

Modelled on nvitop's ``libnvml``: NVML is initialized lazily behind a lock and shut down at exit
(after in-flight calls drain, so a thread blocked in ``nvmlEventSetWait`` cannot race the
shutdown); the versioned forms of calls are chosen in one marked section below; and no
``NVMLError`` leaves this module. Every query on a ``Gpu`` returns its value, or ``None``:

- NotSupported (or a function this driver lacks): ``None``, remembered for that GPU and that
  call or field, so it is not asked again every tick;
- GpuIsLost: ``None``, and ``gpu.lost`` is set; nothing more is asked of that GPU;
- any other error: ``None`` for that value only (counted in ``gpu.errors``); asked again next tick.

``init()`` returns why NVML is unusable ("no NVIDIA driver (libnvidia-ml.so.1 not found)") or "".
Every C call is counted by symbol (``call_counts()``) so benchmarks can print calls per tick.
"""

from __future__ import annotations

import atexit
import ctypes
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import pynvml

from nodeagent.agent.gpu.nvml_types import (
    DriverInfo,
    FabricInfo,
    GpuEvent,
    Identity,
    MemoryInfo,
    MigIdentity,
    ProcessUsage,
    ProcessUtilization,
    Utilization,
)

_T = TypeVar("_T")
FieldKey = tuple[int, int]  # (NVML_FI_* id, scopeId)

# Every C symbol of libnvidia-ml.so.1 this module can reach (tests check the fake exports each).
NVML_SYMBOLS: Final[tuple[str, ...]] = (
    "nvmlInitWithFlags", "nvmlShutdown",
    "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetSerial", "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetArchitecture", "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization", "nvmlDeviceGetPowerUsage",
    "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet", "nvmlGpmMigSampleGet",
    "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetAttributes_v2",
    "nvmlEventSetCreate", "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2", "nvmlEventSetFree",
)  # fmt: skip

EVENT_XID: Final = int(pynvml.nvmlEventTypeXidCriticalError)
EVENT_DOUBLE_BIT_ECC: Final = int(pynvml.nvmlEventTypeDoubleBitEccError)
NVLINK_STATE_ACTIVE: Final = 1  # NVML_NVLINK_STATE_ACTIVE
NO_INSTANCE: Final = 0xFFFFFFFF  # an event's or process's instance id on a GPU without MIG

# ---- Versioned call variants ---------------------------------------------------------------------
# The one place that decides which form of a versioned call this driver gets: newest first, chosen
# once per init from the symbols the loaded library exports (drivers before R535 lack the
# ClocksEvent name, before R510 the _v2 memory query, before R565 nvmlDeviceGetTemperatureV).
_VARIANTS: Final[dict[str, tuple[str, ...]]] = {
    "memory": ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"),
    "temperature": ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
    "clock_event_reasons": ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
    "cuda_driver_version": ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
}
_VARIANT_CALLS: Final[dict[str, Callable[..., Any]]] = {
    "nvmlDeviceGetMemoryInfo_v2": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
    "nvmlDeviceGetMemoryInfo": pynvml.nvmlDeviceGetMemoryInfo,
    "nvmlDeviceGetTemperatureV": lambda h: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperature": lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetCurrentClocksEventReasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons,
    "nvmlDeviceGetCurrentClocksThrottleReasons": pynvml.nvmlDeviceGetCurrentClocksThrottleReasons,
    "nvmlSystemGetCudaDriverVersion_v2": pynvml.nvmlSystemGetCudaDriverVersion_v2,
    "nvmlSystemGetCudaDriverVersion": pynvml.nvmlSystemGetCudaDriverVersion,
}


# Versioned structures: nvmlDeviceGetGpuFabricInfoV takes a v3 structure (with the health summary)
# from drivers that have one, else v2 (the health mask alone); a driver that refuses v3 with
# ARGUMENT_VERSION_MISMATCH is asked with v2 from then on (``Gpu.fabric``).
_FABRIC_STRUCTS: Final[tuple[Any, ...]] = tuple(
    s for s in (getattr(pynvml, "c_nvmlGpuFabricInfo_v3_t", None), pynvml.c_nvmlGpuFabricInfo_v2_t) if s is not None
)


def _choose_variants(library: Any) -> dict[str, str]:
    return {
        purpose: next((s for s in symbols if hasattr(library, s)), symbols[-1])
        for purpose, symbols in _VARIANTS.items()
    }


# ---- Session: init, shutdown, accounting ---------------------------------------------------------


class _Session:
    """NVML's process-wide state; every field is guarded by ``lock``."""

    __slots__ = (
        "abandoned", "active_calls", "atexit_registered", "calls", "in_flight", "initialized", "lock",
        "shutting_down", "slowest", "variants",
    )  # fmt: skip

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.initialized = False
        self.shutting_down = False
        self.atexit_registered = False
        self.active_calls = 0  # calls inside the library now; shutdown waits for them
        self.variants: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        # The per-thread call watch (``watch_reset``, ``call_in_flight``, ``slowest_call``, ``abandon``),
        # by thread id: the call each thread is in and since when (monotonic), the slowest call it
        # made since its last reset, and the threads whose calls were abandoned (no new call starts).
        self.in_flight: dict[int, tuple[str, float]] = {}
        self.slowest: dict[int, tuple[str, float]] = {}
        self.abandoned: set[int] = set()


_session = _Session()

_REASONS: Final[dict[int, str]] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "no NVIDIA driver (libnvidia-ml.so.1 not found)",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded (nvmlInit: Driver Not Loaded)",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVIDIA driver and libnvidia-ml versions differ (reload the driver)",
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA devices (/dev/nvidia*)",
}


def init() -> str:
    """Start NVML if it is not running; "" when usable, else one line saying why not."""
    s = _session
    with s.lock:
        if s.initialized:
            return ""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            if err.value != pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:  # else no library to call
                s.calls["nvmlInitWithFlags"] += 1
            return _REASONS.get(err.value, f"NVML unusable: nvmlInit failed: {err}")
        s.calls["nvmlInitWithFlags"] += 1
        s.variants = _choose_variants(pynvml.nvmlLib)
        s.initialized = True
        if not s.atexit_registered:
            atexit.register(shutdown)
            s.atexit_registered = True
        return ""


def shutdown(timeout: float = 2.0) -> None:
    """Stop NVML after in-flight calls drain (at most ``timeout`` s); a later ``init()`` restarts it.

    Registered with ``atexit``; tests call it to start each case afresh."""
    s = _session
    with s.lock:
        if not s.initialized:
            return
        s.shutting_down = True  # no new calls start from here on
    deadline = time.monotonic() + timeout
    while True:
        with s.lock:
            drained = s.active_calls == 0
        if drained or time.monotonic() >= deadline:
            break
        time.sleep(0.001)
    with s.lock:
        if drained:
            # Skipped when a call is still inside the library: freeing NVML under it could crash,
            # and the OS reclaims everything at exit anyway.
            try:
                pynvml.nvmlShutdown()
                s.calls["nvmlShutdown"] += 1
            except pynvml.NVMLError:
                pass
        s.initialized = False
        s.shutting_down = False


def variant(purpose: str) -> str:
    """The C symbol chosen for ``purpose`` ("memory", "temperature", ...) on this driver."""
    return _session.variants.get(purpose, _VARIANTS[purpose][0])


def call_counts() -> dict[str, int]:
    """NVML calls made since the last reset, by C symbol: one per pynvml call (pynvml's process
    query makes two C calls when processes run)."""
    with _session.lock:
        return dict(_session.calls)


def reset_call_counts() -> None:
    with _session.lock:
        _session.calls.clear()


# ---- The call watch: which call a thread is in, for how long, and abandoning it ---------------------
# A GPU that stops answering blocks its caller inside the library, where Python cannot interrupt it.
# ``agent/gpu/deadlines.py`` reads each GPU on its own thread and watches that thread from here:
# the call it is in and since when, so the tick can stop waiting and name the call; ``abandon``
# makes that thread's next calls return None at once, so at most the one blocked call is left.


def watch_reset() -> None:
    """Start a fresh watch of the calling thread: no slowest call, not abandoned."""
    ident = threading.get_ident()
    with _session.lock:
        _session.slowest.pop(ident, None)
        _session.abandoned.discard(ident)


def call_in_flight(thread_id: int) -> tuple[str, float] | None:
    """(C symbol, monotonic start) of the call ``thread_id`` is inside now, or None."""
    with _session.lock:
        return _session.in_flight.get(thread_id)


def slowest_call(thread_id: int) -> tuple[str, float] | None:
    """(C symbol, seconds) of the slowest finished call of ``thread_id`` since its ``watch_reset``."""
    with _session.lock:
        return _session.slowest.get(thread_id)


def abandon(thread_id: int) -> None:
    """No new NVML call starts on ``thread_id`` (each returns None) until it calls ``watch_reset``."""
    with _session.lock:
        _session.abandoned.add(thread_id)


def _enter(symbol: str) -> bool:
    s = _session
    ident = threading.get_ident()
    with s.lock:
        if not s.initialized or s.shutting_down or ident in s.abandoned:
            return False
        s.active_calls += 1
        s.calls[symbol] += 1
        s.in_flight[ident] = (symbol, time.monotonic())
        return True


def _leave() -> None:
    s = _session
    ident = threading.get_ident()
    with s.lock:
        s.active_calls -= 1
        entered = s.in_flight.pop(ident, None)
        if entered is not None:
            took = time.monotonic() - entered[1]
            slowest = s.slowest.get(ident)
            if slowest is None or took > slowest[1]:
                s.slowest[ident] = (entered[0], took)


def _system(symbol: str, fn: Callable[[], _T]) -> _T | None:
    if not _enter(symbol):
        return None
    try:
        return fn()
    except pynvml.NVMLError:
        return None
    finally:
        _leave()


def device_count() -> int | None:
    return _system("nvmlDeviceGetCount_v2", lambda: int(pynvml.nvmlDeviceGetCount()))


def driver_info() -> DriverInfo:
    cuda_symbol = variant("cuda_driver_version")
    return DriverInfo(
        driver_version=_text(_system("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)),
        nvml_version=_text(_system("nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion)),
        cuda_driver_version=_system(cuda_symbol, _VARIANT_CALLS[cuda_symbol]),
    )


class Gpu:
    """One GPU's handle, and what NVML has told us it cannot do."""

    __slots__ = (
        "_fabric_struct", "_power_request", "_request", "errors", "handle", "index", "lost", "mismatched",
        "unsupported", "unsupported_fields",
    )  # fmt: skip

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index  # a MIG device's is its GPU's
        self.handle = handle
        self.lost = handle is None
        self.unsupported: set[str] = set()
        self.unsupported_fields: set[FieldKey] = set()
        self.errors: Counter[str] = Counter()
        self.mismatched: set[str] = set()  # calls that refused a structure's version
        self._request: tuple[tuple[FieldKey, ...], Any] | None = None  # field ids, prepared array
        self._fabric_struct = 0  # which of _FABRIC_STRUCTS this driver takes
        self._power_request: Any = None  # the one-field request of ``power_instant_mw``, kept apart

    @classmethod
    def open(cls, index: int) -> Gpu | None:
        """The GPU at ``index``; a lost one comes back with ``lost`` set, a failed lookup as None."""
        if not _enter("nvmlDeviceGetHandleByIndex_v2"):
            return None
        try:
            return cls(index, pynvml.nvmlDeviceGetHandleByIndex(index))
        except pynvml.NVMLError as err:
            return cls(index, None) if err.value == pynvml.NVML_ERROR_GPU_IS_LOST else None
        finally:
            _leave()

    @property
    def handle_id(self) -> int:
        return int(ctypes.cast(self.handle, ctypes.c_void_p).value or 0) if self.handle is not None else 0

    # -- identity and topology (scan) --

    def uuid(self) -> str | None:
        """uuid"""
        return _opt_text(self._query("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID))

    def identity(self) -> Identity:
        """name, serial, pci.bus_id, architecture, pcie.link.gen.max, pcie.link.width.max, GPM support."""
        pci = self._query("nvmlDeviceGetPciInfo_v3", pynvml.nvmlDeviceGetPciInfo_v3)
        gpm = self._query("nvmlGpmQueryDeviceSupport", pynvml.nvmlGpmQueryDeviceSupport)
        return Identity(
            name=_opt_text(self._query("nvmlDeviceGetName", pynvml.nvmlDeviceGetName)),
            serial=_opt_text(self._query("nvmlDeviceGetSerial", pynvml.nvmlDeviceGetSerial)),
            pci_bus_id=None if pci is None else _text(pci.busId),
            architecture=self._query("nvmlDeviceGetArchitecture", pynvml.nvmlDeviceGetArchitecture),
            pcie_max_generation=self._query(
                "nvmlDeviceGetMaxPcieLinkGeneration", pynvml.nvmlDeviceGetMaxPcieLinkGeneration
            ),
            pcie_max_width=self._query("nvmlDeviceGetMaxPcieLinkWidth", pynvml.nvmlDeviceGetMaxPcieLinkWidth),
            gpm_supported=bool(gpm is not None and gpm.isSupportedDevice),
        )

    # -- per tick --

    def utilization(self) -> Utilization | None:
        """utilization.gpu, utilization.memory as 0..1 ratios."""
        util = self._query("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates)
        return None if util is None else Utilization(util.gpu / 100.0, util.memory / 100.0)

    def memory(self) -> MemoryInfo | None:
        """memory.total, memory.used (and memory.reserved with the _v2 call)."""
        symbol = variant("memory")
        mem = self._query(symbol, _VARIANT_CALLS[symbol])
        if mem is None:
            return None
        reserved = int(mem.reserved) if symbol.endswith("_v2") else None
        return MemoryInfo(
            total_bytes=int(mem.total), used_bytes=int(mem.used), reserved_bytes=reserved, free_bytes=int(mem.free)
        )

    def processes(self) -> list[ProcessUsage] | None:
        """nvidia-smi --query-compute-apps=pid,used_memory"""
        procs = self._query("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.nvmlDeviceGetComputeRunningProcesses_v3)
        if procs is None:
            return None
        return [ProcessUsage(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs]

    def clock_event_reasons(self) -> int | None:
        """clocks_event_reasons.active: nvmlClocksEventReason* bitmask."""
        symbol = variant("clock_event_reasons")
        return self._query(symbol, _VARIANT_CALLS[symbol])

    def temperature_celsius(self) -> int | None:
        """temperature.gpu"""
        symbol = variant("temperature")
        return self._query(symbol, _VARIANT_CALLS[symbol])

    def sm_clock_mhz(self) -> int | None:
        """clocks.sm"""
        return self._query("nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)

    def memory_clock_mhz(self) -> int | None:
        """clocks.mem"""
        return self._query(
            "nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM, what="clock_mem"
        )

    def encoder_decoder_utilization(self) -> tuple[float | None, float | None]:
        """utilization.encoder, utilization.decoder as 0..1 ratios (the sampling period is dropped)."""
        enc = self._query("nvmlDeviceGetEncoderUtilization", pynvml.nvmlDeviceGetEncoderUtilization)
        dec = self._query("nvmlDeviceGetDecoderUtilization", pynvml.nvmlDeviceGetDecoderUtilization)
        return (None if enc is None else enc[0] / 100.0), (None if dec is None else dec[0] / 100.0)

    def pcie_link(self) -> tuple[int | None, int | None]:
        """pcie.link.gen.gpucurrent, pcie.link.width.current"""
        gen = self._query("nvmlDeviceGetCurrPcieLinkGeneration", pynvml.nvmlDeviceGetCurrPcieLinkGeneration)
        width = self._query("nvmlDeviceGetCurrPcieLinkWidth", pynvml.nvmlDeviceGetCurrPcieLinkWidth)
        return gen, width

    def gpu_max_pcie_generation(self) -> int | None:
        """pcie.link.gen.gpumax: what the GPU itself supports (``pcie.link.gen.max`` is what this slot
        allows it)."""
        return self._query("nvmlDeviceGetGpuMaxPcieLinkGeneration", pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration)

    def pcie_throughput(self) -> tuple[float | None, float | None]:
        """PCIe (rx, tx) bytes per second over the driver's last 20 ms window, for drivers without
        the cumulative byte counters."""
        fn = pynvml.nvmlDeviceGetPcieThroughput
        rx = self._query("nvmlDeviceGetPcieThroughput", fn, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        tx = self._query("nvmlDeviceGetPcieThroughput", fn, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        return (None if rx is None else rx * 1024.0), (None if tx is None else tx * 1024.0)

    def field_values(self, requests: Iterable[FieldKey]) -> dict[FieldKey, int | float]:
        """All ``requests`` in one nvmlDeviceGetFieldValues call; each field's own nvmlReturn is
        checked, and a field this GPU does not support is left out of later calls."""
        wanted = tuple(r for r in requests if r not in self.unsupported_fields)
        if not wanted:
            return {}
        if self._request is None or self._request[0] != wanted:
            array = (pynvml.c_nvmlFieldValue_t * len(wanted))()
            for entry, (field_id, scope_id) in zip(array, wanted, strict=True):
                entry.fieldId, entry.scopeId = field_id, scope_id
            self._request = (wanted, array)
        raw = self._query("nvmlDeviceGetFieldValues", _get_field_values, self._request[1])
        out: dict[FieldKey, int | float] = {}
        if raw is None:
            return out
        for key, (ret, value) in zip(wanted, _decode_field_values(raw), strict=True):
            if ret == pynvml.NVML_SUCCESS and value is not None:
                out[key] = value
            elif ret == pynvml.NVML_ERROR_NOT_SUPPORTED:
                self.unsupported_fields.add(key)
            elif ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            else:
                self.errors[f"field {key[0]}"] += 1
        return out

    def power_instant_mw(self) -> int | None:
        """power.draw.instant in milliwatts, between ticks (``power_samples.py``): field 186
        (NVML_FI_DEV_POWER_INSTANT) in a request of its own, so the tick's prepared array is not
        rebuilt; where the driver lacks it, nvmlDeviceGetPowerUsage (near-instant on GA100, a 1 s
        mean on later GPUs)."""
        if _POWER_INSTANT not in self.unsupported_fields:
            if self._power_request is None:
                self._power_request = (pynvml.c_nvmlFieldValue_t * 1)()
                self._power_request[0].fieldId, self._power_request[0].scopeId = _POWER_INSTANT
            raw = self._query("nvmlDeviceGetFieldValues", _get_field_values, self._power_request)
            if raw is None:
                return None
            ret, value = _decode_field_values(raw)[0]
            if ret == pynvml.NVML_SUCCESS and value is not None:
                return int(value)
            if ret == pynvml.NVML_ERROR_NOT_SUPPORTED:
                self.unsupported_fields.add(_POWER_INSTANT)
            elif ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            return None
        usage = self._query("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage)
        return None if usage is None else int(usage)

    def process_utilization(self, since_us: int) -> list[ProcessUtilization] | None:
        """nvidia-smi pmon's sm and mem: the driver's samples of each process newer than
        ``since_us`` (CPU microseconds; 0: every sample it holds). [] when there is none newer."""

        def samples(handle: Any) -> list[Any]:
            try:
                return list(pynvml.nvmlDeviceGetProcessUtilization(handle, since_us))
            except pynvml.NVMLError as err:
                if err.value == pynvml.NVML_ERROR_NOT_FOUND:
                    return []  # no sample since then: not an error
                raise

        raw = self._query("nvmlDeviceGetProcessUtilization", samples)
        if raw is None:
            return None
        return [ProcessUtilization(int(s.pid), int(s.timeStamp), s.smUtil / 100.0, s.memUtil / 100.0) for s in raw]

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

    def mig_devices(self) -> list[tuple[int, Gpu]]:
        """The MIG devices of this GPU by their index under it (nvidia-smi -L), each a ``Gpu`` for
        the calls NVML answers on a MIG handle (UUID, name, memory, processes, ``mig_identity``)."""
        count = self._query("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount) or 0
        out: list[tuple[int, Gpu]] = []
        for slot in range(count):
            handle = self._query("nvmlDeviceGetMigDeviceHandleByIndex", _mig_handle, slot)
            if handle is not None and handle is not False:
                out.append((slot, Gpu(self.index, handle)))
        return out

    def mig_identity(self) -> MigIdentity:
        """On a MIG device: its name (with the profile), instance ids and size."""
        attributes = self._query("nvmlDeviceGetAttributes_v2", pynvml.nvmlDeviceGetAttributes_v2)
        return MigIdentity(
            name=_opt_text(self._query("nvmlDeviceGetName", pynvml.nvmlDeviceGetName)),
            gpu_instance_id=self._query("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId),
            compute_instance_id=self._query("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId),
            multiprocessor_count=None if attributes is None else int(attributes.multiprocessorCount),
            slice_count=None if attributes is None else int(attributes.gpuInstanceSliceCount),
            memory_bytes=None if attributes is None else int(attributes.memorySizeMB) * 1024 * 1024,
        )

    def gpm_mig_sample(self, gpu_instance_id: int, sample: GpmSample) -> bool:
        """Fill ``sample`` with one MIG GPU instance's GPM counters (asked of the GPU itself)."""
        if sample.buffer is None:
            return False

        def take(handle: Any) -> bool:
            pynvml.nvmlGpmMigSampleGet(handle, gpu_instance_id, sample.buffer)
            return True

        return self._query("nvmlGpmMigSampleGet", take, what=f"nvmlGpmMigSampleGet {gpu_instance_id}") is not None

    # -- GPM (Hopper and newer) --

    def gpm_sample(self, sample: GpmSample) -> bool:
        """Fill ``sample`` with this GPU's GPM counters now; False when it could not."""
        if sample.buffer is None:
            return False

        def take(handle: Any) -> bool:
            pynvml.nvmlGpmSampleGet(handle, sample.buffer)
            return True

        return self._query("nvmlGpmSampleGet", take) is not None

    def gpm_metrics(self, older: GpmSample, newer: GpmSample, metric_ids: Sequence[int]) -> dict[int, float]:
        """GPM metrics over the interval between two samples, by NVML_GPM_METRIC_* id."""
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1 = older.buffer
        request.sample2 = newer.buffer
        for i, metric in enumerate(metric_ids):
            request.metrics[i].metricId = metric
        result = self._query("nvmlGpmMetricsGet", lambda _handle: pynvml.nvmlGpmMetricsGet(request))
        if result is None:
            return {}
        metrics = result.metrics
        return {
            metric: float(metrics[i].value)
            for i, metric in enumerate(metric_ids)
            if metrics[i].nvmlReturn == pynvml.NVML_SUCCESS
        }

    # -- the boundary --

    def _query(self, symbol: str, fn: Callable[..., _T], *args: Any, what: str | None = None) -> _T | None:
        # ``what`` names the query when one symbol answers several (clock types): a GPU that has
        # no memory clock still has an SM clock.
        what = what or symbol
        if self.lost or what in self.unsupported or not _enter(symbol):
            return None
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as err:
            if err.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                self.unsupported.add(what)
            elif err.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            elif err.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                self.mismatched.add(what)
            else:
                self.errors[symbol] += 1
            return None
        finally:
            _leave()


class GpmSample:
    """An NVML GPM sample buffer. Allocate once and refill it every tick (``Gpu.gpm_sample``);
    ``free`` gives it back."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer

    @classmethod
    def alloc(cls) -> GpmSample | None:
        buffer = _system("nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc)
        return None if buffer is None else cls(buffer)

    def free(self) -> None:
        if self.buffer is not None:
            buffer, self.buffer = self.buffer, None
            _system("nvmlGpmSampleFree", lambda: pynvml.nvmlGpmSampleFree(buffer))


class EventSet:
    """An NVML event set: register GPUs, then ``wait`` (from one thread) for their events."""

    __slots__ = ("_set",)

    def __init__(self, handle: Any) -> None:
        self._set = handle

    @classmethod
    def create(cls) -> EventSet | None:
        handle = _system("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        return None if handle is None else cls(handle)

    def register(self, gpu: Gpu, event_types: int) -> int:
        """Register the wanted ``event_types`` this GPU supports; returns those registered."""
        supported = gpu._query("nvmlDeviceGetSupportedEventTypes", pynvml.nvmlDeviceGetSupportedEventTypes)
        wanted = event_types & (supported or 0)
        if not wanted:
            return 0
        done = gpu._query(
            "nvmlDeviceRegisterEvents", lambda h: pynvml.nvmlDeviceRegisterEvents(h, wanted, self._set) or True
        )
        return wanted if done else 0

    def wait(self, timeout_ms: int) -> GpuEvent | None:
        """The next event, or None after ``timeout_ms`` (or on an error: the caller paces retries)."""
        if self._set is None or not _enter("nvmlEventSetWait_v2"):
            return None
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError:
            return None
        finally:
            _leave()
        handle_id = int(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        return GpuEvent(
            handle_id, int(data.eventType), int(data.eventData), time.time(),
            None if gi == NO_INSTANCE else gi, None if ci == NO_INSTANCE else ci,
        )  # fmt: skip

    def free(self) -> None:
        if self._set is not None:
            handle, self._set = self._set, None
            _system("nvmlEventSetFree", lambda: pynvml.nvmlEventSetFree(handle))


# ---- helpers -------------------------------------------------------------------------------------

# nvmlFieldValue_t as nvml.h lays it out: fieldId, scopeId, timestamp, latencyUsec, valueType,
# nvmlReturn, then the 8-byte nvmlValue_t union. Decoding the array's bytes in one pass costs a
# tenth of reading each member through pynvml's structure wrappers (1000+ fields per tick on
# an 8-GPU node).
_FIELD_VALUE: Final = struct.Struct("=IIqqII8s")
# nvmlValueType_t -> how the union holds it (DOUBLE, UINT, ULONG, ULONGLONG, SLONGLONG, SINT, USHORT).
_VALUE_TYPES: Final = tuple(
    struct.Struct("=" + code)
    for code in ("d", "I", "Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "I", "Q", "q", "i", "H")
)


_POWER_INSTANT: Final = (186, 0)  # NVML_FI_DEV_POWER_INSTANT (fields.FI_POWER_INSTANT), scope 0


def _get_field_values(handle: Any, array: Any) -> Any:
    """nvmlDeviceGetFieldValues into a request array prepared once per GPU: pynvml's wrapper
    rebuilds the array member by member on every call, most of the cost at 100+ fields a GPU."""
    ret = pynvml.nvmlLib.nvmlDeviceGetFieldValues(handle, ctypes.c_int32(len(array)), ctypes.byref(array))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return array


# A pynvml whose structure differs from nvml.h's could not be decoded this way: no field values then.
FIELD_LAYOUT_MATCHES: Final = ctypes.sizeof(pynvml.c_nvmlFieldValue_t) == _FIELD_VALUE.size


def _decode_field_values(raw: Any) -> list[tuple[int, int | float | None]]:
    """(nvmlReturn, value) per entry; the value is None unless nvmlReturn is NVML_SUCCESS."""
    if not FIELD_LAYOUT_MATCHES:
        return [(pynvml.NVML_ERROR_UNKNOWN, None)] * len(raw)
    out: list[tuple[int, int | float | None]] = []
    for _fid, _scope, _ts, _latency, kind, ret, union in _FIELD_VALUE.iter_unpack(bytes(raw)):
        value = None
        if ret == pynvml.NVML_SUCCESS and 0 <= kind < len(_VALUE_TYPES):
            value = _VALUE_TYPES[kind].unpack_from(union)[0]
        out.append((ret, value))
    return out


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


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else "" if value is None else str(value)


def _opt_text(value: object) -> str | None:
    return None if value is None else _text(value)
