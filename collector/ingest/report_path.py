"""The per-report path: validate, deduplicate, update the node, and acknowledge once durable.

Every node's state lives in memory. A report is new when its seq is above the node's watermark
for its epoch (reports arrive in order on a stream, so one number per epoch is the whole dedup
state); anything at or below it is a duplicate, counted and acknowledged again, never stored
twice. The flusher writes the changed nodes in one SQLite transaction every ``flush_seconds``;
after the commit it tells each stream how far its node is durable, and only then do acks go out.

One stream can move its node's state only so far (``MAX_SEQ_JUMP``, ``MAX_EPOCHS_PER_STREAM``,
counters saturating below SQLite's integer limit), and a node whose row still cannot be written is
set aside by itself: its streams are refused, every other node's reports go on being stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from nodeagent.collector.alerts.front import Alerting
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.rollup import PRUNE_EVERY_SECONDS, HistoryConfig, NodeHistory
from nodeagent.collector.ingest.flush_stats import FlushStats
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.nodes import INTEGER_MAX, NodeRow
from nodeagent.collector.views.node_timeline import NodeTimeline
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.collector")

# Watermarks kept per node: an agent restarted without its spool starts a new epoch, and only the
# latest ones can still have reports in flight.
MAX_EPOCHS = 8

# The latest report of each node is rewritten at most this often (it serves queries after a
# restart); counters and watermarks go out with every flush.
LATEST_EVERY_SECONDS = 10.0

# The furthest one report may move its epoch's seq past the stored one. A real gap is reports the
# agent's spool dropped (oldest first): at 1 Hz, 2^32 is over a century of them. A bigger jump is
# not an agent's, and without a bound a few of them add up past what SQLite can store.
MAX_SEQ_JUMP = 1 << 32
# An agent keeps one epoch for as long as it keeps its spool; a stream needs one, two at a restart.
MAX_EPOCHS_PER_STREAM = 2
# Nodes one collector holds unless told otherwise (``serve --max-nodes``): a shard of 1 Hz agents
# tops out near 4,000 reports/s, so this is room to spare, and still a bound on memory and the store.
DEFAULT_MAX_NODES = 10_000


class StreamRefusedError(Exception):
    """A report or a stream the collector will not take: the gRPC status name, a short reason
    (the ``reason`` label of ``nodeagent_ingest_streams_rejected_total``) and one line saying why."""

    def __init__(self, code: str, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.reason = reason
        self.detail = detail


class StreamHandle:
    """One agent stream, as the flusher sees it: where to send acks and how far they went."""

    __slots__ = (
        "ack_wanted", "acked_sent", "attach_ack", "context", "epoch", "epochs", "node_id", "peer", "task", "wake",
    )  # fmt: skip

    def __init__(self, node_id: str, peer: str, context: object = None) -> None:
        self.node_id = node_id
        self.peer = peer
        self.epoch = 0
        self.acked_sent = 0
        self.ack_wanted = 0
        # Every epoch this stream has carried (at most MAX_EPOCHS_PER_STREAM).
        self.epochs: set[int] = set()
        self.wake = asyncio.Event()
        # The stream's grpc context, so a newer stream of the same node can end this one.
        self.context = context
        self.task: asyncio.Task[object] | None = None
        # (epoch, seq) the stream's first ack says: what was stored of the node when it attached.
        self.attach_ack: tuple[int, int] | None = None


@dataclass(slots=True)
class NodeState:
    row: NodeRow
    # epoch -> highest stored seq (in memory) and highest durable seq (committed).
    seen: dict[int, int] = field(default_factory=dict)
    durable: dict[int, int] = field(default_factory=dict)
    stream: StreamHandle | None = None
    latest_written_at: float = 0.0
    latest: bytes | None = None
    dirty_epochs: set[int] = field(default_factory=set)
    detector: NodeDetector | None = None
    detector_epoch: int = 0
    # The row as last committed: what queries show (the in-memory row runs ahead of the store).
    committed: NodeRow | None = None
    # Why this node's row cannot be stored, once a commit refused it; None while it can.
    unstorable: str | None = None
    # What the fleet page draws of the node's recent past.
    timeline: NodeTimeline = field(default_factory=NodeTimeline)
    # Its open minute and the reports its next flush writes into the history; None when off.
    history: NodeHistory | None = None


class Ingest:
    def __init__(
        self,
        writer: StoreWriter,
        alerting: Alerting,
        *,
        detector_config: DetectorConfig | None = None,
        flush_seconds: float = 0.05,
        clock: Callable[[], float] = time.time,
        max_nodes: int = DEFAULT_MAX_NODES,
        history: HistoryConfig | None = None,
    ) -> None:
        self.writer = writer
        self.max_nodes = max_nodes
        self.alerting = alerting
        self.detector_config = detector_config or DetectorConfig()
        # Since when flushes fail (None while they commit): new streams are turned away after a
        # while, so agents fail over to a collector that can make their reports durable.
        self.failing_since: float | None = None
        writer.call_sync(alerting.open, writer.store.alerts)
        self.flush_seconds = flush_seconds
        self.clock = clock
        self.nodes: dict[str, NodeState] = {}
        self._dirty: set[str] = set()
        self._touched: set[StreamHandle] = set()
        self._flushed = asyncio.Event()
        self.reports_total = 0
        self.duplicates_total = 0
        self.flush_stats = FlushStats()
        # Called with every new report and its node's verdict (remote write): each only queues.
        self.report_observers: list[Callable[[pb.NodeReport, NodeVerdict], None]] = []
        self.history_config = history or HistoryConfig()
        # Nodes whose open minute holds reports not written yet (see NodeHistory.take).
        self._history_pending: set[str] = set()
        self._swept_at = 0.0  # the collector's clock at the last retention sweep over every node
        self._history_seed = writer.call_sync(writer.store.history.seed) if self.history_config.enabled else {}
        # Each node's GPU time lost on its last stored day, read here, before any report of this
        # run is accepted (let alone flushed into the history): the day's count starts from it
        # and adds only what this run's detectors see, so nothing is counted twice (docs/views.md).
        lost_days = writer.call_sync(writer.store.history.lost_on_last_day) if self.history_config.enabled else {}
        # Since when this collector counts GPU time lost in memory alone (``--no-history``).
        self.counting_since = clock()
        for row in writer.call_sync(writer.store.nodes.load):
            marks = dict(sorted(row.watermarks.items())[-MAX_EPOCHS:])
            row.watermarks = {}
            committed = _bare(row)
            node = NodeState(row=row, seen=dict(marks), durable=marks, latest=row.latest, committed=committed)
            lost_day = lost_days.get(row.node_id)
            if lost_day is not None:
                node.timeline.seed_lost_today(*lost_day)
            self.nodes[row.node_id] = node

    # ---- streams ----

    def attach(self, stream: StreamHandle, hello: pb.NodeInfo) -> StreamHandle | None:
        """Make ``stream`` the node's stream; returns the stream it replaces, if any.

        ``StreamRefusedError`` when the collector holds ``max_nodes`` others already, or when this
        node's row could not be stored (until a restart reloads it from what was committed)."""
        node = self.nodes.get(stream.node_id)
        if node is None and len(self.nodes) >= self.max_nodes:
            raise StreamRefusedError(
                "RESOURCE_EXHAUSTED", "max_nodes",
                f"this collector holds {len(self.nodes)} nodes, its limit (--max-nodes); "
                f"node {stream.node_id!r} must go to another collector",
            )  # fmt: skip
        node = self._node(stream.node_id)
        _refuse_unstorable(node)
        previous = node.stream
        node.stream = stream
        # Acknowledge at once what is already durable of the node's latest epoch (even nothing):
        # reports committed just before the collector went away were never acked, and an agent
        # whose spool dropped them meanwhile waits for this ack to learn whether they are stored.
        durable = node.durable.get(node.row.epoch, 0)
        stream.attach_ack = (node.row.epoch, durable)
        if durable:
            stream.epoch = node.row.epoch
        stream.wake.set()
        if hello.hostname:
            node.row.hostname = hello.hostname
            node.row.agent_version = hello.agent_version
        if hello.gpu.gpus:
            node.row.gpu_count = len(hello.gpu.gpus)
        self.alerting.observe_info(stream.node_id, hello)
        return previous

    def detach(self, stream: StreamHandle) -> None:
        node = self.nodes.get(stream.node_id)
        if node is not None and node.stream is stream:
            node.stream = None
        self._touched.discard(stream)

    def accept(self, stream: StreamHandle, report: pb.NodeReport, raw: bytes) -> bool:
        """Take one validated report; False when it was a duplicate.

        ``StreamRefusedError`` (and nothing changed) for a report that would move the node further
        than one agent can: a seq jump above ``MAX_SEQ_JUMP``, a third epoch on one stream."""
        node = self.nodes[stream.node_id]
        epoch, seq = report.epoch, report.seq
        _refuse_unstorable(node)
        mark = node.seen.get(epoch, 0)
        if seq - mark > MAX_SEQ_JUMP:
            raise StreamRefusedError(
                "INVALID_ARGUMENT", "seq_jump",
                f"seq {seq} in epoch {epoch} is more than {MAX_SEQ_JUMP} past the stored seq {mark}",
            )  # fmt: skip
        if epoch not in stream.epochs:
            if len(stream.epochs) >= MAX_EPOCHS_PER_STREAM:
                raise StreamRefusedError(
                    "INVALID_ARGUMENT", "too_many_epochs",
                    f"epoch {epoch} would be epoch number {len(stream.epochs) + 1} on one stream "
                    f"(at most {MAX_EPOCHS_PER_STREAM})",
                )  # fmt: skip
            stream.epochs.add(epoch)
        if stream.epoch != epoch:  # acks count per epoch
            stream.epoch, stream.acked_sent, stream.ack_wanted = epoch, 0, 0
        stream.ack_wanted = max(stream.ack_wanted, seq)
        self._touched.add(stream)
        row = node.row
        if seq <= mark:
            row.duplicates_total = min(INTEGER_MAX, row.duplicates_total + 1)
            if seq <= node.durable.get(epoch, 0):
                stream.wake.set()  # already durable: its ack need not wait for the next flush
            self.duplicates_total += 1
            self._dirty.add(row.node_id)
            return False
        if mark and seq > mark + 1:
            # Saturates: a count that cannot be stored would stop every flush of this node.
            row.gap_reports_total = min(INTEGER_MAX, row.gap_reports_total + seq - mark - 1)
        if not mark and len(node.seen) >= MAX_EPOCHS:
            _forget_oldest_epoch(node)
        node.seen[epoch] = seq
        node.dirty_epochs.add(epoch)
        now = self.clock()
        if not row.first_seen:
            row.first_seen = now
        row.last_seen = now
        row.reports_total = min(INTEGER_MAX, row.reports_total + 1)
        row.epoch, row.last_seq = epoch, seq
        row.spool_dropped_total = report.agent.spool_dropped_reports_total
        if report.HasField("info"):
            row.info = report.info.SerializeToString()
            row.hostname = report.info.hostname or row.hostname
            row.agent_version = report.info.agent_version or row.agent_version
            row.gpu_count = len(report.info.gpu.gpus)
            self.alerting.observe_info(row.node_id, report.info)
        self.alerting.observe(row.node_id, report)
        detector = node.detector
        if detector is None or node.detector_epoch != epoch:
            # A new epoch is a restarted agent: its clock (or a simulation's) starts afresh, and
            # the old windows say nothing about it.
            detector = node.detector = NodeDetector(row.node_id, self.detector_config)
            node.detector_epoch = epoch
        before = detector.verdict
        if detector.observe(report) is not before:  # a new verdict (the window advanced)
            self.alerting.add(detector.signals())
            node.timeline.record(detector)
        if self.history_config.enabled:
            if node.history is None:
                node.history = NodeHistory(row.node_id, self.history_config)
                seed = self._history_seed.pop(row.node_id, None)
                if seed is not None:
                    node.history.restore(*seed)
            node.history.observe(report, raw, detector.verdict)
        for observer in self.report_observers:
            observer(report, detector.verdict)
        node.latest = raw
        self.reports_total += 1
        self._dirty.add(row.node_id)
        return True

    # ---- flushing ----

    async def run_flusher(self) -> None:
        """Flush forever. A failed flush (a lock held too long, a full disk) is retried with the
        same rows and signals: nothing is acknowledged meanwhile, and nothing is lost."""
        delay = self.flush_seconds
        while True:
            await asyncio.sleep(delay)
            try:
                await self.flush()
                delay = self.flush_seconds
                self.failing_since = None
            except Exception as err:
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                delay = min(5.0, max(delay * 2, 0.5))
                log.error("store flush failed; retrying", error=f"{type(err).__name__}: {err}", retry_seconds=delay)

    async def flush(self, final: bool = False) -> None:
        """One transaction of what changed; ``final`` (a stopping collector): every open minute too."""
        now = self.clock()
        batch, marks = self._take_batch()
        history = self._take_history(batch, math.inf if final else time.monotonic())
        if self.history_config.enabled and now - self._swept_at >= PRUNE_EVERY_SECONDS:
            config = self.history_config
            history.sweep = (now - config.reports_seconds, now - config.retention_seconds)
            self._swept_at = now
        signals = self.alerting.take(now, self._last_seen)
        started = time.perf_counter()
        try:
            refused = await self.writer.call(self._write, batch, signals, now, history)
        except Exception:
            self.flush_stats.failures_total += 1
            self._put_back(batch, marks, signals)
            self._put_back_history(history)
            if history.sweep is not None:
                self._swept_at = 0.0  # sweep again at the next flush
            raise
        self.flush_stats.observe(time.perf_counter() - started, len(batch), wrote=bool(batch or signals))
        for node_id, error in refused.items():
            self._set_aside(node_id, error)
        for row in batch:
            if row.node_id not in refused:
                self.nodes[row.node_id].committed = _bare(row)
        for node_id, epoch, seq in marks:
            if node_id not in refused:
                durable = self.nodes[node_id].durable
                durable[epoch] = max(durable.get(epoch, 0), seq)
        self._send_acks()

    def _write(
        self, batch: list[NodeRow], signals: list[AlertSignal], now: float, history: HistoryBatch | None = None
    ) -> dict[str, str]:
        """On the store's thread: one transaction for reports, their history and alerts, then the
        sinks. Returns the nodes whose rows the store refused (node id -> error)."""
        refused: dict[str, str] = {}
        store = self.writer.store

        def before_commit() -> None:
            if history:
                store.history.write(history)
            self.alerting.write(signals, now)

        if batch or signals or history:
            try:
                refused = store.write(batch, before_commit)
            except BaseException:
                self.alerting.rolled_back()
                raise
        self.alerting.committed(now)
        return refused

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
        for node_id in {row.node_id for row in batch} | self._history_pending:
            history = self.nodes[node_id].history
            if history is not None:
                taken = history.take(wall)
                merged.reports.extend(taken.reports)
                merged.minutes.extend(taken.minutes)
                merged.prune.update(taken.prune)
                if history.pending:
                    self._history_pending.add(node_id)
                else:
                    self._history_pending.discard(node_id)
        return merged

    def _put_back_history(self, history: HistoryBatch) -> None:
        per_node: dict[str, HistoryBatch] = {}
        for report in history.reports:
            per_node.setdefault(report.node_id, HistoryBatch()).reports.append(report)
        for minute in history.minutes:
            per_node.setdefault(minute.node_id, HistoryBatch()).minutes.append(minute)
        for node_id, cutoffs in history.prune.items():
            per_node.setdefault(node_id, HistoryBatch()).prune[node_id] = cutoffs
        for node_id, mine in per_node.items():
            node_history = self.nodes[node_id].history
            if node_history is not None:
                node_history.put_back(mine)
                self._history_pending.add(node_id)

    def _last_seen(self) -> dict[str, float]:
        return {node_id: node.row.last_seen for node_id, node in self.nodes.items() if node.row.last_seen}

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

    def store_failing_for(self) -> float:
        """Seconds the store has been failing to commit (0 when it commits)."""
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since

    def durable_seq(self, stream: StreamHandle) -> int:
        node = self.nodes.get(stream.node_id)
        return node.durable.get(stream.epoch, 0) if node is not None else 0

    def _node(self, node_id: str) -> NodeState:
        node = self.nodes.get(node_id)
        if node is None:
            node = NodeState(row=NodeRow(node_id=node_id))
            self.nodes[node_id] = node
        return node


def _bare(row: NodeRow) -> NodeRow:
    """The row without its blobs and watermarks: what a query needs of a committed row."""
    return dataclasses.replace(row, info=None, latest=None, watermarks={})


def _refuse_unstorable(node: NodeState) -> None:
    if node.unstorable is not None:
        raise StreamRefusedError(
            "UNAVAILABLE", "node_unstorable",
            f"node {node.row.node_id!r} cannot be stored here ({node.unstorable}); try another collector",
        )  # fmt: skip


def _forget_oldest_epoch(node: NodeState) -> None:
    oldest = min((e for e in node.seen if e not in node.dirty_epochs), default=None)
    if oldest is not None:
        node.seen.pop(oldest, None)
        node.durable.pop(oldest, None)
