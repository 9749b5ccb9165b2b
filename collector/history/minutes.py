"""A minute row of the history: its columns, how each one merges, and minutes merged into steps.

One row per GPU and one for the node (gpu ``-1``) per minute of the reports' own time. Every
value is a mean over the minute's reports, except ``utilization_min`` (a minimum),
``gpu_seconds_lost`` (a sum) and ``starvation_ratio`` (the verdict's at the minute's end); a
value no report carried is absent. ``resample`` merges minutes by the same rules, so a step of
any length reads as one long minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

MINUTE_SECONDS: Final = 60
DAY_SECONDS: Final = 86_400  # a UTC day: unix time has no leap seconds
NODE_ROW: Final = -1

# The numeric columns of a minute row, in the table's order. GPU rows fill the GPU ones, the node
# row (gpu -1) the node ones and the GPU means over its GPUs. Every one is a mean over the
# minute's reports, except ``utilization_min`` (a minimum) and ``gpu_seconds_lost`` (a sum).
GPU_VALUES: Final = (
    "utilization_mean", "utilization_min", "sm_active_mean", "memory_used_bytes", "power_watts",
    "temperature_celsius",
)  # fmt: skip
NODE_VALUES: Final = (
    "nic_rx_bytes_per_second", "nic_tx_bytes_per_second", "rdma_rx_bytes_per_second", "rdma_tx_bytes_per_second",
    "disk_read_iops", "disk_write_iops", "disk_read_bytes_per_second", "disk_written_bytes_per_second",
    "cpu_busy_ratio", "cpu_iowait_ratio", "pressure_cpu_some_ratio", "pressure_io_some_ratio",
    "pressure_memory_some_ratio",
)  # fmt: skip
VERDICT_VALUES: Final = ("starvation_ratio", "gpu_seconds_lost")
VALUES: Final = GPU_VALUES + NODE_VALUES + VERDICT_VALUES
_LAST: Final = frozenset({"starvation_ratio"})  # the verdict's ratio at the minute's end, not a mean
_SUM: Final = frozenset({"gpu_seconds_lost"})
_MIN: Final = frozenset({"utilization_min"})

# Each column's position in VALUES, and how it merges: "mean", "min", "sum" or "last".
INDEX: Final = {name: i for i, name in enumerate(VALUES)}
KIND: Final = tuple("min" if n in _MIN else "sum" if n in _SUM else "last" if n in _LAST else "mean" for n in VALUES)


@dataclass(slots=True)
class MinuteRow:
    """One GPU's (or the node's, gpu -1) minute: what ``Query.StreamHistory`` returns, one per step."""

    node_id: str
    gpu: int
    minute: int  # unix seconds at the minute's start
    samples: int = 0
    values: dict[str, float] = field(default_factory=dict)
    state: str = ""
    cause: str = ""
    jobs: tuple[str, ...] = ()
    # The newest report in the row (its time): after a restart, stored reports past it are rolled
    # up again, so a minute written a few seconds before a kill still gets every durable report.
    last_time: float = 0.0
    # GPU rows: the seconds of the minute the GPU was held by ``jobs`` (each report stands for the
    # time since the one before it, as the detector counts it); None in rows stored before it was
    # counted, which count as the whole minute.
    held_seconds: float | None = None
    # The held seconds split by what the GPU did with them (``split.CATEGORIES`` order; the node
    # row: the sum over its GPUs); None in rows stored before the split was counted.
    split: list[float] | None = None
    # GPU rows: the nodes its job waited on (comma-separated), the last the minute named.
    waiting_on: str = ""

    def to_plain(self) -> dict[str, object]:
        return {
            "time_unix_seconds": self.minute, "gpu": None if self.gpu == NODE_ROW else self.gpu,
            "samples": self.samples, **{name: self.values.get(name) for name in VALUES},
            "state": self.state, "cause": self.cause or None, "jobs": list(self.jobs),
        }  # fmt: skip


def resample(rows: Sequence[MinuteRow], step_seconds: int) -> list[MinuteRow]:
    """Minute rows (ordered by gpu, then minute) merged into ``step_seconds`` buckets: means
    weighted by samples, the minimum of minima, sums of sums, the last state, cause and ratio."""
    steps = Steps(step_seconds)
    out = [done for row in rows if (done := steps.add(row)) is not None]
    last = steps.close()
    return out if last is None else [*out, last]


class Steps:
    """``resample`` as the rows come, for answers read a page at a time: ``add`` takes the next
    row (ordered by gpu, then minute) and returns the step it completed, if any; ``close`` the
    last one."""

    def __init__(self, step_seconds: int) -> None:
        self.step_seconds = step_seconds
        self._current: MinuteRow | None = None
        self._weights: dict[str, int] = {}

    def add(self, row: MinuteRow) -> MinuteRow | None:
        if self.step_seconds <= MINUTE_SECONDS:
            return row
        done = None
        current = self._current
        weights = self._weights
        bucket = row.minute // self.step_seconds * self.step_seconds
        if current is None or current.gpu != row.gpu or current.minute != bucket:
            done = current
            current = self._current = MinuteRow(row.node_id, row.gpu, bucket)
            weights = self._weights = {}
        for name, value in row.values.items():
            old = current.values.get(name)
            weight = weights.get(name, 0)
            kind = KIND[INDEX[name]]
            if old is None:
                current.values[name] = value
            elif kind == "min":
                current.values[name] = min(old, value)
            elif kind == "sum":
                current.values[name] = old + value
            elif kind == "last":
                current.values[name] = value
            else:
                current.values[name] = (old * weight + value * row.samples) / max(1, weight + row.samples)
            weights[name] = weight + row.samples
        current.samples += row.samples
        if row.held_seconds is not None:
            current.held_seconds = (current.held_seconds or 0.0) + row.held_seconds
        if row.split is not None:
            if current.split is None:
                current.split = [0.0] * len(row.split)
            current.split = [a + b for a, b in zip(current.split, row.split, strict=True)]
        current.waiting_on = row.waiting_on or current.waiting_on
        current.state, current.cause, current.jobs, current.last_time = row.state, row.cause, row.jobs, row.last_time
        return done

    def close(self) -> MinuteRow | None:
        done, self._current = self._current, None
        return done
