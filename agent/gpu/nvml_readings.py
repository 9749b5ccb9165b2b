"""What a tick reads of a GPU through NVML: utilization, memory, clocks, temperature, PCIe, processes,
and the batched field values (energy, power, ECC, NVLink counters, ...) in one call.

Errors are taken as ``nvml_handle.py`` says; a field value's own nvmlReturn the same way, per field.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterable
from itertools import filterfalse
from typing import Any, Final, cast

import pynvml

from nodeagent.agent.gpu.nvml_handle import FieldKey, GpuHandle
from nodeagent.agent.gpu.nvml_library import variant_call
from nodeagent.agent.gpu.nvml_types import MemoryInfo, ProcessUsage, ProcessUtilization, Utilization


class TickReadings(GpuHandle):
    """The readings of one tick, each its own value or None."""

    __slots__ = ()

    def utilization(self) -> Utilization | None:
        """utilization.gpu, utilization.memory as 0..1 ratios."""
        util = self._query("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates)
        return None if util is None else Utilization(util.gpu / 100.0, util.memory / 100.0)

    def memory(self) -> MemoryInfo | None:
        """memory.total, memory.used (and memory.reserved with the _v2 call)."""
        symbol, call = variant_call("memory")
        mem = self._query(symbol, call)
        if mem is None:
            return None
        reserved = int(mem.reserved) if symbol.endswith("_v2") else None
        return MemoryInfo(
            total_bytes=int(mem.total), used_bytes=int(mem.used), reserved_bytes=reserved, free_bytes=int(mem.free)
        )

    def processes(self) -> list[ProcessUsage] | None:
        """nvidia-smi --query-compute-apps=pid,used_memory, in one call into an array kept per GPU
        (pynvml's wrapper asks twice whenever a process runs: the count, then the list); a second
        call only when the array is too small, which then grows."""
        for _ in range(2):
            if self._procs is None:
                self._procs = (pynvml.c_nvmlProcessInfo_v3_t * _PROCESSES_FIRST)()
            count = self._query("nvmlDeviceGetComputeRunningProcesses_v3", running_processes, self._procs)
            if count is None:
                return None
            if count >= 0:
                return [
                    ProcessUsage(int(p.pid), None if p.usedGpuMemory == _NOT_AVAILABLE else int(p.usedGpuMemory))
                    for p in self._procs[:count]
                ]
            self._procs = (pynvml.c_nvmlProcessInfo_v3_t * (2 * -count + 5))()  # room for a few more
        return None

    def clock_event_reasons(self) -> int | None:
        """clocks_event_reasons.active: nvmlClocksEventReason* bitmask."""
        symbol, call = variant_call("clock_event_reasons")
        return self._query(symbol, call)

    def temperature_celsius(self) -> int | None:
        """temperature.gpu"""
        symbol, call = variant_call("temperature")
        return self._query(symbol, call)

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
        unsupported = self.unsupported_fields  # filtered in C: no call per request (100+ a GPU)
        wanted = tuple(filterfalse(unsupported.__contains__, requests) if unsupported else requests)
        if not wanted:
            return {}
        if self._request is None or self._request[0] != wanted:
            array = (pynvml.c_nvmlFieldValue_t * len(wanted))()
            for entry, (field_id, scope_id) in zip(array, wanted, strict=True):
                entry.fieldId, entry.scopeId = field_id, scope_id
            self._request = (wanted, array)
        raw = self._query("nvmlDeviceGetFieldValues", get_field_values, self._request[1])
        out: dict[FieldKey, int | float] = {}
        if raw is None:
            return out
        rets, values = decode_columns(raw)
        if not any(rets):  # every field answered (NVML_SUCCESS is 0): no loop in Python
            return dict(zip(wanted, cast("tuple[int | float, ...]", values), strict=True))
        for key, ret, value in zip(wanted, rets, values, strict=True):
            if ret == pynvml.NVML_SUCCESS and value is not None:
                out[key] = value
            elif ret == pynvml.NVML_ERROR_NOT_SUPPORTED:
                self.unsupported_fields.add(key)
            elif ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            else:
                self.errors[f"field {key[0]}"] += 1
        return out

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


# ---- Processes: one call into an array kept per GPU -----------------------------------------------

_PROCESSES_FIRST: Final = 16  # entries; an 8-GPU node runs one or a few processes per GPU
_NOT_AVAILABLE: Final = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value  # usedGpuMemory unknown (WDDM)


def running_processes(handle: Any, array: Any) -> int:
    """nvmlDeviceGetComputeRunningProcesses_v3 into ``array``: how many entries it filled, or minus
    the count needed when the array is too small (NVML_ERROR_INSUFFICIENT_SIZE)."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")  # NVMLError if absent
    count = ctypes.c_uint(len(array))
    ret = fn(handle, ctypes.byref(count), array)
    if ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        return -int(count.value)
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return int(count.value)


