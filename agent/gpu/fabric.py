"""Each GPU's place in the NVLink fabric: the report's ``GpuFabric``, and a health event when what is
wrong with it changes. Asked with the GPU's slowly changing readings (``slow_readings.py``: at each
scan and every 30 s); every tick between carries the last answer.

On NVSwitch systems (HGX H100/B200, GB200/GB300 NVL72) a GPU that has not registered with the
fabric manager, or whose routes are unhealthy, cannot reach its peers at NVLink bandwidth while
``nvidia-smi`` and the per-link NVLink state may still look fine: this is where it shows. A GPU
that is not fabric-attached (PCIe boards, HGX A100) reports nothing: ``Gpu.fabric`` is None
once and never asked again. What the parts mean is ``core/wire/fabric.py``'s, shared with the
collector's alert and diag.
"""

from __future__ import annotations

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.core.wire.fabric import describe, fabric_message, fabric_problems, fabric_transients
from nodeagent.v1 import nodeagent_pb2 as pb


class FabricWatch:
    """What each GPU's fabric said last, so a change (and only a change) becomes an event."""

    __slots__ = ("_fabric", "_last")

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, ...]] = {}  # by GPU UUID: problems and repairs under way
        self._fabric: dict[str, pb.GpuFabric] = {}  # by GPU UUID: its last answer

    def read(self, gpu: Gpu, sample: pb.GpuSample, report: pb.NodeReport, *, ask: bool = True) -> None:
        """Set ``sample.fabric``: from NVML when ``ask``, else the GPU's last answer; add an event to
        ``report`` when the GPU's fabric turns bad, changes how it is bad, or recovers."""
        if not ask:
            last = self._fabric.get(sample.uuid)
            if last is not None:
                sample.fabric.CopyFrom(last)
            return
        info = gpu.fabric()
        if info is None:
            self._fabric.pop(sample.uuid, None)
            return
        fabric = fabric_message(
            info.state, info.status, info.cluster_uuid, info.clique_id, info.health_mask, info.health_summary
        )
        self._fabric[sample.uuid] = fabric
        sample.fabric.CopyFrom(fabric)
        problems, transients = fabric_problems(fabric), fabric_transients(fabric)
        now = (*problems, *transients)
        before = self._last.get(sample.uuid, ())
        self._last[sample.uuid] = now
        if now == before:
            return
        if problems:
            severity = "critical"
        elif transients:
            severity = "warning"
        else:
            severity = "info"
        said = describe(fabric) if problems else (", ".join(transients) + " under way" if transients else "healthy")
        report.events.add(
            time_unix_seconds=report.time_unix_seconds,
            kind="gpu_fabric",
            severity=severity,
            subject=f"gpu:{sample.index}",
            message=f"GPU {sample.index} NVLink fabric: {said}",
            attributes={
                "uuid": sample.uuid,
                "state": fabric.state,
                "problems": ",".join(now),
                "cluster_uuid": fabric.cluster_uuid,
                "clique_id": str(fabric.clique_id),
            },
        )

    def retain(self, uuids: set[str]) -> None:
        """Forget GPUs no longer on the node."""
        for uuid in [u for u in self._last if u not in uuids]:
            del self._last[uuid]
        for uuid in [u for u in self._fabric if u not in uuids]:
            del self._fabric[uuid]
