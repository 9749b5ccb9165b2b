"""The per-report path: take each validated report once, update its node, hand it to the stages.

Every node's state lives in memory (``node_state``). A report is new when its seq is above the
node's watermark for its epoch (reports arrive in order on a stream, so one number per epoch is
the whole dedup state); anything at or below it is a duplicate, counted and acknowledged again,
never stored twice. A new report goes to the alert rules, the node's detector, the job roll-up
(``collector/jobs/``: it may turn GPUs of this node or of others of its jobs `waiting`), then
(when the node's verdict changed) the timeline and the alert book, the node's history and the
remote write; the flusher (``flush``) then writes the changed nodes in one SQLite transaction
every ``flush_seconds`` and acknowledges once durable.

One stream can move its node's state only so far (the bounds in ``node_state``), and a node
whose row cannot be written is set aside by itself: its streams are refused, every other node's
reports go on being stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.history.batch import StoredReport
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.minutes import MinuteRow
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.ingest.clock_bounds import ClockRefusals
from nodeagent.collector.ingest.flush import Flusher
from nodeagent.collector.ingest.node_state import (
    MAX_EPOCHS,
    MAX_EPOCHS_PER_STREAM,
    MAX_SEQ_JUMP,
    NodeState,
    StreamHandle,
    StreamRefusedError,
    bare,
    forget_oldest_epoch,
    refuse_unstorable,
)
from nodeagent.collector.ingest.report_stages import ReportStages
from nodeagent.collector.ingest.resting import Resting
from nodeagent.collector.ingest.retire import Retirement, RetireRefusedError
from nodeagent.collector.jobs.membership_alerts import NAMES as MEMBERSHIP_ALERT_NAMES
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.signals import ALERT_NAME as JOB_ALERT_NAME
from nodeagent.collector.remote_write.process import RemoteWriteProcess
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.nodes import INTEGER_MAX, NodeRow
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.v1 import nodeagent_pb2 as pb


class Ingest:
    """Every node this collector holds, and the path each report of theirs takes into it. Built,
    its parts wired to each other, by ``collector/service/builder.py`` (``build_ingest``)."""

    def __init__(
        self,
        nodes: dict[str, NodeState],
        writer: StoreWriter,
        alerting: Alerting,
        jobs: JobRollup,
        stages: ReportStages,
        flusher: Flusher,
        *,
        retirement: Retirement,
        resting: Resting,
        history_seed: dict[str, tuple[list[MinuteRow], list[StoredReport]]],
        clock_refusals: ClockRefusals,
        remote_write: RemoteWriteProcess | None = None,
        detector_config: DetectorConfig,
        history: HistoryConfig,
        clock: Callable[[], float],
        max_nodes: int,
    ) -> None:
        """``nodes``: the nodes held, as the store had them (shared with the flusher);
        ``history_seed``: each stored node's open minute, for its history's first report;
        ``remote_write``: handed every new report, its node's verdict and its bytes as received
        (for its own process: it only queues)."""
        self.nodes = nodes
        self.writer = writer
        self.alerting = alerting
        # Every multi-node job's verdict over its nodes; its JobStraggler signals go to the book.
        self.jobs = jobs
        # Rules, detector, job roll-up and signals: the one order replay follows too.
        self.stages = stages
        self.flusher = flusher
        self.retirement = retirement
        # Silent nodes shrink to what the views show (``resting``); their history seeds from here.
        self.resting = resting
        self._history_seed = history_seed
        # Reports refused for a time too far from this collector's clock (None: no bounds).
        self.clock_refusals = clock_refusals
        self.remote_write = remote_write
        self.detector_config = detector_config
        self.history_config = history
        self.clock = clock
        self.max_nodes = max_nodes
        self.reports_total = 0
        self.duplicates_total = 0
        # Since when this collector counts GPU time lost in memory alone (``--no-history``).
        self.counting_since = clock()

    # ---- streams ----

    def attach(self, stream: StreamHandle, hello: pb.NodeInfo) -> StreamHandle | None:
        """Make ``stream`` the node's stream; returns the stream it replaces, if any.

        ``StreamRefusedError`` when the collector holds ``max_nodes`` others already, or when this
        node's row could not be stored (until a restart reloads it from what was committed)."""
        node = self.nodes.get(stream.node_id)
        if node is not None and node.retiring:
            raise StreamRefusedError(
                "UNAVAILABLE", "node_retiring",
                f"node {stream.node_id!r} is being retired; when it is gone, its next stream makes it a new node",
            )  # fmt: skip
        if node is None and len(self.nodes) >= self.max_nodes:
            raise StreamRefusedError(
                "RESOURCE_EXHAUSTED", "max_nodes",
                f"this collector holds {len(self.nodes)} nodes, its limit (--max-nodes); "
                f"node {stream.node_id!r} must go to another collector",
            )  # fmt: skip
        node = self._node(stream.node_id)
        refuse_unstorable(node)
        previous = node.stream
        node.stream = stream
        node.attached_at = self.clock()
        if node.moved_at:  # back from another collector
            node.moved_at, node.returned_at = 0.0, node.attached_at
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
        if hello.nics or hello.gpu.gpus or hello.rdma_ports:
            node.topology = known_topology(hello)
        return previous

    def detach(self, stream: StreamHandle) -> None:
        node = self.nodes.get(stream.node_id)
        if node is not None and node.stream is stream:
            node.stream = None
            # A stopping goodbye: the agent stopped cleanly, shown stopped; any other goodbye (an
            # older agent's too): it went to another collector, shown moved. Neither is down.
            node.stopped_at = self.clock() if stream.goodbye and stream.stopping else 0.0
            if stream.goodbye and not stream.stopping:
                node.moved_at = self.clock()
            if stream.goodbye:
                # Stopped or moved: its NodeStopped (or NodeDown resolved) at the next flush, in
                # step with `nodes` saying so, not up to a watch period later.
                self.alerting.watch_soon()
            if stream.goodbye and stream.stopping:
                # Out of its jobs now: a job whose nodes all stopped ends, its JobStraggler resolves.
                self.jobs.stop(stream.node_id)
                self.job_stage_changed()
        self.flusher.forget(stream)

    def accept(self, stream: StreamHandle, report: pb.NodeReport, raw: bytes) -> bool:
        """Take one validated report; False when it was not stored: a duplicate, or a report whose
        time is out of the clock bounds (acknowledged all the same, as a stored one is).

        ``StreamRefusedError`` (and nothing changed) for a report that would move the node further
        than one agent can: a seq jump above ``MAX_SEQ_JUMP``, a third epoch on one stream."""
        node = self.nodes[stream.node_id]
        epoch, seq = report.epoch, report.seq
        refuse_unstorable(node)
        mark = node.seen.get(epoch, 0)
        _refuse_beyond_one_agent(stream, epoch, seq, mark)
        if stream.epoch != epoch:  # acks count per epoch
            stream.epoch, stream.acked_sent, stream.ack_wanted = epoch, 0, 0
        stream.ack_wanted = max(stream.ack_wanted, seq)
        self.flusher.wants_ack(stream)
        if seq <= mark:
            self._duplicate(stream, node, epoch, seq)
            return False
        now = self.clock()
        refused = self.clock_refusals.judge(node, report.time_unix_seconds, now)
        _take_seq(node, epoch, seq, mark, now)
        if refused:
            # Its seq is taken (so it is acknowledged once durable, and not counted as a gap), and
            # nothing else: no stage sees it, the store keeps nothing of it.
            self.flusher.changed(node.row.node_id)
            return False
        self._store(node, report, raw)
        return True

    def _duplicate(self, stream: StreamHandle, node: NodeState, epoch: int, seq: int) -> None:
        row = node.row
        row.duplicates_total = min(INTEGER_MAX, row.duplicates_total + 1)
        if seq <= node.durable.get(epoch, 0):
            stream.wake.set()  # already durable: its ack need not wait for the next flush
        self.duplicates_total += 1
        self.flusher.changed(row.node_id)

    def _store(self, node: NodeState, report: pb.NodeReport, raw: bytes) -> None:
        """A new report in time: the node's row, its stages (``ReportStages``), timeline, history and
        remote write."""
        row = node.row
        row.reports_total = min(INTEGER_MAX, row.reports_total + 1)
        row.spool_dropped_total = report.agent.spool_dropped_reports_total
        if report.HasField("info"):
            row.info = report.info.SerializeToString()
            row.hostname = report.info.hostname or row.hostname
            row.agent_version = report.info.agent_version or row.agent_version
            row.gpu_count = len(report.info.gpu.gpus)
            self.alerting.observe_info(row.node_id, report.info)
            node.topology = known_topology(report.info)
        node.resting = False  # back from resting: a new detector, its history seeded
        changed = self.stages.take(row.node_id, node, report)
        detector = node.detector
        assert detector is not None  # the stages made it
        if changed:
            node.timeline.record(detector)
        if self.history_config.enabled:
            if node.history is None:
                node.history = NodeHistory(row.node_id, self.history_config)
                node.timeline.by_split = True
                seed = self._history_seed.pop(row.node_id, None)
                if seed is not None:
                    node.timeline.reopened(list(seed[0]))  # counted in the base: the history's now
                    node.history.restore(*seed)
            shares = self.jobs.nodes.ledger_shares(row.node_id)
            node.history.observe(report, raw, detector.verdict, detector.config.window_seconds, shares)
        if self.remote_write is not None:
            self.remote_write.offer(report, detector.verdict, raw)
        node.latest = raw
        self.reports_total += 1
        self.flusher.changed(row.node_id)

    async def forget(self, node_id: str) -> int:
        """Retire a node an operator names (``ForgetNode``), at the next flush; the number of its
        stored reports deleted. ``RetireRefusedError``: unknown here, or connected."""
        node = self.nodes.get(node_id)
        if node is None or node.retiring:
            raise RetireRefusedError("NOT_FOUND", f"node {node_id[:64]!r} is not known here")
        return await self.retirement.ask(node)

    def job_stage_changed(self) -> None:
        """The job stage judged messages from other workers or collectors: its signals to the book."""
        signals = self.jobs.signals()
        if signals:
            self.alerting.add(signals)

    async def tick_jobs(self) -> None:
        """Time ends jobs (``JobStage.tick``); and once a window and a step have passed since the
        start, a ``JobStraggler`` the book holds firing for a job this process no longer judges (it
        fired before a restart, or the job's owner is another process now) resolves."""
        self.jobs.tick()
        config = self.detector_config
        if self.clock() - self.counting_since >= config.window_seconds + config.evaluate_seconds:
            active = await self.writer.call(self.alerting.recent, False)
            firing = self.jobs.jobs.firing()
            held = self.jobs.jobs.membership_firing()
            orphans = [
                AlertSignal(name=a.name, node_id=a.node_id, key=a.key, firing=False)
                for a in active
                if (a.name == JOB_ALERT_NAME and (a.key, a.node_id) not in firing)
                or (a.name in MEMBERSHIP_ALERT_NAMES and (a.name, a.node_id, a.key) not in held)
            ]
            self.alerting.add(orphans)
        self.job_stage_changed()

    def durable_seq(self, stream: StreamHandle) -> int:
        node = self.nodes.get(stream.node_id)
        return node.durable.get(stream.epoch, 0) if node is not None else 0

    def _node(self, node_id: str) -> NodeState:
        node = self.nodes.get(node_id)
        if node is None:
            node = NodeState(row=NodeRow(node_id=node_id))
            self.nodes[node_id] = node
        return node