# ---- Field values: one prepared request array per GPU, decoded in one pass ------------------------

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


def get_field_values(handle: Any, array: Any) -> Any:
    """nvmlDeviceGetFieldValues into a request array prepared once per GPU: pynvml's wrapper
    rebuilds the array member by member on every call, most of the cost at 100+ fields a GPU."""
    ret = pynvml.nvmlLib.nvmlDeviceGetFieldValues(handle, ctypes.c_int32(len(array)), ctypes.byref(array))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return array


# A pynvml whose structure differs from nvml.h's could not be decoded this way: no field values then.
FIELD_LAYOUT_MATCHES: Final = ctypes.sizeof(pynvml.c_nvmlFieldValue_t) == _FIELD_VALUE.size


def decode_field_values(raw: Any) -> list[tuple[int, int | float | None]]:
    """(nvmlReturn, value) per entry; the value is None unless nvmlReturn is NVML_SUCCESS."""
    rets, values = decode_columns(raw)
    return [(ret, value if ret == pynvml.NVML_SUCCESS else None) for ret, value in zip(rets, values, strict=True)]


def decode_columns(raw: Any) -> tuple[tuple[int, ...], tuple[int | float | None, ...]]:
    """Every entry's nvmlReturn, and its value (meaningless where nvmlReturn is not NVML_SUCCESS),
    in three C calls whatever the count: the array's bytes unpacked at once, and the values'
    unions joined and unpacked at once by a layout made of their types (kept per set of types: a
    GPU asks the same fields every tick). Per entry in Python only where a type is unknown."""
    count = len(raw)
    if not FIELD_LAYOUT_MATCHES:
        return (pynvml.NVML_ERROR_UNKNOWN,) * count, (None,) * count
    layout = _ARRAYS.get(count)
    if layout is None:
        layout = _ARRAYS[count] = struct.Struct("=" + "IIqqII8s" * count)
    flat = layout.unpack(bytes(raw))
    kinds, rets, unions = flat[4::7], flat[5::7], flat[6::7]
    values_layout = _UNIONS.get(kinds)
    if values_layout is None:
        if not all(0 <= kind < len(_UNION_CODES) for kind in kinds):  # a type this pynvml predates
            return rets, tuple(
                _VALUE_TYPES[kind].unpack_from(union)[0] if 0 <= kind < len(_VALUE_TYPES) else None
                for kind, union in zip(kinds, unions, strict=True)
            )
        if len(_UNIONS) >= _UNION_LAYOUTS_KEPT:
            _UNIONS.clear()
        values_layout = _UNIONS[kinds] = struct.Struct("=" + "".join(_UNION_CODES[kind] for kind in kinds))
    return rets, values_layout.unpack(b"".join(unions))


# Each nvmlValueType_t's 8-byte union as a struct code (the value first, padded to 8 bytes).
_UNION_CODES: Final = tuple(
    code + "x" * (8 - struct.calcsize("=" + code))
    for code in ("d", "I", "Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "I", "Q", "q", "i", "H")
)
_ARRAYS: dict[int, struct.Struct] = {}  # the array's layout by its length
_UNIONS: dict[tuple[int, ...], struct.Struct] = {}  # the values' layout by their types
_UNION_LAYOUTS_KEPT: Final = 64  # a node's GPUs ask a few sets of fields; more is a changing set
