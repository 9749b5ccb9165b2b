"""One GPU's NVML handle, what NVML has told us it cannot do, and how an error on its calls is taken.

Every query on a GPU (``nvml_topology.py``, ``nvml_readings.py``, ``nvml_sampling.py``) goes
through ``GpuHandle._query``, and returns its value, or ``None``:

- NotSupported (or a function this driver lacks): ``None``, remembered for that GPU and that
  call or field, so it is not asked again every tick;
- GpuIsLost: ``None``, and ``gpu.lost`` is set; nothing more is asked of that GPU;
- ARGUMENT_VERSION_MISMATCH: ``None``, and the call is in ``gpu.mismatched`` (its caller may retry
  with an older structure);
- any other error: ``None`` for that value only (counted in ``gpu.errors``); asked again next tick.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable
from typing import Any, Self, TypeVar

import pynvml

from nodeagent.agent.gpu.nvml_library import enter_call, leave_call

_T = TypeVar("_T")
FieldKey = tuple[int, int]  # (NVML_FI_* id, scopeId)


class GpuHandle:
    """One GPU's handle, and what NVML has told us it cannot do. Every field of every query family
    is here (``__slots__``): the families are mixins without state of their own (``nvml_gpu.Gpu``)."""

    __slots__ = (
        "_fabric_struct", "_power_request", "_procs", "_request", "errors", "handle", "index", "lost",
        "mismatched", "unsupported", "unsupported_fields",
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
        self._fabric_struct = 0  # which of nvml_topology's fabric structures this driver takes
        self._power_request: Any = None  # the one-field request of ``power_instant_mw``, kept apart
        self._procs: Any = None  # the process array of ``processes``, grown when too small

    @classmethod
    def open(cls, index: int) -> Self | None:
        """The GPU at ``index``; a lost one comes back with ``lost`` set, a failed lookup as None."""
        if not enter_call("nvmlDeviceGetHandleByIndex_v2"):
            return None
        try:
            return cls(index, pynvml.nvmlDeviceGetHandleByIndex(index))
        except pynvml.NVMLError as err:
            return cls(index, None) if err.value == pynvml.NVML_ERROR_GPU_IS_LOST else None
        finally:
            leave_call()

    @property
    def handle_id(self) -> int:
        return int(ctypes.cast(self.handle, ctypes.c_void_p).value or 0) if self.handle is not None else 0

    def _query(self, symbol: str, fn: Callable[..., _T], *args: Any, what: str | None = None) -> _T | None:
        # ``what`` names the query when one symbol answers several (clock types): a GPU that has
        # no memory clock still has an SM clock.
        what = what or symbol
        if self.lost or what in self.unsupported or not enter_call(symbol):
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
            leave_call()
