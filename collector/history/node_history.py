"""A node's history as the ingest path builds it: its minutes summed per GPU and full-resolution reports.

Every accepted report updates the node's open minute (one row per GPU and one for the node, gpu
``-1``); a flush takes the rows it touched and the reports it took, and the store writes them in
the same transaction as the node's counters and watermarks, so an acknowledged report's minute
is as durable as its count. A minute row is written whole each time (an upsert of its running
means), so writing it again after a failed flush, or a later flush of the same minute, is
idempotent. After a restart the node's last stored minute seeds the open one, so reports of that
minute sent again after the restart add to it instead of replacing it.

Minutes are the report's own time (``time_unix_seconds``), so a simulation or a replayed trace
lands where its reports say. Rates (NIC, RDMA, disk, CPU) are from reports of the node
``RATE_EVERY_SECONDS`` apart (``node_rates``). The columns and how each merges are in ``minutes``;
what a flush takes away, in ``batch``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch, StoredReport
from nodeagent.collector.history.config import (
    HOUR_SECONDS,
    MAX_GAP_SECONDS,
    MAX_HELD_INTERVAL_SECONDS,
    OPEN_WRITE_SECONDS,
    PRUNE_EVERY_SECONDS,
    QUIET_MARGIN_SECONDS,
    RATE_EVERY_SECONDS,
    HistoryConfig,
)
from nodeagent.collector.history.counters import SplitCounters
from nodeagent.collector.history.forming import Forming, provisional
from nodeagent.collector.history.gpu_sums import add_gpus
from nodeagent.collector.history.minutes import DAY_SECONDS, INDEX, MINUTE_SECONDS, NODE_ROW, MinuteRow
from nodeagent.collector.history.node_rates import node_rates
from nodeagent.collector.history.open_minute import OpenMinute
from nodeagent.collector.history.owners import JobOwners
from nodeagent.collector.states.words import shown_state
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

WINDOW: Final = DetectorConfig().window_seconds  # the detector's, when the caller does not say
_NONE: Final[frozenset[int]] = frozenset()

_UTIL, _UTIL_MIN = INDEX["utilization_mean"], INDEX["utilization_min"]
_RATIO, _LOST = INDEX["starvation_ratio"], INDEX["gpu_seconds_lost"]


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
        self.open: dict[int, OpenMinute] = {}
        self.minute = 0
        self.closed: list[MinuteRow] = []
        # Hours the node's reports moved past, for the ledger to sum (``HistoryBatch.compact``).
        self.compact: list[int] = []
        # Whom its jobs are billed to, noted once a minute (``HistoryBatch.owners``).
        self.owners = JobOwners()
        # The split's totals by job since this collector started (``counters``).
        self.counters = SplitCounters()
        # The split's GPU-seconds lost of the minutes no verdict judges any more, by UTC day (``lost_on``).
        self.settled_lost: dict[int, float] = {}
        self.touched = False
        self.written_at = -math.inf
        # When a flush last took a new report of the node (wall clock), and the gap before that
        # one: how long a silence makes the node quiet. ``fresh``: a report since that flush.
        self.heard_wall = -math.inf
        self.heard_gap = 0.0
        self.fresh = False
        self.reports: list[StoredReport] = []
        self.previous: pb.NodeReport | None = None
        self.lost: dict[int, float] = {}
        self.pruned_at = 0.0
        self.newest = 0.0
        # The previous report's time (and epoch): what the next one stands for starts there.
        self.previous_time: tuple[int, float] | None = None
        # Held seconds a later verdict may still judge (``forming``), and the closed minutes they
        # are in, kept (already queued to be written) until no verdict can judge them.
        self.forming = Forming()
        self.settling: dict[int, dict[int, OpenMinute]] = {}
        self.window = WINDOW

    def restore(self, rows: Sequence[MinuteRow], reports: Sequence[StoredReport]) -> None:
        """After a restart: the newest stored minute, then the stored reports it does not hold."""
        if rows:
            self.minute = rows[0].minute
            self.open = {row.gpu: OpenMinute.seeded(row) for row in rows}
            self.newest = max(row.last_time for row in rows)
            self.previous_time = (-1, self.newest)  # any epoch: the stored minute's last report
        for stored in reports:
            report = pb.NodeReport.FromString(stored.raw)
            self._observe(report, None, keep=None)

    def observe(
        self, report: pb.NodeReport, raw: bytes, verdict: NodeVerdict | None, window: float = WINDOW,
        shares: Mapping[str, split.JobShare] | None = None,
    ) -> None:  # fmt: skip
        """``window``: the detector's window, what each of its verdicts judges (``forming``);
        ``shares``: the job roll-up's measured wait of the node's GPUs of a job that wait on no
        other node (``NodeJobs.ledger_shares``), which the split counts with the verdict."""
        self.window = window
        if shares and verdict is not None:
            verdict = split.with_shares(verdict, shares)
        self._observe(report, verdict, keep=raw if self.config.reports_seconds > 0 else None)

    def _observe(self, report: pb.NodeReport, verdict: NodeVerdict | None, keep: bytes | None) -> None:
        time = report.time_unix_seconds
        minute = int(time // MINUTE_SECONDS) * MINUTE_SECONDS
        # The GPUs that did not answer in time, read once for the split's two passes; only a `lost`
        # verdict's split asks (the seconds counted provisionally are never a lost GPU's).
        lost = verdict is not None and any(g.state == "lost" for g in verdict.gpus)
        unresponsive = {g.index for g in report.gpus if g.unresponsive} if lost else _NONE
        self._judge(report, verdict, unresponsive)
        self.owners.note(self.node_id, report, verdict, minute, new_minute=minute != self.minute)
        if minute != self.minute:
            if self.minute and minute // HOUR_SECONDS != self.minute // HOUR_SECONDS:
                # Its last minutes go out with this flush: the ledger sums the hour then.
                self.compact.append(self.minute // HOUR_SECONDS * HOUR_SECONDS)
            # The part of this report's interval before its minute held the GPUs of the last one.
            until = min(time, self.minute + MINUTE_SECONDS)
            self._hold(self.open, report, verdict, unresponsive, until, minute_start=self.minute)
            self.closed.extend(acc.row(self.node_id) for acc in self.open.values())
            self.settling[self.minute] = self.open
            self._gap_minutes(report, verdict, minute)
            self.open = {}
            self.minute = minute
            self.written_at = -math.inf
            self._settle(time)
        self.touched = self.fresh = True
        self.newest = max(self.newest, time)
        if keep is not None:
            self.reports.append(StoredReport(self.node_id, time, report.epoch, report.seq, keep))
        self._rollup(report, verdict)
        self._hold(self.open, report, verdict, unresponsive, time, minute_start=minute)
        self.previous_time = (report.epoch, time)

    def _hold(
        self, accs: dict[int, OpenMinute], report: pb.NodeReport, verdict: NodeVerdict | None,
        unresponsive: AbstractSet[int], until: float, minute_start: int,
    ) -> None:  # fmt: skip
        """Count the part of the report's interval in [``minute_start``, ``until``] as held on each
        GPU its verdict names a job for, split by what the verdict says it did (``split``). The
        interval runs from the previous report of the epoch: its last ``MAX_HELD_INTERVAL_SECONDS``
        are the report's, what is before them (at most ``MAX_GAP_SECONDS`` back) a gap, `unknown`."""
        before = self.previous_time
        if verdict is None or before is None or before[0] not in (-1, report.epoch):
            return
        time = report.time_unix_seconds
        start = max(before[1], time - MAX_GAP_SECONDS, minute_start)
        if until <= start:
            return
        known_from = max(start, time - MAX_HELD_INTERVAL_SECONDS)
        seconds = max(0.0, until - known_from)
        gap = max(0.0, min(until, known_from) - start)
        node = accs.get(NODE_ROW)
        forming = self.forming
        for g in verdict.gpus:
            acc = accs.get(g.index)
            if g.jobs and acc is not None:
                acc.held = (acc.held or 0.0) + seconds + gap
                share = split.job_share(g)
                lost = split.losses_given(g, g.index in unresponsive, share)  # once: up to four sums take it
                split.add_losses(acc.parts(), lost, seconds, gap)
                if node is not None:
                    split.add_losses(node.parts(), lost, seconds, gap)
                # Judged by the roll-up: its share, or one it could not measure (``split.WAIT_UNKNOWN``).
                if seconds > 0 and provisional(g, share is not None or split.WAIT_UNKNOWN in g.evidence):
                    forming.note(g, minute_start, until, seconds)
                    acc.hold_losses(lost, seconds)
                    if node is not None:
                        node.hold_losses(lost, seconds)

    def _judge(self, report: pb.NodeReport, verdict: NodeVerdict | None, unresponsive: AbstractSet[int]) -> None:
        """The report's verdict judges its window: the provisional seconds in it take its split;
        a closed minute it changed is written again (and its hour summed again, if it was)."""
        if verdict is None or not self.forming.by_gpu:
            return
        time = report.time_unix_seconds
        changed: set[int] = set()
        for g in verdict.gpus:
            if g.jobs:
                changed |= self.forming.judge(g, time, self.window, self._minute_accs, g.index in unresponsive)
        if not changed:
            return  # most reports: no verdict judged seconds it had not
        for m in sorted(changed & self.settling.keys()):
            self.closed.extend(acc.row(self.node_id) for acc in self.settling[m].values())
            hour = m // HOUR_SECONDS * HOUR_SECONDS
            if hour != self.minute // HOUR_SECONDS * HOUR_SECONDS and hour not in self.compact:
                self.compact.append(hour)
        if changed - self.settling.keys():
            self.touched = True

    def _minute_accs(self, minute: int) -> dict[int, OpenMinute] | None:  # an open or settling minute's
        return self.open if minute == self.minute else self.settling.get(minute)

    def _settle(self, time: float) -> None:
        """Closed minutes no verdict can judge any more go to the counters; the rest wait."""
        self.forming.forget_before(time - self.window)
        pending = self.forming.minutes()
        for m in [m for m in self.settling if m not in pending]:
            accs = self.settling.pop(m)
            self.counters.close([acc.row(self.node_id) for acc in accs.values()])
            self._settled(accs.get(NODE_ROW))

    def _settled(self, node: OpenMinute | None) -> None:
        """A minute's node row whose split no verdict moves any more: its loss to its day."""
        if node is None or node.split is None:
            return
        day = node.minute // DAY_SECONDS
        self.settled_lost[day] = self.settled_lost.get(day, 0.0) + split.lost_seconds(node.split)
        for old in [d for d in self.settled_lost if d < day - 1]:
            del self.settled_lost[old]

    def lost_on(self, day: int) -> float:
        """The split's GPU-seconds lost on the UTC day ``day`` (days since the epoch) that this history
        holds: the settled minutes', and the open and settling ones' as counted now (a later verdict
        may still move them, as it moves them in the stored rows): what its stored minutes of the day
        hold once the open one is written. Read from the HTTP thread too: copies."""
        rows = [self.open.get(NODE_ROW), *(m.get(NODE_ROW) for m in list(self.settling.values()))]
        live = [r.split for r in rows if r is not None and r.split is not None and r.minute // DAY_SECONDS == day]
        return self.settled_lost.get(day, 0.0) + sum(split.lost_seconds(parts) for parts in live)

    def _gap_minutes(self, report: pb.NodeReport, verdict: NodeVerdict | None, minute: int) -> None:
        """The whole minutes of a gap between the last minute and the report's: rows of their own,
        held and `unknown`, for each GPU the report's verdict names a job for."""
        before = self.previous_time
        if verdict is None or before is None or before[0] not in (-1, report.epoch):
            return
        time = report.time_unix_seconds
        start = max(before[1], time - MAX_GAP_SECONDS)
        known_from = max(start, time - MAX_HELD_INTERVAL_SECONDS)
        held = [g for g in verdict.gpus if g.jobs]
        unresponsive = {g.index for g in report.gpus if g.unresponsive}
        for m in range(self.minute + MINUTE_SECONDS, minute, MINUTE_SECONDS):
            end = m + MINUTE_SECONDS
            gap = max(0.0, min(known_from, end) - max(start, m))
            seconds = max(0.0, min(time, end) - max(known_from, m))
            if gap + seconds <= 0 or not held:
                continue
            node = OpenMinute(NODE_ROW, m)
            for g in held:
                acc = OpenMinute(g.index, m)
                acc.held, acc.jobs, acc.last_time = seconds + gap, g.jobs, max(start, m)
                split.add(acc.parts(), g, seconds, gap, g.index in unresponsive)
                split.add(node.parts(), g, seconds, gap, g.index in unresponsive)
                self.closed.append(acc.row(self.node_id))
                self.counters.close(self.closed[-1:])
            node.jobs, node.last_time = verdict.jobs, max(start, m)
            self.closed.append(node.row(self.node_id))
            self._settled(node)

    def gpu_seconds(self) -> dict[str, list[float]]:
        """The split's GPU-seconds by job and category since the collector started, this minute's too."""
        # Read from the HTTP thread too: copies (C-level calls) of the open minute's accumulators and
        # the closed minutes' not counted yet, less what a verdict may still move (counters only grow).
        accs = list(self.open.values()) + [a for m in list(self.settling.values()) for a in list(m.values())]
        return self.counters.totals(acc.row(self.node_id, settled=True) for acc in accs if acc.gpu != NODE_ROW)

    def job_lost(self, job: str) -> dict[int, float]:
        """The split's GPU-seconds lost of ``job`` on each of the node's GPUs since this history
        started, as ``gpu_seconds`` counts them (settled seconds only: a counter that only grows)."""
        accs = list(self.open.values()) + [a for m in list(self.settling.values()) for a in list(m.values())]
        rows = [acc.row(self.node_id, settled=True) for acc in accs if acc.gpu != NODE_ROW and job in acc.jobs]
        return self.counters.job_lost(job, rows)

    def seed_rows(self) -> list[MinuteRow]:
        """The open minute as rows, as ``restore`` takes them: what a resting node keeps of its
        history (``ingest/resting.py``), once the flush has written them."""
        return [self.open[gpu].row(self.node_id) for gpu in sorted(self.open)]

    @property
    def pending(self) -> bool:
        """Whether the open minute holds reports not written yet."""
        return self.touched

    def take(self, wall_seconds: float) -> HistoryBatch:
        """What the next flush writes; ``wall_seconds`` is a monotonic clock (``math.inf``: every
        open minute, as at a stop): the open minute goes out too once its node is quiet."""
        if self.fresh and wall_seconds < math.inf:
            if self.heard_wall > -math.inf:
                self.heard_gap = min(wall_seconds - self.heard_wall, OPEN_WRITE_SECONDS)
            self.heard_wall, self.fresh = wall_seconds, False
        batch = HistoryBatch(reports=self.reports, minutes=self.closed)
        batch.compact, self.compact = [(self.node_id, hour) for hour in self.compact], []
        batch.owners, self.owners.pending = self.owners.pending, []
        if self.touched and self.due(wall_seconds):
            batch.minutes = self.closed + [acc.row(self.node_id) for acc in self.open.values()]
            self.written_at = self.newest
            self.touched = False
        self.reports, self.closed = [], []
        if self.newest and self.newest - self.pruned_at >= PRUNE_EVERY_SECONDS:
            batch.prune[self.node_id] = (
                self.newest - self.config.reports_seconds,
                self.newest - self.config.retention_seconds,
            )
            self.pruned_at = self.newest
        return batch

    def due(self, wall_seconds: float) -> bool:
        """Whether the open minute is to be written now: every ``OPEN_WRITE_SECONDS`` of reports,
        with every flush without stored reports, and once the node is quiet."""
        return (
            self.config.reports_seconds <= 0
            or self.newest - self.written_at >= OPEN_WRITE_SECONDS
            or wall_seconds - self.heard_wall >= self.heard_gap + QUIET_MARGIN_SECONDS
        )

    def put_back(self, batch: HistoryBatch) -> None:
        """A flush that did not commit: its reports and minutes go out with the next one (the
        open minute's newer copy, written after them, wins)."""
        self.reports = batch.reports + self.reports
        self.closed = batch.minutes + self.closed
        self.compact = [hour for _node, hour in batch.compact] + self.compact
        self.owners.pending = batch.owners + self.owners.pending
        self.written_at = -math.inf
        self.touched = True
        if self.node_id in batch.prune:
            self.pruned_at = 0.0

    def _acc(self, gpu: int) -> OpenMinute:
        acc = self.open.get(gpu)
        if acc is None:
            acc = self.open[gpu] = OpenMinute(gpu, self.minute)
        return acc

    def _rollup(self, report: pb.NodeReport, verdict: NodeVerdict | None) -> None:
        time = report.time_unix_seconds
        verdicts = {g.index: g for g in verdict.gpus} if verdict is not None else {}
        node = self._acc(NODE_ROW)
        node.samples += 1
        node.last_time = time
        node_sums, node_counts = node.sums, node.counts
        lost_total, util_sum, util_gpus = add_gpus(report, verdicts, self.open, self._acc, self.lost, node_sums)
        if util_gpus:
            # The node's utilization: per report the mean over its GPUs, so that every value of
            # the node row weighs one report (what a restart's seed assumes).
            node.add(_UTIL, util_sum / util_gpus)
            node_counts[_UTIL_MIN] += 1
        if verdict is not None:
            node.state = shown_state(verdict.state, gpu_count=len(verdict.gpus))  # as the views say it
            node.cause, node.jobs = verdict.cause or "", verdict.jobs
            if verdict.starvation_ratio is not None:
                node_sums[_RATIO] = verdict.starvation_ratio
                node_counts[_RATIO] += 1
            node.add(_LOST, lost_total)
        host = report.host
        for column, pressure in _PRESSURES:
            if host.HasField(pressure):
                node.add(column, getattr(host, pressure).some_avg10_ratio)
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
        for name, value in node_rates(base, report, seconds).items():
            if value is not None:
                node.add(INDEX[name], value)


_PRESSURES: Final = (
    (INDEX["pressure_cpu_some_ratio"], "pressure_cpu"), (INDEX["pressure_io_some_ratio"], "pressure_io"),
    (INDEX["pressure_memory_some_ratio"], "pressure_memory"),
)  # fmt: skip


def _kept(report: pb.NodeReport) -> pb.NodeReport:
    """A copy to hold on to: the report received is part of the message it came in, whose memory
    (unknown fields dropped or not) lives as long as any part of it is referenced."""
    copy = pb.NodeReport()
    copy.CopyFrom(report)
    return copy
