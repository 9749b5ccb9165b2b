"""A GPU's instantaneous draw read between ticks, for GPUs without GPM.

On a GPU without GPM (A100, A10, L40S, T4) NVML utilization reads ~100% while the GPU waits in
a collective (NCCL's kernel stays resident), so only power tells waiting from computing. A
training step computes and waits in sub-second phases: a report's mean draw (``power_watts``,
the energy counter) averages them out. So between ticks the readers' shared sampler thread
(``power_sampler.py``, through the GPU reader's ``between`` hook) reads the instantaneous draw
every ``gpu_power_sample_seconds`` (0.1 s by default; ``Gpu.power_instant_mw``: field 186, else
nvmlDeviceGetPowerUsage, which GA100 answers near-instantly), and the tick's sample carries
what it read since the previous one (``power_samples_watts``); the collector learns the computing
and resting draws from them (``core/detector/power_share.py``).

Bounded, and behind the per-GPU deadlines: every sampled GPU is read in turn on one shared thread
(``power_sampler.py``, one wake-up a period for all of them), whose read in flight the tick
watches like its own calls (a GPU whose read hangs turns ``unresponsive``, no read is tried while
it is, and the others go on being read); at most ``LIMIT`` readings wait for a tick (a long
interval keeps the newest). The reads and the tick's drain run on different threads: a lock
around the readings. GPUs with GPM (SM activity tells) and GPUs in MIG mode (the draw is every
tenant's) are not sampled, and a GPU without GPM only while a process runs on it (the tick's
process list turns the reads on and off, ``tick_sample.power_while_busy``): an idle GPU's draw
says nothing the report's mean does not, and the collector learns computing and resting draws
from a job's steps. What the readings are (instantaneous, a moving mean, not the draw at all) is
judged from them by ``power_regime.py``, fed at each drain.

Only where that regime makes sub-second readings tell (``PowerRegime.tells_per_report``): once a
job's readings have shown a moving mean with the energy counter advancing (the collector then
takes each report's draw from the counter and never looks at the readings) or readings that are
not the draw (``energy``), the GPU rests: no read for ``PROBE_EVERY_SECONDS``, then a probe of at
least ``PROBE_SECONDS`` at the full rate re-checks the regime (it rests again, or, where the
probe's spans vote otherwise, sampling goes on). A job's first ``PROBE_SECONDS`` always sample, to
decide it; a job whose draw never varies enough to vote keeps the model's prior and rests after
``UNDECIDED_SECONDS`` where that prior is a moving mean; a GPU that answers no power read at all
rests at once. Instantaneous readings (GA100, or any
board whose spans vote so) are read every period for as long as the job runs: the collector
needs ``MIN_SUBSAMPLES`` a report (``core/detector/power_share.py``).
"""

from __future__ import annotations

import threading
import time
from typing import Final

from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.power_regime import PowerRegime
from nodeagent.v1 import nodeagent_pb2 as pb

LIMIT: Final = 256  # readings kept for one tick: 25 s at 0.1 s
GAP_SECONDS: Final = 2.5  # reads further apart than this (off while idle, a GPU that hung) break a hold
_POWER_USAGE: Final = "nvmlDeviceGetPowerUsage"
_POWER_INSTANT: Final = (186, 0)
# A GPU whose readings tell nothing between reports rests this long between probes, and a probe
# (and a job's first readings) lasts at least PROBE_SECONDS: a span's vote needs 2 to 13 s of
# readings, the energy check 10 s.
PROBE_EVERY_SECONDS: Final = 300.0
PROBE_SECONDS: Final = 15.0
# A job whose draw casts no vote (flat) keeps the model's prior; where that is a moving mean the
# GPU rests after this long.
UNDECIDED_SECONDS: Final = 60.0
_now = time.monotonic  # the readings' clock (a test may scale it)


