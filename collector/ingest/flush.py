"""Flush and acknowledge once durable: what changed since the last flush goes into one SQLite
transaction, and only after it commits do the streams hear how far their node is durable.

Every ``flush_seconds`` the flusher takes the nodes the intake changed (their rows and the
watermarks of their new reports), what their history's next flush holds, and the alert signals
raised meanwhile, and the store writes them together. After the commit each node's durable seq
moves up and its streams are woken to send their acks. A flush that fails (a lock held too long,
a full disk) puts all of it back for the next one: nothing is acknowledged meanwhile, and nothing
is lost. A node whose row the store refuses is set aside by itself (``NodeState.unstorable``).
A flush whose history the store cannot write (damaged history tables) is written again at once
without it, and the history stops for the run (``history_guard``): ingest never waits on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable

import structlog

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.store_failing import StoreFailingAlert
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.config import PRUNE_EVERY_SECONDS, HistoryConfig
from nodeagent.collector.ingest.flush_stats import FlushStats
from nodeagent.collector.ingest.history_guard import HISTORY_UNAVAILABLE, HistoryGuard
from nodeagent.collector.ingest.node_state import NodeState, StreamHandle, bare
from nodeagent.collector.ingest.resting import Resting
from nodeagent.collector.ingest.retire import Retirement, Retiring
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.history_tables import HistoryDamagedError
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.core.detector.alert_signals import AlertSignal

log = structlog.get_logger("nodeagent.collector")

# The latest report of each node is rewritten at most this often (it serves queries after a
# restart); counters and watermarks go out with every flush.
LATEST_EVERY_SECONDS = 10.0
# Nodes whose open minute waits to be written (and took no report since the last flush) are
# looked at this often, not with every flush: thousands of them, twenty flushes a second.
PENDING_CHECK_SECONDS = 0.25


class Flusher:
    """The flush of the nodes an ``Ingest`` holds, and the acks that follow each commit."""

    def __init__(
        self,
        nodes: dict[str, NodeState],
        writer: StoreWriter,
        alerting: Alerting,
        *,
        flush_seconds: float,
        clock: Callable[[], float],
        history: HistoryConfig,
        retirement: Retirement | None = None,
        resting: Resting | None = None,
        history_guard: HistoryGuard | None = None,
        worker: str = "",
    ) -> None:
        """``history_guard``: the one that read the history at the start (a new one without);
        ``worker``: this worker's index ("" alone), named by the store-failing alert."""
        self.nodes = nodes
        self.writer = writer
        self.alerting = alerting
        self.flush_seconds = flush_seconds
        self.clock = clock
        self.history_config = history
        # The nodes each flush retires (``retire``): none without one.
        self.retirement = retirement or Retirement(0.0, clock())
        self.history_guard = history_guard or HistoryGuard(history.enabled)
        # Silent nodes shrunk to what the views show (``resting``): none without one.
        self.resting = resting
        # Since when flushes fail (None while they commit): new streams are turned away after a
        # while, so agents fail over to a collector that can make their reports durable.
        self.failing_since: float | None = None
        # The last failed flush's error, while flushes fail ("" while they commit).
        self.failure = ""
        # CollectorStoreFailing, sent to the sinks directly: the book cannot commit it meanwhile.
        self.store_alert = StoreFailingAlert(alerting.dispatcher, worker=worker)
        self.stats = FlushStats()
        self._dirty: set[str] = set()
        self._touched: set[StreamHandle] = set()
        # Nodes whose open minute holds reports not written yet (see NodeHistory.take).
        self._history_pending: set[str] = set()
        self._pending_checked_at = -math.inf  # monotonic
        self._swept_at = 0.0  # the collector's clock at the last retention sweep over every node

    # ---- what the intake tells it ----

    def changed(self, node_id: str) -> None:
        """The node's row (or its watermarks) changed: the next flush writes it."""
        self._dirty.add(node_id)

    def wants_ack(self, stream: StreamHandle) -> None:
        """The stream took a report: after each commit, see whether its ack can go."""
        self._touched.add(stream)

    def forget(self, stream: StreamHandle) -> None:
        self._touched.discard(stream)

    def failing_for(self) -> float:
        """Seconds the store has been failing to commit (0 when it commits)."""
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since

    def failing_store(self) -> tuple[float, str] | None:
        """While flushes fail: for how many seconds, and the last one's error (for ``nodes`` and
        the fleet page); None while they commit."""
        if self.failing_since is None:
            return None
        return self.failing_for(), self.failure

    def failing(self) -> str | None:
        """While flushes fail: the store's trouble in one line, for ``/healthz``."""
        failing = self.failing_store()
        if failing is None:
            return None
        return f"store failing for {failing[0]:.0f} s: {failing[1]}"

    # ---- flushing ----

    async def run(self) -> None:
        """Flush forever. A failed flush (a lock held too long, a full disk) is retried with the
        same rows and signals: nothing is acknowledged meanwhile, and nothing is lost."""
        delay = self.flush_seconds
        while True:
            await asyncio.sleep(delay)
            try:
                await self.flush()
                delay = self.flush_seconds
                self.failing_since, self.failure = None, ""
            except Exception as err:
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                delay = min(5.0, max(delay * 2, 0.5))
                self.failure = f"{type(err).__name__}: {err}"
                log.error("store flush failed; retrying", error=self.failure, retry_seconds=delay)
            self.store_alert.observe(self.failing_for(), self.failure)

    async def flush(self, final: bool = False) -> None:
        """One transaction of what changed; ``final`` (a stopping collector): every open minute too."""
        now = self.clock()
        doomed = self.retirement.take(self.nodes, now)
        batch, marks = self._take_batch()
        # A node retired now first has every open minute written (as at a stop): its history stays.
        history = self._take_history(batch, math.inf if final or doomed else time.monotonic())
        if self.history_config.enabled and now - self._swept_at >= PRUNE_EVERY_SECONDS:
            config = self.history_config
            history.sweep = (now - config.reports_seconds, now - config.retention_seconds)
            self._swept_at = now
        signals = self.alerting.take(now, self._last_seen, self._moved, self._stopped)
        signals.extend(self.history_guard.take_signals())
        started = time.perf_counter()
        try:
            refused = await self.writer.call(self._write, batch, signals, now, history, doomed)
        except Exception as err:
            self.retirement.failed(self.nodes, doomed, f"{type(err).__name__}: {err}")
            self.stats.failures_total += 1
            self._put_back(batch, marks, signals)
            self._put_back_history(history)
            if history.sweep is not None:
                self._swept_at = 0.0  # sweep again at the next flush
            raise
        self.stats.observe(time.perf_counter() - started, len(batch), wrote=bool(batch or signals))
        for node_id, error in refused.items():
            self._set_aside(node_id, error)
        for row in batch:
            if row.node_id not in refused:
                self.nodes[row.node_id].committed = bare(row)
        for node_id, epoch, seq in marks:
            if node_id not in refused:
                durable = self.nodes[node_id].durable
                durable[epoch] = max(durable.get(epoch, 0), seq)
        self._send_acks()
        if doomed:
            self._retired(doomed)
        if self.resting is not None:
            self.resting.check(self.nodes, now, self._history_pending)

    def _write(
        self,
        batch: list[NodeRow],
        signals: list[AlertSignal],
        now: float,
        history: HistoryBatch | None = None,
        doomed: list[Retiring] | None = None,
    ) -> dict[str, str]:
        """On the store's thread: one transaction for reports, their history, alerts and the
        nodes retired, then the sinks. Returns the nodes whose rows the store refused (node id -> error).

        When the history cannot be written, SQLite has ended the whole transaction: the same
        rows and signals, and the HistoryUnavailable alert, are written again at once without it."""
        refused: dict[str, str] = {}
        store = self.writer.store
        guard = self.history_guard
        keep = history if history and guard.available else None

        def before_commit() -> None:
            if keep is not None:
                store.history.write(keep)
            self.alerting.write(signals, now)
            if doomed:
                self.retirement.write(store, self.alerting, doomed, now)

        wrote_history = False
        if batch or signals or keep is not None or doomed:
            try:
                try:
                    refused = store.write(batch, before_commit)
                except HistoryDamagedError as err:
                    self.alerting.rolled_back()
                    guard.failed(err, "a flush")
                    signals.extend(guard.take_signals())
                    keep = None
                    refused = store.write(batch, before_commit)
            except BaseException:
                self.alerting.rolled_back()
                raise
            wrote_history = keep is not None
        self.alerting.committed(now)
        guard.committed(wrote_history, self._history_alert_firing)
        return refused

    def _retired(self, doomed: list[Retiring]) -> None:
        """The retirement committed: the nodes go from memory, and from what the flusher tracks."""
        for item in doomed:
            self._dirty.discard(item.node_id)
            self._history_pending.discard(item.node_id)
        self.retirement.finish(self.nodes, doomed)

    def _history_alert_firing(self) -> bool:
        return any(alert.name == HISTORY_UNAVAILABLE for alert in self.alerting.recent(False))

    def _set_aside(self, node_id: str, error: str) -> None:
        """A node whose row the store refused: it is written no more and its streams are refused,
        so it cannot hold up anyone else's flush; a restart reloads it from its last commit."""
        node = self.nodes[node_id]
        node.unstorable = error
        node.dirty_epochs.clear()
        self._dirty.discard(node_id)
        log.error("node state cannot be stored; refusing this node until a restart", node=node_id, error=error)

    def _put_back(self, batch: list[NodeRow], marks: list[tuple[str, int, int]], signals: list[AlertSignal]) -> None:
        """A batch that did not commit goes back to be written by the next flush."""
        for row in batch:
            node = self.nodes[row.node_id]
            self._dirty.add(row.node_id)
            if row.info is not None and node.row.info is None:
                node.row.info = row.info
            if row.latest is not None:
                node.latest_written_at = 0.0
        for node_id, epoch, _seq in marks:
            self.nodes[node_id].dirty_epochs.add(epoch)
        self.alerting.put_back(signals)

    def _take_history(self, batch: list[NodeRow], wall: float) -> HistoryBatch:
        """The history of the nodes in ``batch``, and the open minutes of quiet nodes left unwritten."""
        merged = HistoryBatch()
        taking = {row.node_id for row in batch}
        if wall - self._pending_checked_at >= PENDING_CHECK_SECONDS:
            # A node not in the batch took no report since the last flush: it has nothing to
            # hand over but its open minute, and that only once due (quiet, or put back).
            taking.update(n for n in self._history_pending if n not in taking and self._due(n, wall))
            if wall < math.inf:
                self._pending_checked_at = wall
        for node_id in taking:
            history = self.nodes[node_id].history
            if history is not None:
                taken = history.take(wall)
                merged.reports.extend(taken.reports)
                merged.minutes.extend(taken.minutes)
                merged.prune.update(taken.prune)
                merged.compact.extend(taken.compact)
                merged.owners.extend(taken.owners)
                if history.pending:
                    self._history_pending.add(node_id)
                else:
                    self._history_pending.discard(node_id)
        return merged

    def _due(self, node_id: str, wall: float) -> bool:
        history = self.nodes[node_id].history
        return history is None or history.due(wall)

    def _put_back_history(self, history: HistoryBatch) -> None:
        per_node: dict[str, HistoryBatch] = {}
        for report in history.reports:
            per_node.setdefault(report.node_id, HistoryBatch()).reports.append(report)
        for minute in history.minutes:
            per_node.setdefault(minute.node_id, HistoryBatch()).minutes.append(minute)
        for node_id, cutoffs in history.prune.items():
            per_node.setdefault(node_id, HistoryBatch()).prune[node_id] = cutoffs
        # The hours to sum and the jobs' owners too: an hour not summed would read as nothing
        # (the ledger reads summed hours up to a node's last one).
        for node_id, hour in history.compact:
            per_node.setdefault(node_id, HistoryBatch()).compact.append((node_id, hour))
        for owner in history.owners:
            per_node.setdefault(owner[0], HistoryBatch()).owners.append(owner)
        for node_id, mine in per_node.items():
            node_history = self.nodes[node_id].history
            if node_history is not None:
                node_history.put_back(mine)
                self._history_pending.add(node_id)

    def _last_seen(self) -> dict[str, float]:
        """Each node's last report, for NodeDown: not of a node that moved to another collector or
        stopped, and for one back from there, no earlier than its return."""
        return {
            # A stopped node that connects again: its silence counts from then, not from its stop.
            node_id: max(node.row.last_seen, node.returned_at, node.attached_at if node.stopped_at else 0.0)
            for node_id, node in self.nodes.items()
            if node.row.last_seen and not node.moved_at and not node.stopped
        }

    def _moved(self) -> list[str]:
        return [node_id for node_id, node in self.nodes.items() if node.moved_at]

    def _stopped(self) -> dict[str, float]:
        """The nodes whose agents stopped cleanly, and when (the collector's clock)."""
        return {node_id: node.stopped_at for node_id, node in self.nodes.items() if node.stopped}

    def _take_batch(self) -> tuple[list[NodeRow], list[tuple[str, int, int]]]:
        now = self.clock()
        batch: list[NodeRow] = []
        marks: list[tuple[str, int, int]] = []
        for node_id in self._dirty:
            node = self.nodes[node_id]
            if node.unstorable is not None:
                continue
            row = node.row
            snapshot = dataclasses.replace(row, watermarks={})
            row.info = None  # written once; the table keeps it
            if node.latest is not None and now - node.latest_written_at >= LATEST_EVERY_SECONDS:
                snapshot.latest = node.latest
                node.latest_written_at = now
            else:
                snapshot.latest = None
            for epoch in node.dirty_epochs:
                snapshot.watermarks[epoch] = node.seen[epoch]
                marks.append((node_id, epoch, node.seen[epoch]))
            node.dirty_epochs.clear()
            batch.append(snapshot)
        self._dirty.clear()
        return batch, marks

    def _send_acks(self) -> None:
        still_waiting: set[StreamHandle] = set()
        for stream in self._touched:
            node = self.nodes.get(stream.node_id)
            if node is None or node.stream is not stream:
                continue
            durable = node.durable.get(stream.epoch, 0)
            if durable > stream.acked_sent:
                stream.wake.set()
            if durable < stream.ack_wanted:
                still_waiting.add(stream)
        self._touched = still_waiting
