"""NVML reads over an interval rather than at a tick: GPM counters (a sample buffer filled each tick,
metrics over the interval between two), and the instantaneous power read every 0.1 s between ticks
(``power_samples.py``).

Errors are taken as ``nvml_handle.py`` says.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Final

import pynvml

from nodeagent.agent.gpu.nvml_handle import GpuHandle
from nodeagent.agent.gpu.nvml_library import system_call
from nodeagent.agent.gpu.nvml_readings import decode_field_values, get_field_values

_POWER_INSTANT: Final = (186, 0)  # NVML_FI_DEV_POWER_INSTANT (fields.FI_POWER_INSTANT), scope 0


class GpmSample:
    """An NVML GPM sample buffer. Allocate once and refill it every tick (``Gpu.gpm_sample``);
    ``free`` gives it back."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer

    @classmethod
    def alloc(cls) -> GpmSample | None:
        buffer = system_call("nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc)
        return None if buffer is None else cls(buffer)

    def free(self) -> None:
        if self.buffer is not None:
            buffer, self.buffer = self.buffer, None
            system_call("nvmlGpmSampleFree", lambda: pynvml.nvmlGpmSampleFree(buffer))


class IntervalSamples(GpuHandle):
    """A GPU's power between ticks and its GPM counters (Hopper and newer; per MIG instance too)."""

    __slots__ = ()

    def power_instant_mw(self) -> int | None:
        """power.draw.instant in milliwatts, between ticks (``power_samples.py``): field 186
        (NVML_FI_DEV_POWER_INSTANT) in a request of its own, so the tick's prepared array is not
        rebuilt; where the driver lacks it, nvmlDeviceGetPowerUsage (near-instant on GA100, a 1 s
        mean on later GPUs)."""
        if _POWER_INSTANT not in self.unsupported_fields:
            if self._power_request is None:
                self._power_request = (pynvml.c_nvmlFieldValue_t * 1)()
                self._power_request[0].fieldId, self._power_request[0].scopeId = _POWER_INSTANT
            raw = self._query("nvmlDeviceGetFieldValues", get_field_values, self._power_request)
            if raw is None:
                return None
            ret, value = decode_field_values(raw)[0]
            if ret == pynvml.NVML_SUCCESS and value is not None:
                return int(value)
            if ret == pynvml.NVML_ERROR_NOT_SUPPORTED:
                self.unsupported_fields.add(_POWER_INSTANT)
            elif ret == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
            return None
        usage = self._query("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage)
        return None if usage is None else int(usage)

    def gpm_sample(self, sample: GpmSample) -> bool:
        """Fill ``sample`` with this GPU's GPM counters now; False when it could not."""
        if sample.buffer is None:
            return False

        def take(handle: Any) -> bool:
            pynvml.nvmlGpmSampleGet(handle, sample.buffer)
            return True

        return self._query("nvmlGpmSampleGet", take) is not None

    def gpm_mig_sample(self, gpu_instance_id: int, sample: GpmSample) -> bool:
        """Fill ``sample`` with one MIG GPU instance's GPM counters (asked of the GPU itself)."""
        if sample.buffer is None:
            return False

        def take(handle: Any) -> bool:
            pynvml.nvmlGpmMigSampleGet(handle, gpu_instance_id, sample.buffer)
            return True

        return self._query("nvmlGpmMigSampleGet", take, what=f"nvmlGpmMigSampleGet {gpu_instance_id}") is not None

    def gpm_metrics(self, older: GpmSample, newer: GpmSample, metric_ids: Sequence[int]) -> dict[int, float]:
        """GPM metrics over the interval between two samples, by NVML_GPM_METRIC_* id."""
        request = _GpmMetricsGet(
            version=pynvml.NVML_GPM_METRICS_GET_VERSION, numMetrics=len(metric_ids),
            sample1=older.buffer, sample2=newer.buffer,
        )  # fmt: skip
        metrics = request.metrics
        for i, metric in enumerate(metric_ids):
            metrics[i].metricId = metric
        if self._query("nvmlGpmMetricsGet", get_gpm_metrics, request) is None:
            return {}
        return {
            metric: float(metrics[i].value)
            for i, metric in enumerate(metric_ids)
            if metrics[i].nvmlReturn == pynvml.NVML_SUCCESS
        }


# pynvml's GPM structures as plain ctypes ones, the same fields: pynvml's own run a Python hook on
# every member read or written (27 a GPU a tick for 9 metrics); these read them in C.
class _GpmMetric(ctypes.Structure):
    _fields_ = pynvml.c_nvmlGpmMetric_t._fields_


class _GpmMetricsGet(ctypes.Structure):
    _fields_ = [
        (name, _GpmMetric * pynvml.NVML_GPM_METRIC_MAX if name == "metrics" else kind)
        for name, kind in pynvml.c_nvmlGpmMetricsGet_t._fields_
    ]


def get_gpm_metrics(_handle: Any, request: _GpmMetricsGet) -> _GpmMetricsGet:
    """nvmlGpmMetricsGet into ``request``; NVMLError as pynvml's wrapper raises it."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlGpmMetricsGet")  # NVMLError if absent
    ret = fn(ctypes.byref(request))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return request