class PowerSamples:
    """One GPU's readings since its last tick, and how long each value held before it changed
    (for ``power_regime``: a moving mean holds its value until the sensor's next update)."""

    __slots__ = (
        "_changed_at", "_changes", "_gpu", "_hold_sq", "_hold_sum", "_holds", "_last", "_last_at", "_lock",
        "_rest_until", "_stretch_from", "_watts", "reads",
    )  # fmt: skip

    def __init__(self, gpu: Gpu) -> None:
        self._gpu = gpu
        self._lock = threading.Lock()  # the sampler's reads against the tick's drain
        self._rest_until = 0.0  # while resting (readings' clock): when the next probe begins; 0: sampling
        self._stretch_from = -1.0  # when this stretch of readings began (a job's start, a probe's); -1: no job
        self.reads = 0  # power reads made (for tests: counts, not times)
        self._watts: list[float] = []
        self._last = -1.0  # the last reading, in watts
        self._last_at = -GAP_SECONDS  # when it was read (monotonic)
        self._changed_at = -1.0  # when the reading last changed; -1: not since the reads (re)started
        self._changes = 0
        self._holds = 0
        self._hold_sum = 0.0
        self._hold_sq = 0.0

    def read(self) -> float | None:
        """One reading, on the sampler's thread between ticks; while the GPU rests, none, and when
        the next probe begins (``time.monotonic``, the sampler's clock)."""
        rest_until = self._rest_until
        if rest_until:
            left = rest_until - _now()
            if left > 0:
                return time.monotonic() + left
        self.reads += 1
        milliwatts = self._gpu.power_instant_mw()
        if milliwatts is None:
            return None
        watts = milliwatts / 1000.0
        with self._lock:
            self._keep(watts, _now())
        return None

    def _keep(self, watts: float, now: float) -> None:
        """A reading kept for the tick, and how long the previous value held (under the lock)."""
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
        """The readings since the last tick into its sample and before the regime (on the tick's
        thread), then whether the GPU reads on or rests; their mean, None without any."""
        with self._lock:
            watts = self._watts
            if not watts:
                mean = None
            else:
                sample.power_samples_watts.extend(watts)
                mean = regime.observe(watts, self._changes, self._holds, self._hold_sum, self._hold_sq)
                watts.clear()
                self._changes = self._holds = 0
                self._hold_sum = self._hold_sq = 0.0
        self._plan(regime, bool(sample.processes), _now())
        return mean

    def _plan(self, regime: PowerRegime, busy: bool, now: float) -> None:
        """Whether the GPU reads on or rests, after the tick's readings (``PROBE_EVERY_SECONDS``)."""
        if not busy:  # no job: the next one samples its first seconds afresh
            self._stretch_from, self._rest_until = -1.0, 0.0
            return
        rest_until = self._rest_until
        if rest_until:
            if now < rest_until:
                return
            self._stretch_from, self._rest_until = rest_until, 0.0  # a probe, since the rest ended
        elif self._stretch_from < 0:
            self._stretch_from = now
        stretch = now - self._stretch_from
        if self.unreadable or (
            stretch >= PROBE_SECONDS and regime.tells_per_report(undecided=stretch >= UNDECIDED_SECONDS)
        ):
            self._rest_until = now + PROBE_EVERY_SECONDS
            regime.forget_span()  # the probe's readings start a span of their own

    @property
    def resting(self) -> bool:
        """No reads until the next probe: the regime makes sub-second readings tell nothing."""
        return self._rest_until > _now()

    @property
    def unreadable(self) -> bool:
        """Neither field 186 nor ``nvmlDeviceGetPowerUsage`` answers on this GPU."""
        gpu = self._gpu
        return _POWER_INSTANT in gpu.unsupported_fields and _POWER_USAGE in gpu.unsupported


def wanted(info: pb.GpuInfo, in_mig_mode: bool) -> bool:
    """Whether a GPU may be sampled between ticks (while a process runs on it): no GPM, not split
    into MIG instances."""
    return not info.gpm_supported and not in_mig_mode
