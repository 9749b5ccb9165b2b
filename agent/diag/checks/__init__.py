"""The checks, one module per area, run in this order: ``gpu`` (with ``gpu_pcie`` and
``gpu_readings``, readings the rest of the GPU contradicts), ``nvlink``, ``fabric`` (the NVLink
fabric), ``nic``, ``rdma``, ``storage``, ``host``; beside them ``xid`` (from the kernel log) and
``collector`` (the collector's health service, a warning when unreachable). Each area is a
function from the `DiagContext` (``context``: what each is given) to its results; an area that
raises loses only its own results."""

from __future__ import annotations

from collections.abc import Callable

from nodeagent.agent.diag.checks import fabric, gpu, host, nic, nvlink, rdma, storage
from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import CheckResult

Area = Callable[[DiagContext], list[CheckResult]]

AREAS: tuple[tuple[str, Area], ...] = (
    ("gpu", gpu.run),
    ("nvlink", nvlink.run),
    ("fabric", fabric.run),
    ("nic", nic.run),
    ("rdma", rdma.run),
    ("storage", storage.run),
    ("host", host.run),
)

__all__ = ["AREAS", "Area", "DiagContext"]