def load_nodes(rows: Iterable[NodeRow], lost_days: Mapping[str, tuple[int, float]]) -> dict[str, NodeState]:
    """The nodes the store holds, as a start finds them: each one's last epochs' watermarks and,
    from ``lost_days``, the GPU time lost on its last stored day (read before any report of this
    run is accepted: the day's count starts from it and adds only what this run's detectors see,
    so nothing is counted twice, docs/views.md)."""
    nodes: dict[str, NodeState] = {}
    for row in rows:
        marks = dict(sorted(row.watermarks.items())[-MAX_EPOCHS:])
        row.watermarks = {}
        committed = bare(row)
        node = NodeState(row=row, seen=dict(marks), durable=marks, latest=row.latest, committed=committed)
        lost_day = lost_days.get(row.node_id)
        if lost_day is not None:
            node.timeline.seed_lost_today(*lost_day)
        nodes[row.node_id] = node
    return nodes


def rewaited(nodes: Mapping[str, NodeState], alerting: Alerting, node_id: str) -> None:
    """The job roll-up changed another node's verdict: its signals and timeline, as after a step."""
    node = nodes.get(node_id)
    if node is not None and node.detector is not None:
        alerting.add(node.detector.signals())
        node.timeline.record(node.detector)


def split_lost(nodes: Mapping[str, NodeState], node_id: str, job: str) -> dict[int, float] | None:
    """The ledger's split of ``job``'s GPU-seconds lost on each of the node's GPUs (None without
    a history): what the job roll-up's steps carry."""
    node = nodes.get(node_id)
    return node.history.job_lost(job) if node is not None and node.history is not None else None


