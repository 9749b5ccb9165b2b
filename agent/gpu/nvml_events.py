"""NVML's event sets: which GPUs report XID and double-bit ECC events, and waiting for the next one
(``events.py`` runs the thread that waits)."""

from __future__ import annotations

import ctypes
import time
from typing import Any, Final

import pynvml

from nodeagent.agent.gpu.nvml_handle import GpuHandle
from nodeagent.agent.gpu.nvml_library import enter_call, leave_call, system_call
from nodeagent.agent.gpu.nvml_types import GpuEvent

EVENT_XID: Final = int(pynvml.nvmlEventTypeXidCriticalError)
EVENT_DOUBLE_BIT_ECC: Final = int(pynvml.nvmlEventTypeDoubleBitEccError)
NO_INSTANCE: Final = 0xFFFFFFFF  # an event's or process's instance id on a GPU without MIG


class EventSet:
    """An NVML event set: register GPUs, then ``wait`` (from one thread) for their events."""

    __slots__ = ("_set",)

    def __init__(self, handle: Any) -> None:
        self._set = handle

    @classmethod
    def create(cls) -> EventSet | None:
        handle = system_call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        return None if handle is None else cls(handle)

    def register(self, gpu: GpuHandle, event_types: int) -> int:
        """Register the wanted ``event_types`` this GPU supports; returns those registered."""
        # Through the GPU's own boundary, so its errors are taken as every other query's.
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
        if self._set is None or not enter_call("nvmlEventSetWait_v2"):
            return None
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError:
            return None
        finally:
            leave_call()
        handle_id = int(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        return GpuEvent(
            handle_id, int(data.eventType), int(data.eventData), time.time(),
            None if gi == NO_INSTANCE else gi, None if ci == NO_INSTANCE else ci,
        )  # fmt: skip

    def free(self) -> None:
        if self._set is not None:
            handle, self._set = self._set, None
            system_call("nvmlEventSetFree", lambda: pynvml.nvmlEventSetFree(handle))
