"""NVML the library: its lifetime, the versioned calls this driver gets, and every call's accounting.

One of the few modules that import ``pynvml`` (``tests/agent/gpu/test_gpu_nvml_surface.py`` names
them): this one, ``nvml_handle.py`` (one GPU's handle and how its errors are taken),
``nvml_topology.py`` (what a scan reads), ``nvml_readings.py`` (what a tick reads),
``nvml_sampling.py`` (GPM and the power read between ticks) and ``nvml_events.py`` (XID and ECC
events); ``nvml_gpu.py`` puts a GPU's queries together. No ``NVMLError`` leaves them.

Modelled on nvitop's ``libnvml``: NVML is initialized lazily behind a lock and shut down at exit
(after in-flight calls drain, so a thread blocked in ``nvmlEventSetWait`` cannot race the
shutdown), and the versioned forms of calls are chosen in one marked section below.

``init()`` returns why NVML is unusable ("no NVIDIA driver (libnvidia-ml.so.1 not found)") or "".
Every C call goes through ``enter_call``/``leave_call`` and is counted by symbol (``call_counts()``)
so benchmarks can print calls per tick, and watched per thread so ``deadlines.py`` can name a call
that hangs.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, TypeVar

import pynvml

from nodeagent.agent.gpu.nvml_types import DriverInfo

_T = TypeVar("_T")

# Every C symbol of libnvidia-ml.so.1 the nvml_* modules can reach (tests check the fake exports each).
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
        # made since its last reset, and the threads whose calls were abandoned (no new call starts),
        # each with its Thread: an ended thread's id is given to the next thread started, which must
        # not inherit the abandonment (it silenced a later event thread that way).
        self.in_flight: dict[int, tuple[str, float]] = {}
        self.slowest: dict[int, tuple[str, float]] = {}
        self.abandoned: dict[int, threading.Thread | None] = {}


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


def variant_call(purpose: str) -> tuple[str, Callable[..., Any]]:
    """The C symbol chosen for ``purpose`` and the pynvml call that makes it."""
    symbol = variant(purpose)
    return symbol, _VARIANT_CALLS[symbol]


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
        _session.abandoned.pop(ident, None)


def call_in_flight(thread_id: int) -> tuple[str, float] | None:
    """(C symbol, monotonic start) of the call ``thread_id`` is inside now, or None."""
    with _session.lock:
        return _session.in_flight.get(thread_id)


def slowest_call(thread_id: int) -> tuple[str, float] | None:
    """(C symbol, seconds) of the slowest finished call of ``thread_id`` since its ``watch_reset``."""
    with _session.lock:
        return _session.slowest.get(thread_id)


def abandon(thread_id: int) -> None:
    """No new NVML call starts on ``thread_id`` (each returns None) until it calls ``watch_reset``
    or ends: a thread started later under the same id is not abandoned."""
    thread = next((t for t in threading.enumerate() if t.ident == thread_id), None)  # rare: an overrun
    with _session.lock:
        _session.abandoned[thread_id] = thread


def enter_call(symbol: str) -> bool:
    """Before each C call: False when it must not be made (NVML not running, shutting down, or
    this thread abandoned); else it is counted and watched until ``leave_call``."""
    s = _session
    ident = threading.get_ident()
    with s.lock:
        if not s.initialized or s.shutting_down:
            return False
        if ident in s.abandoned:
            if s.abandoned[ident] is threading.current_thread():
                return False
            del s.abandoned[ident]  # abandoned a thread that ended; this one only has its id
        s.active_calls += 1
        s.calls[symbol] += 1
        s.in_flight[ident] = (symbol, time.monotonic())
        return True


def leave_call() -> None:
    """After each C call that ``enter_call`` let through, whatever it returned or raised."""
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


def system_call(symbol: str, fn: Callable[[], _T]) -> _T | None:
    """A call not about one GPU (the driver, a GPM buffer, an event set): its value, or None on any
    error."""
    if not enter_call(symbol):
        return None
    try:
        return fn()
    except pynvml.NVMLError:
        return None
    finally:
        leave_call()


# ---- The system ----------------------------------------------------------------------------------


def device_count() -> int | None:
    return system_call("nvmlDeviceGetCount_v2", lambda: int(pynvml.nvmlDeviceGetCount()))


def driver_info() -> DriverInfo:
    cuda_symbol, cuda_call = variant_call("cuda_driver_version")
    return DriverInfo(
        driver_version=text(system_call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)),
        nvml_version=text(system_call("nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion)),
        cuda_driver_version=system_call(cuda_symbol, cuda_call),
    )


def text(value: object) -> str:
    """An NVML string (bytes from older pynvml) as text; "" for none."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else "" if value is None else str(value)


def optional_text(value: object) -> str | None:
    return None if value is None else text(value)