def known_topology(info: pb.NodeInfo) -> pb.NodeInfo:
    """A copy of a node's topology to keep: without fields this collector does not know (a flood
    of them must cost nothing held)."""
    kept = pb.NodeInfo()
    kept.CopyFrom(info)
    kept.DiscardUnknownFields()
    return kept


def _refuse_beyond_one_agent(stream: StreamHandle, epoch: int, seq: int, mark: int) -> None:
    """``StreamRefusedError`` for a seq jump above ``MAX_SEQ_JUMP`` past the stored ``mark``, or
    a third epoch on one stream; else the epoch is the stream's."""
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


def _take_seq(node: NodeState, epoch: int, seq: int, mark: int, now: float) -> None:
    """A new seq of the node's: gaps counted, the node's marks and times moved on."""
    row = node.row
    if mark and seq > mark + 1:
        # Saturates: a count that cannot be stored would stop every flush of this node.
        row.gap_reports_total = min(INTEGER_MAX, row.gap_reports_total + seq - mark - 1)
    if not mark and len(node.seen) >= MAX_EPOCHS:
        forget_oldest_epoch(node)
    node.seen[epoch] = seq
    node.dirty_epochs.add(epoch)
    if not row.first_seen:
        row.first_seen = now
    row.last_seen = now
    row.epoch, row.last_seq = epoch, seq
