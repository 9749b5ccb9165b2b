"""The state the steps of the detector's rule chain share for one GPU (``TrackState``): what it
is (its links, its computing-share source), the window's ring of steps, and each step's own
fields (the gate's, the idle share's, the causes', the state machine's). At the bottom of the
detector: the steps (``gate``, ``idle_share``, ``causes``, ``hysteresis``, ``waiting``) take it,
and ``gpu_track``'s ``GpuTrack`` runs them over it in their order."""

from __future__ import annotations

import math

from nodeagent.core.detector.computing_source import NOTHING
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.power_share import PowerTrack
from nodeagent.core.detector.step import Step
from nodeagent.core.quantities.units import pcie_bytes_per_second
from nodeagent.v1 import nodeagent_pb2 as pb


class TrackState:
    """One GPU's state as the steps of the rule chain share it (each step's fields under its
    comment); ``GpuTrack`` runs the steps over it."""

    def __init__(
        self, index: int, config: DetectorConfig, info: pb.GpuInfo | None, *, mig_instance: bool = False
    ) -> None:
        self.index = index
        self.config = config
        self.uuid = ""
        self.nvlink_bytes_per_second: float | None = None
        self.pcie_max_bytes_per_second: float | None = None
        self.gpm = self.info_gpm = False
        # The computing share from power, without GPM (``power_share``); not on a MIG instance
        # (its GPU's draw is all its tenants').
        self.mig_instance = mig_instance
        self.power = PowerTrack()
        self.reads_power = not mig_instance
        # Its computing-share source (``computing_source``): the agent's decision, else inferred
        # ("" where nothing is read: NVML utilization, as before); instantaneous readings once seen.
        self.source = ""
        # Its evidence in words, as last heard (the agent sends it when it says something new).
        self.source_reason = ""
        self.decided = False
        self.instant = True
        self.saw_samples = False
        self.report_seconds = 1.0
        # The window's estimate as of the last step (``estimate``), and the step it is of.
        self._estimate = NOTHING
        self._estimate_of = -1
        self.steps_closed = 0
        self.learn(info)
        # The window's ring and the open step's place in it.
        self.steps = [Step() for _ in range(config.window_steps + 1)]
        self.pos = 0
        # The gate's (step 1).
        self.assigned = False
        self.seen_unassigned = False
        self.assigned_since = -math.inf
        self.in_warmup = False
        self.lost = False
        self.last_seen = -math.inf
        self.jobs: tuple[str, ...] = ()
        # The idle share's held-apart gap (step 2).
        self.gap_run = 0.0
        self.gap_committed = False
        # Seconds counted since the last short gap ended (inf: none yet): a gap that comes back
        # within ``gap_seconds`` is the job's own step, not a pause, and counts.
        self.since_gap = math.inf
        # The last counters and PCIe link rate, for the link time and h2d share (step 3).
        self.counters: tuple[float, int | None, int | None, int | None, int | None] | None = None
        self.pcie_link_bytes_per_second: float | None = None
        # The state machine's (step 4).
        self.state = "busy"
        self.cause: str | None = None
        self.tier: str | None = None
        self.calm_seconds = 0.0
        self.last_eval: float | None = None
        self.window_counted_seconds = 0.0
        self.gpu_seconds_lost = 0.0
        # The last evaluation's span and what it added to gpu_seconds_lost, and the job the GPU
        # waits on ("" when it does not): what ``waiting`` counts a waiting GPU's loss by.
        self.last_since = 0.0
        self.step_lost = 0.0
        self.waiting_job = ""

    def learn(self, info: pb.GpuInfo | None) -> None:
        if info is None:
            return
        self.uuid = info.uuid or self.uuid
        if info.nvlink_count and info.HasField("nvlink_speed_bytes_per_second"):
            self.nvlink_bytes_per_second = info.nvlink_count * info.nvlink_speed_bytes_per_second
        if info.HasField("pcie_max_generation") and info.HasField("pcie_max_width"):
            self.pcie_max_bytes_per_second = pcie_bytes_per_second(info.pcie_max_generation, info.pcie_max_width)
        self.info_gpm = info.gpm_supported
        if not self.decided:
            self.gpm = self.info_gpm
        self.reads_power = not self.gpm and not self.mig_instance
