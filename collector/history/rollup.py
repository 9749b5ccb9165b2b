"""A node's history as the ingest path builds it: per-minute rollups and full-resolution reports.

Every accepted report updates the node's open minute (one row per GPU and one for the node, gpu
``-1``); a flush takes the rows it touched and the reports it took, and the store writes them in
the same transaction as the node's counters and watermarks, so an acknowledged report's minute
is as durable as its count. A minute row is written whole each time (an upsert of its running
means), so writing it again after a failed flush, or a later flush of the same minute, is
idempotent. After a restart the node's last stored minute seeds the open one, so reports of that
minute sent again after the restart add to it instead of replacing it.

Minutes are the report's own time (``time_unix_seconds``), so a simulation or a replayed trace
lands where its reports say. Rates (NIC, RDMA, disk, CPU) are from consecutive reports of the
node; a counter that went down is a reset and gives no rate for that interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

MINUTE_SECONDS: Final = 60
DAY_SECONDS: Final = 86_400  # a UTC day: unix time has no leap seconds
NODE_ROW: Final = -1
# Full-resolution reports kept per node, and per-minute rows (``serve --history-*``).
DEFAULT_REPORTS_SECONDS: Final = 3600.0
DEFAULT_RETENTION_SECONDS: Final = 14 * 86400.0
# Old rows of a node are deleted at most this often (in its report time): each delete is a
# range scan in the flush transaction.
PRUNE_EVERY_SECONDS: Final = 30.0
# The open minute is written at most this often (report time); see NodeHistory.
OPEN_WRITE_SECONDS: Final = 5.0
# ... or once this many wall-clock seconds passed with it unwritten (its node went quiet).
OPEN_WRITE_WALL_SECONDS: Final = 1.0
# NIC, RDMA, disk and CPU rates are taken over at least this many seconds of reports.
RATE_EVERY_SECONDS: Final = 5.0

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


@dataclass(slots=True)
class MinuteRow:
    """One GPU's (or the node's, gpu -1) minute: what ``Query.History`` returns, one per step."""

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

    def to_plain(self) -> dict[str, object]:
        return {
            "time_unix_seconds": self.minute, "gpu": None if self.gpu == NODE_ROW else self.gpu,
            "samples": self.samples, **{name: self.values.get(name) for name in VALUES},
            "state": self.state, "cause": self.cause or None, "jobs": list(self.jobs),
        }  # fmt: skip


_INDEX: Final = {name: i for i, name in enumerate(VALUES)}
_UTIL, _UTIL_MIN, _SM, _MEM, _POWER, _TEMP = (_INDEX[n] for n in GPU_VALUES)
_RATIO, _LOST = _INDEX["starvation_ratio"], _INDEX["gpu_seconds_lost"]
_KIND: Final = tuple("min" if n in _MIN else "sum" if n in _SUM else "last" if n in _LAST else "mean" for n in VALUES)


class _Open:
    """A minute being built: sums and counts by column index (the ingest path's hot loop)."""

    __slots__ = ("cause", "counts", "gpu", "jobs", "last_time", "minute", "samples", "state", "sums")

    def __init__(self, gpu: int, minute: int) -> None:
        self.gpu, self.minute, self.samples = gpu, minute, 0
        self.sums = [0.0] * len(VALUES)
        self.counts = [0] * len(VALUES)
        self.state, self.cause, self.last_time = "", "", 0.0
        self.jobs: tuple[str, ...] = ()
        self.sums[_UTIL_MIN] = math.inf

    @classmethod
    def seeded(cls, row: MinuteRow) -> _Open:
        acc = cls(row.gpu, row.minute)
        acc.samples, acc.state, acc.cause, acc.jobs, acc.last_time = (
            row.samples,
            row.state,
            row.cause,
            row.jobs,
            row.last_time,
        )
        for name, value in row.values.items():
            i = _INDEX[name]
            acc.sums[i] = value * row.samples if _KIND[i] == "mean" else value
            acc.counts[i] = row.samples
        return acc

    def add(self, i: int, value: float) -> None:
        self.sums[i] += value
        self.counts[i] += 1

    def row(self, node_id: str) -> MinuteRow:
        values: dict[str, float] = {}
        for i, name in enumerate(VALUES):
            n = self.counts[i]
            if n:
                values[name] = self.sums[i] / n if _KIND[i] == "mean" else self.sums[i]
        return MinuteRow(
            node_id, self.gpu, self.minute, self.samples, values, self.state, self.cause, self.jobs, self.last_time
        )


@dataclass(frozen=True, slots=True)
class StoredReport:
    node_id: str
    time_unix_seconds: float
    epoch: int
    seq: int
    raw: bytes


@dataclass(slots=True)
class HistoryBatch:
    """What one flush writes of the history: reports, minute rows, and per-node prune cutoffs."""

    reports: list[StoredReport] = field(default_factory=list)
    minutes: list[MinuteRow] = field(default_factory=list)
    # node id -> (delete reports before, delete minutes before), unix seconds.
    prune: dict[str, tuple[float, float]] = field(default_factory=dict)
    # (reports before, minutes before) for every node, by the collector's clock: a node that stopped
    # reporting is never pruned by its own newest report, and its history must still go.
    sweep: tuple[float, float] | None = None

    def __bool__(self) -> bool:
        return bool(self.reports or self.minutes or self.prune or self.sweep)


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    reports_seconds: float = DEFAULT_REPORTS_SECONDS
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    enabled: bool = True


class NodeHistory:
    """One node's open minute, what its next flush writes, and the counters behind its rates.

    The open minute is written every ``OPEN_WRITE_SECONDS`` of report time (and whole when it
    closes), not with every flush: nine upserts per report would cost more than the report. The
    reports themselves go out with every flush, so after a kill the open minute is rebuilt from
    the last written row plus the stored reports past its ``last_time`` (``restore``). Without
    stored reports (``reports_seconds`` 0) the open minute goes out with every flush instead."""

    def __init__(self, node_id: str, config: HistoryConfig) -> None:
        self.node_id = node_id
        self.config = config
        self.open: dict[int, _Open] = {}
        self.minute = 0
        self.closed: list[MinuteRow] = []
        self.touched = False
        self.written_at = -math.inf
        self.written_wall = -math.inf
        self.reports: list[StoredReport] = []
        self.previous: pb.NodeReport | None = None
        self.lost: dict[int, float] = {}
        self.pruned_at = 0.0
        self.newest = 0.0

    def restore(self, rows: Sequence[MinuteRow], reports: Sequence[StoredReport]) -> None:
        """After a restart: the newest stored minute, then the stored reports it does not hold."""
        if rows:
            self.minute = rows[0].minute
            self.open = {row.gpu: _Open.seeded(row) for row in rows}
            self.newest = max(row.last_time for row in rows)
        for stored in reports:
            report = pb.NodeReport.FromString(stored.raw)
            self._observe(report, None, keep=None)

    def observe(self, report: pb.NodeReport, raw: bytes, verdict: NodeVerdict | None) -> None:
        self._observe(report, verdict, keep=raw if self.config.reports_seconds > 0 else None)

    def _observe(self, report: pb.NodeReport, verdict: NodeVerdict | None, keep: bytes | None) -> None:
        time = report.time_unix_seconds
        minute = int(time // MINUTE_SECONDS) * MINUTE_SECONDS
        if minute != self.minute:
            self.closed.extend(acc.row(self.node_id) for acc in self.open.values())
            self.open = {}
            self.minute = minute
            self.written_at = -math.inf
        self.touched = True
        self.newest = max(self.newest, time)
        if keep is not None:
            self.reports.append(StoredReport(self.node_id, time, report.epoch, report.seq, keep))
        self._rollup(report, verdict)

    @property
    def pending(self) -> bool:
        """Whether the open minute holds reports not written yet."""
        return self.touched

    def take(self, wall_seconds: float) -> HistoryBatch:
        """What the next flush writes; ``wall_seconds`` is a monotonic clock: an open minute not
        written for ``OPEN_WRITE_WALL_SECONDS`` goes out too (a node that stopped reporting)."""
        batch = HistoryBatch(reports=self.reports, minutes=self.closed)
        due = (
            self.config.reports_seconds <= 0
            or self.newest - self.written_at >= OPEN_WRITE_SECONDS
            or wall_seconds - self.written_wall >= OPEN_WRITE_WALL_SECONDS
        )
        if self.touched and due:
            batch.minutes = self.closed + [acc.row(self.node_id) for acc in self.open.values()]
            self.written_at, self.written_wall = self.newest, wall_seconds
            self.touched = False
        self.reports, self.closed = [], []
        if self.newest and self.newest - self.pruned_at >= PRUNE_EVERY_SECONDS:
            batch.prune[self.node_id] = (
                self.newest - self.config.reports_seconds,
                self.newest - self.config.retention_seconds,
            )
            self.pruned_at = self.newest
        return batch

    def put_back(self, batch: HistoryBatch) -> None:
        """A flush that did not commit: its reports and minutes go out with the next one (the
        open minute's newer copy, written after them, wins)."""
        self.reports = batch.reports + self.reports
        self.closed = batch.minutes + self.closed
        self.written_at = self.written_wall = -math.inf
        self.touched = True
        if self.node_id in batch.prune:
            self.pruned_at = 0.0

    def _acc(self, gpu: int) -> _Open:
        acc = self.open.get(gpu)
        if acc is None:
            acc = self.open[gpu] = _Open(gpu, self.minute)
        return acc

    def _rollup(self, report: pb.NodeReport, verdict: NodeVerdict | None) -> None:
        time = report.time_unix_seconds
        verdicts = {g.index: g for g in verdict.gpus} if verdict is not None else {}
        node = self._acc(NODE_ROW)
        node.samples += 1
        node.last_time = time
        node_sums, node_counts = node.sums, node.counts
        lost_total = 0.0
        util_sum, util_gpus = 0.0, 0
        for gpu in report.gpus:
            acc = self._acc(gpu.index)
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
            v = verdicts.get(gpu.index)
            if v is not None:
                acc.state, acc.cause, acc.jobs = v.state, v.cause or "", v.jobs
                if v.starvation_ratio is not None:
                    sums[_RATIO] = v.starvation_ratio
                    counts[_RATIO] += 1
                # The detector's count is cumulative since it started; a lower one is a new detector.
                before = self.lost.get(gpu.index, 0.0)
                delta = v.gpu_seconds_lost - before if v.gpu_seconds_lost >= before else v.gpu_seconds_lost
                self.lost[gpu.index] = v.gpu_seconds_lost
                sums[_LOST] += delta
                counts[_LOST] += 1
                lost_total += delta
        if util_gpus:
            # The node's utilization: per report the mean over its GPUs, so that every value of
            # the node row weighs one report (what a restart's seed assumes).
            node.add(_UTIL, util_sum / util_gpus)
            node_counts[_UTIL_MIN] += 1
        if verdict is not None:
            node.state, node.cause, node.jobs = verdict.state, verdict.cause or "", verdict.jobs
            if verdict.starvation_ratio is not None:
                node_sums[_RATIO] = verdict.starvation_ratio
                node_counts[_RATIO] += 1
            node.add(_LOST, lost_total)
        host = report.host
        for name, pressure in _PRESSURES:
            if host.HasField(pressure):
                node.add(_INDEX[name], getattr(host, pressure).some_avg10_ratio)
        # Rates against the report RATE_EVERY_SECONDS back: the same mean over a minute as one
        # per report, at a fraction of the cost.
        base = self.previous
        if base is None or base.epoch != report.epoch:
            self.previous = _kept(report)
            return
        seconds = time - base.time_unix_seconds
        if seconds < RATE_EVERY_SECONDS:
            return
        self.previous = _kept(report)
        for name, value in _rates(base, report, seconds).items():
            if value is not None:
                node.add(_INDEX[name], value)


_PRESSURES: Final = (
    ("pressure_cpu_some_ratio", "pressure_cpu"), ("pressure_io_some_ratio", "pressure_io"),
    ("pressure_memory_some_ratio", "pressure_memory"),
)  # fmt: skip


def _kept(report: pb.NodeReport) -> pb.NodeReport:
    """A copy to hold on to: the report received is part of the message it came in, whose memory
    (unknown fields dropped or not) lives as long as any part of it is referenced."""
    copy = pb.NodeReport()
    copy.CopyFrom(report)
    return copy


def _delta(before: float, after: float) -> float | None:
    return after - before if after >= before else None


def _sum_rate(pairs: Iterable[tuple[float, float]], seconds: float) -> float | None:
    total = 0.0
    for before, after in pairs:
        delta = _delta(before, after)
        if delta is None:
            return None
        total += delta
    return total / seconds


def _rates(before: pb.NodeReport, after: pb.NodeReport, seconds: float) -> dict[str, float | None]:
    nics = {n.name: n for n in before.nics}
    nic_pairs = [(nics[n.name], n) for n in after.nics if n.name in nics]
    ports = {(p.device, p.port): p for p in before.rdma_ports}
    port_pairs = [(ports[(p.device, p.port)], p) for p in after.rdma_ports if (p.device, p.port) in ports]
    disks = {d.name: d for d in before.disks}
    disk_pairs = [(disks[d.name], d) for d in after.disks if d.name in disks]
    out: dict[str, float | None] = {
        "nic_rx_bytes_per_second": _sum_rate(((a.rx_bytes_total, b.rx_bytes_total) for a, b in nic_pairs), seconds),
        "nic_tx_bytes_per_second": _sum_rate(((a.tx_bytes_total, b.tx_bytes_total) for a, b in nic_pairs), seconds),
        "disk_read_iops": _sum_rate(
            ((a.reads_completed_total, b.reads_completed_total) for a, b in disk_pairs), seconds
        ),
        "disk_write_iops": _sum_rate(
            ((a.writes_completed_total, b.writes_completed_total) for a, b in disk_pairs), seconds
        ),
        "disk_read_bytes_per_second": _sum_rate(
            ((a.read_bytes_total, b.read_bytes_total) for a, b in disk_pairs), seconds
        ),
        "disk_written_bytes_per_second": _sum_rate(
            ((a.written_bytes_total, b.written_bytes_total) for a, b in disk_pairs), seconds
        ),
    }
    if port_pairs:
        out["rdma_rx_bytes_per_second"] = _sum_rate(
            ((a.rx_bytes_total, b.rx_bytes_total) for a, b in port_pairs), seconds
        )
        out["rdma_tx_bytes_per_second"] = _sum_rate(
            ((a.tx_bytes_total, b.tx_bytes_total) for a, b in port_pairs), seconds
        )
    if not nic_pairs:
        out.pop("nic_rx_bytes_per_second"), out.pop("nic_tx_bytes_per_second")
    if not disk_pairs:
        for name in (
            "disk_read_iops",
            "disk_write_iops",
            "disk_read_bytes_per_second",
            "disk_written_bytes_per_second",
        ):
            out.pop(name)
    if before.host.HasField("cpu_total") and after.host.HasField("cpu_total"):
        a, b = before.host.cpu_total, after.host.cpu_total
        fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
        deltas = {f: getattr(b, f"{f}_seconds_total") - getattr(a, f"{f}_seconds_total") for f in fields}
        total = sum(deltas.values())
        if total > 0 and min(deltas.values()) >= 0:
            out["cpu_busy_ratio"] = 1.0 - (deltas["idle"] + deltas["iowait"]) / total
            out["cpu_iowait_ratio"] = deltas["iowait"] / total
    return out


def resample(rows: Sequence[MinuteRow], step_seconds: int) -> list[MinuteRow]:
    """Minute rows (ordered by gpu, then minute) merged into ``step_seconds`` buckets: means
    weighted by samples, the minimum of minima, sums of sums, the last state, cause and ratio."""
    if step_seconds <= MINUTE_SECONDS:
        return list(rows)
    out: list[MinuteRow] = []
    current: MinuteRow | None = None
    weights: dict[str, int] = {}
    for row in rows:
        bucket = row.minute // step_seconds * step_seconds
        if current is None or current.gpu != row.gpu or current.minute != bucket:
            current = MinuteRow(row.node_id, row.gpu, bucket)
            weights = {}
            out.append(current)
        for name, value in row.values.items():
            old = current.values.get(name)
            weight = weights.get(name, 0)
            kind = _KIND[_INDEX[name]]
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
        current.state, current.cause, current.jobs, current.last_time = row.state, row.cause, row.jobs, row.last_time
    return out
