"""A simulated training node in virtual time: ``step(dt)`` gives the next ``NodeReport``,
``truth()`` what the node is really doing (the labels the detector is scored against).

Deterministic: the same scenario, overrides, node id and seed give the same reports.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.tools.simulator import model
from nodeagent.tools.simulator.emit import Activity, NodeHardware
from nodeagent.tools.simulator.scenarios import Params, Scenario, find_scenario
from nodeagent.v1 import nodeagent_pb2 as pb

# 2026-01-01T00:00:00Z: traces recorded from the simulator start here unless told otherwise.
DEFAULT_START_TIME: Final = 1_767_225_600.0
_BACKGROUND_RX_BYTES_PER_SECOND: Final = 200_000.0
_BACKGROUND_TX_BYTES_PER_SECOND: Final = 100_000.0
_IDLE_MEMORY_BYTES: Final = 512 << 20
_ACCOUNT_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")


@dataclass(frozen=True, slots=True)
class GpuTruth:
    index: int
    # "idle", "warmup", "busy", "starved", "throttled"
    state: str
    # "network", "storage", "cpu", "h2d", "interconnect", "unknown"; None unless starved.
    cause: str | None
    # Share of the GPU's time lost waiting for data, and waiting for the collective.
    starvation_ratio: float
    interconnect_ratio: float


@dataclass(frozen=True, slots=True)
class Truth:
    time_unix_seconds: float
    # "idle" (no job), "warmup", "steady", "pause" (checkpoint or epoch boundary in progress)
    phase: str
    state: str
    cause: str | None
    # Node-wide: the mean over assigned GPUs (0 when none is assigned).
    starvation_ratio: float
    interconnect_ratio: float
    gpus: tuple[GpuTruth, ...]


class Simulation:
    def __init__(
        self,
        scenario: str,
        *,
        node_id: str,
        seed: int = 0,
        start_time: float = DEFAULT_START_TIME,
        gpus: int = 8,
        **overrides: Any,
    ) -> None:
        self.scenario: Scenario = find_scenario(scenario)
        params = self.scenario.params.replace(overrides)
        if not params.job_id:
            params = params.replace({"job_id": own_job_id(params, node_id)})
        self.params: Params = params if params.job_account else params.replace({"job_account": own_account(params)})
        if gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {gpus}")
        self.node_id = node_id
        self.gpus = gpus
        self.start_time = start_time
        self.elapsed_seconds = 0.0
        self._rng = random.Random(f"{seed}:{node_id}")
        self._profile = model.gpu_profile(self.params)
        self._hardware = NodeHardware(self.params, self._profile, gpus, self._rng)
        self._info = self._hardware.info(node_id, random.Random(f"identity:{node_id}"))
        self._flows: dict[float, model.Flow] = {}
        self._next_core_times = 0.0
        self._truth = self._truth_at(0.0)

    @property
    def time_unix_seconds(self) -> float:
        return self.start_time + self.elapsed_seconds

    def info(self) -> pb.NodeInfo:
        info = pb.NodeInfo()
        info.CopyFrom(self._info)
        return info

    def truth(self) -> Truth:
        """What the node is doing at the current time (the end of the last step)."""
        return self._truth

    def step(self, dt_seconds: float) -> pb.NodeReport:
        """Advance by ``dt_seconds`` and report the tick that ends there (epoch and seq unset)."""
        if not dt_seconds >= 0:
            raise ValueError(f"dt must be a non-negative number of seconds, got {dt_seconds!r}")
        end = self.elapsed_seconds + dt_seconds
        activity = self._activity(end - dt_seconds, end)
        self._hardware.advance(activity, dt_seconds)
        self.elapsed_seconds = end
        self._truth = self._truth_at(end)
        report = pb.NodeReport(node_id=self.node_id, time_unix_seconds=self.start_time + end)
        with_cores = end >= self._next_core_times
        if with_cores:
            every = self.params.core_times_every_seconds
            self._next_core_times = (math.floor(end / every) + 1) * every if every > 0 else math.inf
        self._hardware.fill(report, activity, with_cores=with_cores)
        self._xids(report, end - dt_seconds, end)
        return report

    def _xids(self, report: pb.NodeReport, start: float, end: float) -> None:
        """The Xids of a faulty GPU raised in (start, end], as the agent's event thread reports them."""
        p = self.params
        every = p.xid_every_seconds
        if every is None or p.xid_gpu >= self.gpus:
            return
        for k in range(math.floor(start / every) + 1, math.floor(end / every) + 1):
            report.events.add(
                time_unix_seconds=self.start_time + k * every, kind="xid", subject=f"gpu:{p.xid_gpu}",
                severity=p.xid_severity,
                message=f"Xid {p.xid_code} on GPU {p.xid_gpu}",
                attributes={"xid": str(p.xid_code), "uuid": self._info.gpu.gpus[p.xid_gpu].uuid},
            )  # fmt: skip

    # ---- what happens over one tick ----------------------------------------------------------

    def _job_start(self) -> float:
        start = self.params.job_start_seconds
        return -math.inf if start is None else start

    def _steady_start(self) -> float:
        start = self.params.job_start_seconds
        return -math.inf if start is None else start + self.params.warmup_seconds

    def _load_ratio(self, t: float) -> float:
        p = self.params
        before = p.onset_seconds is not None and t < p.onset_seconds
        after = p.recovery_seconds is not None and t >= p.recovery_seconds
        return p.pre_onset_load_ratio if before or after else 1.0

    def _flow(self, load_ratio: float) -> model.Flow:
        f = self._flows.get(load_ratio)
        if f is None:
            f = self._flows[load_ratio] = model.flow(self.params, self.gpus, load_ratio)
        return f

    def _activity(self, start: float, end: float) -> Activity:
        p, n = self.params, self.gpus
        idle = Activity(util=[0.0] * n, nic_rx_bytes_per_second=_BACKGROUND_RX_BYTES_PER_SECOND,
                        nic_tx_bytes_per_second=_BACKGROUND_TX_BYTES_PER_SECOND)  # fmt: skip
        if not p.job or end <= self._job_start():
            return idle
        rng = self._rng
        if end <= self._steady_start():
            progress = (end - self._job_start()) / max(p.warmup_seconds, 1e-9)
            idle.assigned = True
            idle.util = [rng.uniform(0.0, 0.3) for _ in range(n)]
            idle.gpu_memory_bytes = _IDLE_MEMORY_BYTES + (p.model_memory_bytes - _IDLE_MEMORY_BYTES) * min(
                1, 2 * progress
            )
            idle.volume_read_bytes_per_second = 1e9 if progress < 0.5 else 0.0
            idle.main_core_busy_ratio = 0.6
            return idle
        f = self._flow(self._load_ratio(end))
        checkpoint = self._pause_share(start, end, p.checkpoint_every_seconds, p.checkpoint_seconds)
        epoch = self._pause_share(start, end, p.epoch_every_seconds, p.epoch_gap_seconds)
        running = max(0.0, 1.0 - checkpoint - epoch)
        pace = max(0.0, 1.0 + rng.gauss(0.0, p.step_noise_ratio)) * running
        rate = f.samples_per_second * pace
        compute = f.compute_ratio * pace
        a = Activity(assigned=True, gpu_memory_bytes=p.model_memory_bytes)
        a.util = [min(1.0, max(0.0, compute + rng.gauss(0.0, p.util_noise_ratio))) for _ in range(n)]
        fetch = rate * f.fetch_bytes_per_sample * max(0.0, 1.0 + rng.gauss(0.0, p.rate_noise_ratio))
        a.nic_rx_bytes_per_second = _BACKGROUND_RX_BYTES_PER_SECOND
        if p.source == "network":
            a.nic_rx_bytes_per_second += min(fetch, p.nic_speed_bytes_per_second * 0.995)
        elif p.source == "storage":
            cap = model.fetch_bytes_per_second_capacity(p)
            a.volume_read_bytes_per_second = min(fetch, cap)
            load = max(a.volume_read_bytes_per_second / p.volume_bytes_per_second_cap,
                       a.volume_read_bytes_per_second / p.volume_io_bytes / p.volume_iops_cap)  # fmt: skip
            a.io_stall_ratio = 0.6 * min(1.0, load) ** 4
        a.nic_tx_bytes_per_second = _BACKGROUND_TX_BYTES_PER_SECOND + 0.015 * a.nic_rx_bytes_per_second
        per_gpu = rate / n
        a.h2d_bytes_per_second = per_gpu * f.decoded_bytes_per_sample * max(0.0, 1 + rng.gauss(0, p.rate_noise_ratio))
        a.d2h_bytes_per_second = 0.01 * a.h2d_bytes_per_second
        a.collective_bytes_per_second = per_gpu * p.collective_bytes_per_sample
        if checkpoint:
            a.volume_write_bytes_per_second = p.checkpoint_bytes / p.checkpoint_seconds * checkpoint
            a.d2h_bytes_per_second += a.volume_write_bytes_per_second / n
        decode = rate * f.core_seconds_per_sample
        if p.loader_cores:
            a.loader_core_busy_ratio = min(1.0, decode / p.loader_cores + 0.3 * epoch)
            a.main_core_busy_ratio = min(1.0, 0.25 + 0.4 * compute)
        else:
            a.main_core_busy_ratio = min(1.0, 0.25 * running + 0.4 * compute + decode / n)
        return a

    @staticmethod
    def _pause_share(start: float, end: float, every: float | None, length: float) -> float:
        """Share of [start, end] inside the pauses that begin every ``every`` seconds of training."""
        if every is None or every <= 0:
            return 0.0
        if end <= start:  # an empty tick: whether the instant is inside a pause
            return 1.0 if end > every and (end % every) < length else 0.0
        covered = 0.0
        for k in range(max(1, math.floor(start / every)), math.floor(end / every) + 1):
            covered += max(0.0, min(end, k * every + length) - max(start, k * every))
        return min(1.0, covered / (end - start))

    def _truth_at(self, t: float) -> Truth:
        p, n = self.params, self.gpus
        time = self.start_time + t
        if not p.job or t <= self._job_start():
            return _uniform(time, "idle", "idle", None, 0.0, 0.0, n)
        if t <= self._steady_start():
            return _uniform(time, "warmup", "warmup", None, 0.0, 0.0, n)
        f = self._flow(self._load_ratio(t))
        paused = self._pause_share(t, t, p.checkpoint_every_seconds, p.checkpoint_seconds) or self._pause_share(
            t, t, p.epoch_every_seconds, p.epoch_gap_seconds
        )
        phase = "pause" if paused else "steady"
        if p.clock_ratio < 1.0:
            return _uniform(time, phase, "throttled", None, f.data_wait_ratio, f.sync_ratio, n)
        state, cause = model.truth_label(f)
        return _uniform(time, phase, state, cause, f.data_wait_ratio, f.sync_ratio, n)


