"""The detector's thresholds: every one is configuration with a documented default.

In a collector configuration file they live in the ``[detector]`` table:

    [detector]
    moderate_ratio = 0.05
    link_capacity_bytes_per_second = { eth0 = "10G", "mlx5_0/1" = 25e9 }
    volumes.nvme1n1 = { iops = 120000, throughput_bytes_per_second = 8e9 }

An unknown key or a value of the wrong type is a ``DetectorConfigError`` whose one-line message
names the source and the key.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nodeagent.core.quantities.rates import LINK_OVERRUN_FACTOR
from nodeagent.core.settings.readers import link_rate

_THROTTLE_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


class DetectorConfigError(ValueError):
    """A detector setting that cannot be used; the message is one line naming source and key."""


@dataclass(frozen=True, slots=True)
class VolumeLimits:
    """What a data volume is provisioned for (cloud disks are capped below what the device does)."""

    iops: float | None = None
    throughput_bytes_per_second: float | None = None


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    # ---- windows and hysteresis ----
    # Length of the sliding window a verdict is based on.
    window_seconds: float = 60.0
    # The window advances (and verdicts are re-evaluated) in steps of this length.
    evaluate_seconds: float = 10.0
    # Share of the window's steps that must show a state before a GPU enters it ("most of a window").
    enter_share_ratio: float = 0.6
    # Entering `starved` also needs the window's ratio to exceed the tier by this many standard
    # errors of the per-report idle share: a ratio just under 5% is not flagged by noise.
    confidence_sigmas: float = 2.0
    # A starved GPU leaves only after both its data and interconnect ratios stay below this ...
    exit_ratio: float = 0.03
    # ... for this long.
    exit_seconds: float = 30.0
    # Idle gaps (epoch boundaries, evaluation, checkpoints) shorter than this are ignored.
    gap_seconds: float = 30.0
    # A report in which the GPU was busy less than this share of the time starts or continues a gap ...
    gap_busy_ratio: float = 0.05
    # ... which ends only at a report busier than this (noise around one threshold must not cut a
    # long gap into short ones that are each ignored).
    gap_end_busy_ratio: float = 0.15
    # A newly assigned GPU (a new job) is `warmup` for this long.
    warmup_seconds: float = 120.0
    # Interval a report stands for at most (after a silence the window does not fill with one report).
    max_interval_seconds: float = 10.0
    # ---- tiers ----
    # Share of assigned time lost from which a GPU is starved (moderate tier) ...
    moderate_ratio: float = 0.05
    # ... and from which the tier is high.
    high_ratio: float = 0.20
    # A high tier stays high until the ratio falls this far below high_ratio.
    tier_margin_ratio: float = 0.03
    # ---- gate and busy ----
    # Memory used above this marks a GPU assigned even when no compute process is visible.
    idle_memory_bytes: int = 1 << 30
    # On GPUs with GPM (Hopper+), SM activity at or above this counts as fully busy; a lone tiny
    # kernel keeps NVML utilization at 100% with SM activity near zero.
    gpm_full_sm_active_ratio: float = 0.5
    # Clock-event reasons that mark a GPU `throttled` (sw_power_cap is left out: busy GPUs sit at
    # their power cap routinely).
    throttle_reasons: tuple[str, ...] = _THROTTLE_REASONS
    # Share of a step during which throttle reasons must be set for the step to count as throttled.
    throttled_share_ratio: float = 0.5
    # ---- computing share from power (GPUs without GPM: power_share.py) ----
    # Power tells computing from waiting only once the GPU has shown a computing draw at least
    # this many times its resting draw (a GPU spinning in NCCL's kernels or idle) ...
    power_swing_factor: float = 2.0
    # ... the two learned from its own readings, each drifting toward what it reads now over
    # about this long (a draw not seen again for a while is forgotten).
    power_learn_seconds: float = 600.0
    # The job roll-up counts a job's GPUs as waiting (so a link finding counts) when their
    # power-based wait share is at least this (power reads noisier than GPM SM activity).
    power_wait_ratio: float = 0.15
    # ---- causes ----
    # network: receive on a NIC or RDMA port at least this share of its capacity ...
    network_link_ratio: float = 0.8
    # ... and at least this many times its transmit.
    network_rx_tx_factor: float = 4.0
    # network, plateau (a remote store's cap, a link whose rate the node cannot tell): a NIC or RDMA
    # port's receive rate over the window's last steps (at least network_plateau_steps of them)
    # flat — (highest - lowest) / median at most network_plateau_spread_ratio — ...
    network_plateau_steps: int = 3
    network_plateau_spread_ratio: float = 0.1
    # ... at a median of at least this many bytes per second (an idle NIC's noise never counts) ...
    network_plateau_floor_bytes_per_second: float = 1e6
    # ... and at least this many times its transmit (a loader downloads; a collective or a server
    # over TCP sends about what it receives).
    network_plateau_rx_tx_factor: float = 10.0
    # storage: a disk busy (io_ticks) this share of the time ...
    storage_busy_ratio: float = 0.9
    # ... or at this share of its provisioned IOPS or throughput (`volumes`) ...
    storage_provisioned_ratio: float = 0.9
    # ... or read latency this many times its lowest seen (not below storage_await_floor_seconds) ...
    storage_await_factor: float = 10.0
    storage_await_floor_seconds: float = 0.0005
    # ... with tasks stalled on I/O (PSI io "some") at least this share of the time.
    io_pressure_ratio: float = 0.1
    # h2d: host-to-device bytes at least this share of the GPU's PCIe link (one direction).
    h2d_link_ratio: float = 0.7
    # cpu: the node's cores busy this share of the time, or PSI cpu "some" at least this share ...
    cpu_busy_ratio: float = 0.85
    cpu_pressure_ratio: float = 0.2
    # ... the pressure only while the cores are at least this busy (threads woken together by I/O
    # completions queue for a moment on idle cores: pressure, but no shortage of CPU) ...
    cpu_pressure_busy_ratio: float = 0.5
    # ... or single cores busy this share (loader workers or a single-threaded loader) ...
    core_saturated_ratio: float = 0.95
    # ... which is a single-threaded loader when no more cores than GPUs are saturated and the
    # node's total stays under this share.
    single_thread_cpu_ratio: float = 0.5
    # interconnect: the share of link bandwidth a collective achieves; waiting time is peer bytes
    # divided by link bandwidth times this.
    collective_efficiency_ratio: float = 0.8
    # ---- bad readings ----
    # A rate more than this many times a link's capacity (NIC, RDMA port, PCIe, NVLink) is a bad
    # reading (a counter in other units, a wrapped or reset counter, a wrong speed): flagged in the
    # evidence, and it decides no cause.
    link_overrun_factor: float = LINK_OVERRUN_FACTOR
    # ---- capacities the node cannot tell ----
    # Interface ("eth0") or RDMA port ("mlx5_0/1") -> capacity in bytes per second (a cloud link
    # capped below its port speed, a remote store's cap). In files also a rate string: "10G".
    link_capacity_bytes_per_second: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Disk name -> provisioned limits.
    volumes: Mapping[str, VolumeLimits] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def window_steps(self) -> int:
        return max(1, round(self.window_seconds / self.evaluate_seconds))

    @property
    def enter_steps(self) -> int:
        return max(1, math.ceil(self.enter_share_ratio * self.window_steps - 1e-9))

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any], *, source: str) -> DetectorConfig:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in m.items():
            if key not in fields:
                raise DetectorConfigError(f"{source}: unknown key {key!r}")
            if key == "link_capacity_bytes_per_second":
                values[key] = MappingProxyType(_capacities(value, source))
            elif key == "volumes":
                values[key] = MappingProxyType(_volumes(value, source))
            elif key == "throttle_reasons":
                if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                    raise DetectorConfigError(f"{source}: throttle_reasons: expected a list of reason names")
                values[key] = tuple(value)
            elif key == "idle_memory_bytes":
                values[key] = int(_number(value, source, key, allow_zero=True))
            elif key == "network_plateau_steps":
                steps = _number(value, source, key, allow_zero=False)
                if steps != int(steps) or steps < 2:
                    raise DetectorConfigError(f"{source}: {key}: expected a whole number of steps >= 2, got {value!r}")
                values[key] = int(steps)
            else:
                values[key] = _number(value, source, key, allow_zero=key.endswith(("_ratio", "_sigmas", "_seconds")))
                if key.endswith("_ratio") and values[key] > 1:
                    raise DetectorConfigError(f"{source}: {key}: a ratio must be within 0..1, got {value!r}")
        config = cls(**values)
        if config.evaluate_seconds <= 0 or config.window_seconds < config.evaluate_seconds:
            raise DetectorConfigError(f"{source}: window_seconds must be at least evaluate_seconds (> 0)")
        if config.high_ratio < config.moderate_ratio:
            raise DetectorConfigError(f"{source}: high_ratio must not be below moderate_ratio")
        if config.gap_seconds > config.window_seconds or config.gap_busy_ratio > config.gap_end_busy_ratio:
            raise DetectorConfigError(
                f"{source}: gap_seconds must not exceed window_seconds, nor gap_busy_ratio gap_end_busy_ratio"
            )
        if config.power_swing_factor <= 1:
            raise DetectorConfigError(
                f"{source}: power_swing_factor must be above 1, got {config.power_swing_factor!r}"
            )
        return config


def _number(value: object, source: str, key: str, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DetectorConfigError(f"{source}: {key}: expected a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise DetectorConfigError(f"{source}: {key}: must be positive, got {value!r}")
    return float(value)


def _capacities(value: object, source: str) -> dict[str, float]:
    key = "link_capacity_bytes_per_second"
    if not isinstance(value, Mapping):
        raise DetectorConfigError(f"{source}: {key}: expected a table of link = capacity")
    out: dict[str, float] = {}
    for name, capacity in value.items():
        where = f"{key}.{name}"
        if isinstance(capacity, str):
            out[str(name)] = link_rate(capacity, f"{source}: {where}", DetectorConfigError)
        else:
            out[str(name)] = _number(capacity, source, where, allow_zero=False)
    return out


def _volumes(value: object, source: str) -> dict[str, VolumeLimits]:
    if not isinstance(value, Mapping):
        raise DetectorConfigError(
            f"{source}: volumes: expected a table of disk = {{ iops, throughput_bytes_per_second }}"
        )
    out: dict[str, VolumeLimits] = {}
    for name, limits in value.items():
        if not isinstance(limits, Mapping):
            raise DetectorConfigError(f"{source}: volumes.{name}: expected a table")
        unknown = set(limits) - {"iops", "throughput_bytes_per_second"}
        if unknown:
            raise DetectorConfigError(f"{source}: volumes.{name}: unknown key {sorted(unknown)[0]!r}")
        iops, throughput = limits.get("iops"), limits.get("throughput_bytes_per_second")
        out[str(name)] = VolumeLimits(
            iops=None if iops is None else _number(iops, source, f"volumes.{name}.iops", allow_zero=False),
            throughput_bytes_per_second=None
            if throughput is None
            else _number(throughput, source, f"volumes.{name}.throughput_bytes_per_second", allow_zero=False),
        )
    return out
