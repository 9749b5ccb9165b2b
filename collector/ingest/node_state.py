"""What the ingest path holds of each node and each of its streams, and how far one stream may
move a node.

Every node's state lives in memory (``NodeState``): its row as it runs ahead of the store and as
last committed, per epoch the highest seq stored and the highest durable, and what each stage
keeps of it (detector, timeline, history). ``StreamHandle`` is one agent stream as the flusher
sees it: where its acks go and how far they went.

One stream can move its node's state only so far (``MAX_SEQ_JUMP``, ``MAX_EPOCHS_PER_STREAM``,
counters saturating below SQLite's integer limit), one collector holds only so many nodes
(``DEFAULT_MAX_NODES``), and a node whose row cannot be written is set aside by itself: a stream
or report past any of these is refused with ``StreamRefusedError``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass, field

from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.ingest.node_timeline import NodeTimeline
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.core.detector.node import NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb

# Watermarks kept per node: an agent restarted without its spool starts a new epoch, and only the
# latest ones can still have reports in flight.
MAX_EPOCHS = 8

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
        "ack_wanted", "acked_sent", "attach_ack", "context", "epoch", "epochs", "goodbye", "node_id", "peer",
        "stopping", "task", "wake",
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
        # The agent said goodbye (it moves to another collector, or ``stopping``: it stops): no
        # more reports on this stream.
        self.goodbye = False
        self.stopping = False


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
    # The node's latest topology (its hello's, or a report's): a detector started for a new epoch,
    # or after the node came over from another collector, learns its links from it at once.
    topology: pb.NodeInfo | None = None
    # The row as last committed: what queries show (the in-memory row runs ahead of the store).
    committed: NodeRow | None = None
    # Why this node's row cannot be stored, once a commit refused it; None while it can.
    unstorable: str | None = None
    # What the fleet page draws of the node's recent past.
    timeline: NodeTimeline = field(default_factory=NodeTimeline)
    # Its open minute and the reports its next flush writes into the history; None when off.
    history: NodeHistory | None = None
    # The collector's clock when its latest stream attached: how long a node that said hello but
    # never sent a report has been silent (``retire``).
    attached_at: float = 0.0
    # Silent past the down threshold: its state shrank to what the views show (``resting``),
    # until its next report.
    resting: bool = False
    # Set while a flush retires the node: its streams are refused until it is gone.
    retiring: bool = False
    # The collector's clock when a stream that said goodbye ended (0: not moved): the node reports
    # to another collector now; shown ``moved``, left out of NodeDown. Its next stream clears it,
    # and from then (``returned_at``) NodeDown counts its silence again. Memory only: after a
    # restart a moved node reads as it was stored.
    moved_at: float = 0.0
    returned_at: float = 0.0
    # The collector's clock when a stream that said a stopping goodbye ended (0: it did not): the
    # agent stopped cleanly; shown ``stopped`` while no stream is attached, and no NodeDown unless
    # ``[alerts] node_stopped_down_seconds`` asks for one. The node's next stream that ends without
    # such a goodbye clears it. Memory only, like ``moved_at``.
    stopped_at: float = 0.0

    @property
    def stopped(self) -> bool:
        return bool(self.stopped_at) and self.stream is None

    def lost_today_seconds(self, now_unix_seconds: float) -> float:
        """GPU-seconds lost today (UTC, by the collector's clock), what ``nodes`` and the fleet page
        show: the ledger's split with a history, the detector's count without one (``NodeTimeline``)."""
        timeline = self.timeline
        if timeline.by_split or self.history is not None:
            return timeline.split_lost_today_at(now_unix_seconds, self.history)
        return timeline.lost_today_seconds_at(now_unix_seconds)

    # Its newest report's time minus the collector's clock when it arrived (None: none yet), and
    # its reports refused for a time out of bounds (``clock_bounds``), since this collector started.
    clock_skew_seconds: float | None = None
    clock_refused_total: int = 0
    # When its refusals were last logged, and how many since.
    clock_logged_at: float = -math.inf
    clock_unlogged: int = 0


def bare(row: NodeRow) -> NodeRow:
    """The row without its blobs and watermarks: what a query needs of a committed row."""
    return dataclasses.replace(row, info=None, latest=None, watermarks={})


def refuse_unstorable(node: NodeState) -> None:
    if node.unstorable is not None:
        raise StreamRefusedError(
            "UNAVAILABLE", "node_unstorable",
            f"node {node.row.node_id!r} cannot be stored here ({node.unstorable}); try another collector",
        )  # fmt: skip


def forget_oldest_epoch(node: NodeState) -> None:
    """Make room for a new epoch: the oldest one with nothing waiting to be written goes."""
    oldest = min((e for e in node.seen if e not in node.dirty_epochs), default=None)
    if oldest is not None:
        node.seen.pop(oldest, None)
        node.durable.pop(oldest, None)
