"""One report's GPUs added to their open minutes: the per-report loop of the history
(``node_history.py``), its sums field by field inlined on purpose (a call per field per GPU per
report would be the ingest path's cost)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from nodeagent.collector.history.minutes import GPU_VALUES, INDEX
from nodeagent.collector.history.open_minute import OpenMinute
from nodeagent.core.detector.verdict import GpuVerdict
from nodeagent.core.quantities.rates import increase_across_reset
from nodeagent.v1 import nodeagent_pb2 as pb

_UTIL, _UTIL_MIN, _SM, _MEM, _POWER, _TEMP = (INDEX[n] for n in GPU_VALUES)
_RATIO: Final = INDEX["starvation_ratio"]
_LOST: Final = INDEX["gpu_seconds_lost"]


def add_gpus(
    report: pb.NodeReport, verdicts: Mapping[int, GpuVerdict], accs: dict[int, OpenMinute],
    acc_for: Callable[[int], OpenMinute], lost: dict[int, float], node_sums: list[float],
) -> tuple[float, float, int]:  # fmt: skip
    """Each GPU's readings and verdict into its minute; ``lost``: each GPU's detector count so
    far (updated). The GPU-seconds lost this report, and the utilization sum and GPU count the
    node row's mean is made of; the node's lowest utilization goes into ``node_sums``."""
    time = report.time_unix_seconds
    lost_total = 0.0
    util_sum, util_gpus = 0.0, 0
    for gpu in report.gpus:
        index = gpu.index
        acc = accs.get(index) or acc_for(index)
        acc.samples += 1
        acc.last_time = time
        sums, counts = acc.sums, acc.counts
        if gpu.HasField("utilization_gpu_ratio"):
            util = gpu.utilization_gpu_ratio
            sums[_UTIL] += util
            counts[_UTIL] += 1
            counts[_UTIL_MIN] += 1
            sums[_UTIL_MIN] = min(sums[_UTIL_MIN], util)
            util_sum += util
            util_gpus += 1
            node_sums[_UTIL_MIN] = min(node_sums[_UTIL_MIN], util)
        if gpu.HasField("sm_active_ratio"):
            sums[_SM] += gpu.sm_active_ratio
            counts[_SM] += 1
        if gpu.HasField("memory_used_bytes"):
            sums[_MEM] += gpu.memory_used_bytes
            counts[_MEM] += 1
        if gpu.HasField("power_watts"):
            sums[_POWER] += gpu.power_watts
            counts[_POWER] += 1
        if gpu.HasField("temperature_celsius"):
            sums[_TEMP] += gpu.temperature_celsius
            counts[_TEMP] += 1
        v = verdicts.get(index)
        if v is not None:
            acc.state, acc.cause = v.state, v.cause or ""
            if v.state == "waiting":
                acc.waiting_on = str(v.evidence.get("waiting_on", ""))
            if v.jobs:  # the minute's jobs: the last that held the GPU in it (``_hold``: how long)
                acc.jobs = v.jobs
            if v.starvation_ratio is not None:
                sums[_RATIO] = v.starvation_ratio
                counts[_RATIO] += 1
            # The detector's count is cumulative since it started; a lower one is a new detector.
            # Unchanged (a GPU that lost nothing this report, the most of them) it adds nothing.
            count, before = v.gpu_seconds_lost, lost.get(index, 0.0)
            counts[_LOST] += 1
            if count != before:
                delta = increase_across_reset(before, count)
                lost[index] = count
                sums[_LOST] += delta
                lost_total += delta
    return lost_total, util_sum, util_gpus
