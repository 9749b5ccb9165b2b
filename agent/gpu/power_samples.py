"""A GPU's instantaneous draw read between ticks, for GPUs without GPM.

On a GPU without GPM (A100, A10, L40S, T4) NVML utilization reads ~100% while the GPU waits in
a collective (NCCL's kernel stays resident), so only power tells waiting from computing. A
training step computes and waits in sub-second phases: a report's mean draw (``power_watts``,
the energy counter) averages them out. So between ticks the GPU's own reader thread
(``deadlines.GpuReader``) reads the instantaneous draw every ``gpu_power_sample_seconds`` (0.1 s
by default; ``Gpu.power_instant_mw``: field 186, else nvmlDeviceGetPowerUsage, which GA100
answers near-instantly), and the tick's sample carries what it read since the previous one
(``power_samples_watts``); the collector learns the computing and resting draws from them
(``core/detector/power_share.py``).

Bounded, and behind the per-GPU deadlines: the reads run on the GPU's own thread, so a call that
hangs is watched and abandoned like any of the tick's (the GPU turns ``unresponsive``, and no
read is tried while it is); at most ``LIMIT`` readings wait for a tick (a long interval keeps the
newest). The reads and the tick's drain share the thread: no lock. GPUs with GPM (SM activity
tells) and GPUs in MIG mode (the draw is every tenant's) are not sampled, and a GPU without GPM
only while a process runs on it (the tick's process list turns the reads on and off,
``GpuSource._power_while_busy``): an idle GPU's draw says nothing the report's mean does not, and
the collector learns computing and resting draws from a job's steps. No estimate of the power
counter's regime (its update period and averaging window) exists in the agent yet, so the period
is the configured one, not one learned per GPU.
"""

from __future__ import annotations

from typing import Final

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.v1 import nodeagent_pb2 as pb

LIMIT: Final = 256  # readings kept for one tick: 25 s at 0.1 s


class PowerSamples:
    """One GPU's readings since its last tick."""

    __slots__ = ("_gpu", "_watts")

    def __init__(self, gpu: Gpu) -> None:
        self._gpu = gpu
        self._watts: list[float] = []

    def read(self) -> None:
        """One reading, on the GPU's reader thread between ticks."""
        milliwatts = self._gpu.power_instant_mw()
        if milliwatts is None:
            return
        if len(self._watts) >= LIMIT:
            del self._watts[0]
        self._watts.append(milliwatts / 1000.0)

    def drain_into(self, sample: pb.GpuSample) -> None:
        """The readings since the last tick into its sample (on the same thread)."""
        if self._watts:
            sample.power_samples_watts.extend(self._watts)
            self._watts.clear()


def wanted(info: pb.GpuInfo, in_mig_mode: bool) -> bool:
    """Whether a GPU may be sampled between ticks (while a process runs on it): no GPM, not split
    into MIG instances."""
    return not info.gpm_supported and not in_mig_mode
