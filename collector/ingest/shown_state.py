"""The state word of a node this collector holds (``collector/states/``), at the collector's clock:
``down`` after ``[alerts] node_down_seconds`` of silence, the threshold ``NodeDown`` fires on too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeagent.collector.states.words import shown_state

if TYPE_CHECKING:
    from nodeagent.collector.ingest.intake import Ingest
    from nodeagent.collector.ingest.node_state import NodeState


def down_after_seconds(ingest: Ingest) -> float:
    """How long a node may be silent before it is ``down``: ``[alerts] node_down_seconds``, the
    threshold of ``NodeDown`` too, so that ``nodes`` and the alert never disagree."""
    return ingest.alerting.config.node_down_seconds


def is_silent(node: NodeState, now: float, down_seconds: float) -> bool:
    """No report for ``down_seconds`` (``down_after_seconds``): the verdict is no longer about now."""
    return node.row.last_seen <= now - down_seconds


def node_shown_state(node: NodeState, now: float, down_seconds: float) -> str:
    """``shown_state`` of a node the collector holds, at ``now`` (the collector's clock)."""
    detector = node.detector
    verdict = detector.verdict if detector is not None and detector.verdict.time_unix_seconds else None
    return shown_state(
        verdict.state if verdict is not None else None,
        gpu_count=node.row.gpu_count,
        heard=bool(node.row.last_seen),
        silent=is_silent(node, now, down_seconds),
        moved=bool(node.moved_at),
        stopped=node.stopped,
    )
