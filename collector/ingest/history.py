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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodeagent.collector.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

MINUTE_SECONDS: Final = 60
NODE_ROW: Final = -1
# Full-resolution reports kept per node, and per-minute rows (``serve --history-*``).
DEFAULT_REPORTS_SECONDS: Final = 3600.0
DEFAULT_RETENTION_SECONDS: Final = 14 * 86400.0
# Old rows of a node are deleted at most this often (in its report time): each delete is a
# range scan in the flush transaction.
PRUNE_EVERY_SECONDS: Final = 30.0

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
    # Per value: how many reports carried it (the weight of its mean); not stored, rebuilt from
    # ``samples`` when a stored row seeds the open minute.
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, value: float | None) -> None:
        if value is None:
            return
        count = self.counts.get(name, 0)
        old = self.values.get(name)
        if old is None or count == 0:
            self.values[name] = value
        elif name in _MIN:
            self.values[name] = min(old, value)
        elif name in _SUM:
            self.values[name] = old + value
        elif name in _LAST:
            self.values[name] = value
        else:
            self.values[name] = old + (value - old) / (count + 1)
        self.counts[name] = count + 1

    def copy(self) -> MinuteRow:
        return MinuteRow(
            self.node_id, self.gpu, self.minute, self.samples, dict(self.values), self.state, self.cause,
            self.jobs, dict(self.counts),
        )  # fmt: skip

    def to_plain(self) -> dict[str, object]:
        return {
            "time_unix_seconds": self.minute, "gpu": None if self.gpu == NODE_ROW else self.gpu,
            "samples": self.samples, **{name: self.values.get(name) for name in VALUES},
            "state": self.state, "cause": self.cause or None, "jobs": list(self.jobs),
        }  # fmt: skip


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

    def __bool__(self) -> bool:
        return bool(self.reports or self.minutes or self.prune)


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    reports_seconds: float = DEFAULT_REPORTS_SECONDS
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    enabled: bool = True


