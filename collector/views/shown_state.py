"""The one state word a node has, the same in every view: ``nodes``, the fleet page, ``/metrics``,
remote write and the history.

The detector's verdict says what the node's GPUs do while its reports come; two facts it cannot
see override it. A node silent for ``[alerts] node_down_seconds`` is ``down`` (its last verdict
says nothing of now; the views that show it say when it was last heard): the one threshold, which
``NodeDown`` fires on too (``alerts/report_rules.py``). A node without a GPU
is ``no-gpu`` rather than ``idle`` (nothing there can wait for data). A node that said hello but
sent no report yet is ``new``. A node whose agent said goodbye (it moved to another collector,
its routing key ranks that one first) is ``moved`` until it connects here again: not down. One
whose agent said goodbye because it stopped cleanly (``--max-reports`` done, SIGTERM) is
``stopped`` until it connects again: not down either. Any
other state, one the detector adds later included, passes through as the detector says it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from nodeagent.collector.ingest.intake import Ingest
    from nodeagent.collector.ingest.node_state import NodeState

DOWN: Final = "down"
NO_GPU: Final = "no-gpu"
NEW: Final = "new"
MOVED: Final = "moved"
STOPPED: Final = "stopped"


def shown_state(
    verdict_state: str | None, *, gpu_count: int, heard: bool = True, silent: bool = False, moved: bool = False,
    stopped: bool = False,
) -> str:  # fmt: skip
    """The word for a node whose detector says ``verdict_state`` (None: it has none); ``heard``:
    a report ever arrived; ``silent``: none for the down threshold; ``moved``: its agent said
    goodbye and went to another collector; ``stopped``: its agent said goodbye and stopped."""
    if moved:
        return MOVED
    if stopped:
        return STOPPED
    if not heard:
        return NEW
    if silent:
        return DOWN
    if not gpu_count and verdict_state in (None, "", "idle"):
        return NO_GPU
    return verdict_state or "idle"


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
