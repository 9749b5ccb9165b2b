"""Per process on a shared GPU: each process's share of the GPU's SM and memory time.

On a time-sliced GPU (the device plugin's ``nvidia.com/gpu.shared``, or processes that simply
share a board) the GPU's utilization is everyone's; ``nvmlDeviceGetProcessUtilization`` gives the
driver's samples per process (about six a second). Each tick asks for the samples since the last
one seen and sets, on every process of the report that had samples, the mean of its SM and memory
shares (``GpuProcess.sm_utilization_ratio``, ``memory_utilization_ratio``); a pod's share is the
sum of its processes' (``core/exposition/gpu_shares.py``). Asked only of GPUs with a process, and
not of a GPU in MIG mode (NVML does not support it there: each instance is its own GPU).
"""

from __future__ import annotations

from collections import defaultdict

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.v1 import nodeagent_pb2 as pb


class ProcessShares:
    """The newest sample time seen per GPU (by UUID), so each tick reads only new samples."""

    __slots__ = ("_seen_us",)

    def __init__(self) -> None:
        self._seen_us: dict[str, int] = {}

    def fill(self, gpu: Gpu, sample: pb.GpuSample) -> None:
        if not sample.processes or sample.mig_instances:
            return
        samples = gpu.process_utilization(self._seen_us.get(sample.uuid, 0))
        if not samples:
            return
        self._seen_us[sample.uuid] = max(s.timestamp_us for s in samples)
        sm: dict[int, list[float]] = defaultdict(list)
        memory: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            sm[s.pid].append(s.sm_ratio)
            memory[s.pid].append(s.memory_ratio)
        for process in sample.processes:
            shares = sm.get(process.pid)
            if shares:
                process.sm_utilization_ratio = min(1.0, sum(shares) / len(shares))
                process.memory_utilization_ratio = min(1.0, sum(memory[process.pid]) / len(shares))

    def retain(self, uuids: set[str]) -> None:
        for uuid in [u for u in self._seen_us if u not in uuids]:
            del self._seen_us[uuid]