def _uniform(time: float, phase: str, state: str, cause: str | None, data: float, sync: float, n: int) -> Truth:
    gpus = tuple(GpuTruth(i, state, cause, data, sync) for i in range(n))
    return Truth(time, phase, state, cause, data, sync, gpus)


def own_job_id(params: Params, node_id: str) -> str:
    """The Slurm job id of a node given none: the node's own, so that unrelated simulated nodes
    never share a job (the history would add them up as one); with a job key, the job's, the same
    on every node of it (a Slurm key's own number, else a number made from the key)."""
    key = params.job_key
    if key and not key.startswith(("torch/", "mpi/")):
        number = key.rpartition("/")[2]
        if number.isdigit():
            return number
    return str(1000 + zlib.crc32((key or node_id).encode()) % 9000)  # four digits, as 4242 was


def own_account(params: Params) -> str:
    """The Slurm account of a job given none: the job key's name up to its first "-", where it
    starts with a letter ("torch/clip-4node": "clip"); none for a node without a job key, or for
    a key that is only a number ("hopper/4242")."""
    name = params.job_key.rpartition("/")[2]
    match = _ACCOUNT_NAME.match(name)
    return match.group(0) if match else ""


def describe(overrides: Mapping[str, Any]) -> str:
    """Overrides as ``name=value`` pairs, for labels of suite traces."""
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
