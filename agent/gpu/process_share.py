"""Per process on a shared GPU: each process's share of the GPU's SM and memory time.

On a time-sliced GPU (the device plugin's ``nvidia.com/gpu.shared``, or processes that simply
share a board) the GPU's utilization is everyone's; ``nvmlDeviceGetProcessUtilization`` gives the
driver's samples per process (about six a second). Each read (one tick of a round,
``round_readings``) asks for the samples since the last one seen, and every tick until the next
read sets, on every process of the report that had samples, the mean of its SM and memory shares
(``GpuProcess.sm_utilization_ratio``, ``memory_utilization_ratio``); a pod's share is the sum of
its processes' (``core/exposition/gpu_shares.py``). Asked only of GPUs with a process, and
not of a GPU in MIG mode (NVML does not support it there: each instance is its own GPU).
"""

from __future__ import annotations

from collections import defaultdict

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.v1 import nodeagent_pb2 as pb


class ProcessShares:
    """The newest sample time seen per GPU (by UUID), so each read takes only new samples, and the
    shares it gave, which the ticks between reads carry (``round_readings``: a read every few ticks)."""

    __slots__ = ("_seen_us", "_shares")

    def __init__(self) -> None:
        self._seen_us: dict[str, int] = {}
        self._shares: dict[str, dict[int, tuple[float, float]]] = {}

    def fill(self, gpu: Gpu, sample: pb.GpuSample, *, read: bool = True) -> None:
        """Each process's share into ``sample``: read now when ``read``, else the last read's."""
        if not sample.processes or sample.mig_instances:
            return
        if read:
            self._read(gpu, sample.uuid)
        shares = self._shares.get(sample.uuid)
        if not shares:
            return
        for process in sample.processes:
            got = shares.get(process.pid)
            if got is not None:
                process.sm_utilization_ratio, process.memory_utilization_ratio = got

    def _read(self, gpu: Gpu, uuid: str) -> None:
        samples = gpu.process_utilization(self._seen_us.get(uuid, 0))
        if not samples:
            self._shares.pop(uuid, None)  # no new sample: no share until the next read has one
            return
        self._seen_us[uuid] = max(s.timestamp_us for s in samples)
        sm: dict[int, list[float]] = defaultdict(list)
        memory: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            sm[s.pid].append(s.sm_ratio)
            memory[s.pid].append(s.memory_ratio)
        self._shares[uuid] = {
            pid: (min(1.0, sum(ratios) / len(ratios)), min(1.0, sum(memory[pid]) / len(ratios)))
            for pid, ratios in sm.items()
        }

    def retain(self, uuids: set[str]) -> None:
        for uuid in [u for u in self._seen_us if u not in uuids]:
            del self._seen_us[uuid]
        for uuid in [u for u in self._shares if u not in uuids]:
            del self._shares[uuid]