class NodeHistory:
    """One node's open minute, what its next flush writes, and the counters behind its rates."""

    def __init__(self, node_id: str, config: HistoryConfig, seed: Iterable[MinuteRow] = ()) -> None:
        self.node_id = node_id
        self.config = config
        self.open: dict[int, MinuteRow] = {}
        for row in seed:
            row.counts = dict.fromkeys(row.values, row.samples)
            self.open[row.gpu] = row
        self.minute = next(iter(self.open.values())).minute if self.open else 0
        self.closed: list[MinuteRow] = []
        self.touched = False
        self.reports: list[StoredReport] = []
        self.previous: pb.NodeReport | None = None
        self.lost: dict[int, float] = {}
        self.pruned_at = 0.0
        self.newest = 0.0

    def observe(self, report: pb.NodeReport, raw: bytes, verdict: NodeVerdict | None) -> None:
        time = report.time_unix_seconds
        minute = int(time // MINUTE_SECONDS) * MINUTE_SECONDS
        if minute != self.minute:
            if self.touched:
                self.closed.extend(self.open.values())
            self.open = {}
            self.minute = minute
        self.touched = True
        self.newest = max(self.newest, time)
        if self.config.reports_seconds > 0:
            self.reports.append(StoredReport(self.node_id, time, report.epoch, report.seq, raw))
        self._rollup(report, verdict)
        self.previous = report

    def take(self) -> HistoryBatch:
        batch = HistoryBatch(reports=self.reports, minutes=self.closed)
        if self.touched:
            batch.minutes = self.closed + [row.copy() for row in self.open.values()]
        self.reports, self.closed, self.touched = [], [], False
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
        mine = [r for r in batch.reports if r.node_id == self.node_id]
        self.reports = mine + self.reports
        self.closed = [m for m in batch.minutes if m.node_id == self.node_id] + self.closed
        if self.node_id in batch.prune:
            self.pruned_at = 0.0

    def _row(self, gpu: int) -> MinuteRow:
        row = self.open.get(gpu)
        if row is None:
            row = self.open[gpu] = MinuteRow(self.node_id, gpu, self.minute)
        row.samples += 1
        return row

    def _rollup(self, report: pb.NodeReport, verdict: NodeVerdict | None) -> None:
        verdicts = {g.index: g for g in verdict.gpus} if verdict is not None else {}
        node = self._row(NODE_ROW)
        lost_total = 0.0
        for gpu in report.gpus:
            row = self._row(gpu.index)
            util = gpu.utilization_gpu_ratio if gpu.HasField("utilization_gpu_ratio") else None
            row.add("utilization_mean", util)
            row.add("utilization_min", util)
            node.add("utilization_mean", util)
            node.add("utilization_min", util)
            row.add("sm_active_mean", gpu.sm_active_ratio if gpu.HasField("sm_active_ratio") else None)
            used = float(gpu.memory_used_bytes) if gpu.HasField("memory_used_bytes") else None
            row.add("memory_used_bytes", used)
            row.add("power_watts", gpu.power_watts if gpu.HasField("power_watts") else None)
            row.add("temperature_celsius", gpu.temperature_celsius if gpu.HasField("temperature_celsius") else None)
            v = verdicts.get(gpu.index)
            if v is not None:
                row.state, row.cause, row.jobs = v.state, v.cause or "", v.jobs
                row.add("starvation_ratio", v.starvation_ratio)
                # The detector's count is cumulative since it started; a lower one is a new detector.
                before = self.lost.get(gpu.index, 0.0)
                delta = v.gpu_seconds_lost - before if v.gpu_seconds_lost >= before else v.gpu_seconds_lost
                self.lost[gpu.index] = v.gpu_seconds_lost
                row.add("gpu_seconds_lost", delta)
                lost_total += delta
        if verdict is not None:
            node.state, node.cause, node.jobs = verdict.state, verdict.cause or "", verdict.jobs
            node.add("starvation_ratio", verdict.starvation_ratio)
            node.add("gpu_seconds_lost", lost_total)
        host = report.host
        for name, pressure in (
            ("pressure_cpu_some_ratio", "pressure_cpu"), ("pressure_io_some_ratio", "pressure_io"),
            ("pressure_memory_some_ratio", "pressure_memory"),
        ):  # fmt: skip
            if host.HasField(pressure):
                node.add(name, getattr(host, pressure).some_avg10_ratio)
        previous = self.previous
        if previous is None or previous.epoch != report.epoch:
            return
        seconds = report.time_unix_seconds - previous.time_unix_seconds
        if seconds <= 0:
            return
        for name, value in _rates(previous, report, seconds).items():
            node.add(name, value)


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
    for row in rows:
        bucket = row.minute // step_seconds * step_seconds
        if current is None or current.gpu != row.gpu or current.minute != bucket:
            current = MinuteRow(row.node_id, row.gpu, bucket)
            out.append(current)
        for name, value in row.values.items():
            old = current.values.get(name)
            weight = current.counts.get(name, 0)
            if old is None:
                current.values[name] = value
            elif name in _MIN:
                current.values[name] = min(old, value)
            elif name in _SUM:
                current.values[name] = old + value
            elif name in _LAST:
                current.values[name] = value
            else:
                current.values[name] = (old * weight + value * row.samples) / max(1, weight + row.samples)
            current.counts[name] = weight + row.samples
        current.samples += row.samples
        current.state, current.cause, current.jobs = row.state, row.cause, row.jobs
    return out


def minute_values(row: MinuteRow) -> tuple[object, ...]:
    """The row as the store's columns."""
    return (
        row.node_id, row.gpu, row.minute, row.samples, *(row.values.get(name) for name in VALUES),
        row.state, row.cause, ",".join(row.jobs),
    )  # fmt: skip


def minute_from(values: Sequence[object]) -> MinuteRow:
    node_id, gpu, minute, samples = values[:4]
    numbers = values[4 : 4 + len(VALUES)]
    state, cause, jobs = values[4 + len(VALUES) :]
    row = MinuteRow(str(node_id), int(str(gpu)), int(str(minute)), int(str(samples)))
    row.values = {name: float(str(v)) for name, v in zip(VALUES, numbers, strict=True) if v is not None}
    row.state, row.cause = str(state), str(cause)
    row.jobs = tuple(j for j in str(jobs).split(",") if j)
    return row
