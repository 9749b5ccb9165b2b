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
``tick_sample.power_while_busy``): an idle GPU's draw says nothing the report's mean does not, and
the collector learns computing and resting draws from a job's steps. What the readings are
(instantaneous, a moving mean, not the draw at all) is judged from them by ``power_regime.py``,
fed at each drain.
"""

from __future__ import annotations

import time
from typing import Final

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.power_regime import PowerRegime
from nodeagent.v1 import nodeagent_pb2 as pb

LIMIT: Final = 256  # readings kept for one tick: 25 s at 0.1 s
GAP_SECONDS: Final = 2.5  # reads further apart than this (off while idle, a GPU that hung) break a hold
_POWER_USAGE: Final = "nvmlDeviceGetPowerUsage"
_POWER_INSTANT: Final = (186, 0)
_now = time.monotonic  # the readings' clock (a test may scale it)


class PowerSamples:
    """One GPU's readings since its last tick, and how long each value held before it changed
    (for ``power_regime``: a moving mean holds its value until the sensor's next update)."""

    __slots__ = ("_changed_at", "_changes", "_gpu", "_hold_sq", "_hold_sum", "_holds", "_last", "_last_at", "_watts")

    def __init__(self, gpu: Gpu) -> None:
        self._gpu = gpu
        self._watts: list[float] = []
        self._last = -1.0  # the last reading, in watts
        self._last_at = -GAP_SECONDS  # when it was read (monotonic)
        self._changed_at = -1.0  # when the reading last changed; -1: not since the reads (re)started
        self._changes = 0
        self._holds = 0
        self._hold_sum = 0.0
        self._hold_sq = 0.0

    def read(self) -> None:
        """One reading, on the GPU's reader thread between ticks."""
        milliwatts = self._gpu.power_instant_mw()
        if milliwatts is None:
            return
        now = _now()
        watts = milliwatts / 1000.0
        if now - self._last_at > GAP_SECONDS:
            self._changed_at = -1.0  # a gap: no hold spans it
        elif watts != self._last:
            self._changes += 1
            if self._changed_at >= 0:
                hold = now - self._changed_at
                self._holds += 1
                self._hold_sum += hold
                self._hold_sq += hold * hold
            self._changed_at = now
        self._last, self._last_at = watts, now
        if len(self._watts) >= LIMIT:
            del self._watts[0]
        self._watts.append(watts)

    def drain_into(self, sample: pb.GpuSample, regime: PowerRegime) -> float | None:
        """The readings since the last tick into its sample and before the regime (on the same
        thread); their mean, None without any."""
        watts = self._watts
        if not watts:
            return None
        sample.power_samples_watts.extend(watts)
        mean = regime.observe(watts, self._changes, self._holds, self._hold_sum, self._hold_sq)
        watts.clear()
        self._changes = self._holds = 0
        self._hold_sum = self._hold_sq = 0.0
        return mean

    @property
    def unreadable(self) -> bool:
        """Neither field 186 nor ``nvmlDeviceGetPowerUsage`` answers on this GPU."""
        gpu = self._gpu
        return _POWER_INSTANT in gpu.unsupported_fields and _POWER_USAGE in gpu.unsupported


def wanted(info: pb.GpuInfo, in_mig_mode: bool) -> bool:
    """Whether a GPU may be sampled between ticks (while a process runs on it): no GPM, not split
    into MIG instances."""
    return not info.gpm_supported and not in_mig_mode
