"""The one state word a node has, the same in every view: ``nodes``, the fleet page, ``/metrics``,
remote write and the history.

The detector's verdict says what the node's GPUs do while its reports come; two facts it cannot
see override it. A node silent for longer than the detector's window is ``down`` (its last verdict
says nothing of now; the views that show it say when it was last heard), and a node without a GPU
is ``no-gpu`` rather than ``idle`` (nothing there can wait for data). A node that said hello but
sent no report yet is ``new``. A node whose agent said goodbye (it moved to another collector,
its routing key ranks that one first) is ``moved`` until it connects here again: not down. Any
other state, one the detector adds later included, passes through as the detector says it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from nodeagent.collector.ingest.node_state import NodeState

DOWN: Final = "down"
NO_GPU: Final = "no-gpu"
NEW: Final = "new"
MOVED: Final = "moved"


def shown_state(
    verdict_state: str | None, *, gpu_count: int, heard: bool = True, silent: bool = False, moved: bool = False
) -> str:
    """The word for a node whose detector says ``verdict_state`` (None: it has none); ``heard``:
    a report ever arrived; ``silent``: none within the detector's window; ``moved``: its agent
    said goodbye and went to another collector."""
    if moved:
        return MOVED
    if not heard:
        return NEW
    if silent:
        return DOWN
    if not gpu_count and verdict_state in (None, "", "idle"):
        return NO_GPU
    return verdict_state or "idle"


def is_silent(node: NodeState, now: float, window_seconds: float) -> bool:
    """No report within the detector's window: the verdict is no longer about now."""
    return node.row.last_seen < now - window_seconds


def node_shown_state(node: NodeState, now: float, window_seconds: float) -> str:
    """``shown_state`` of a node the collector holds, at ``now`` (the collector's clock)."""
    detector = node.detector
    verdict = detector.verdict if detector is not None and detector.verdict.time_unix_seconds else None
    return shown_state(
        verdict.state if verdict is not None else None,
        gpu_count=node.row.gpu_count,
        heard=bool(node.row.last_seen),
        silent=is_silent(node, now, window_seconds),
        moved=bool(node.moved_at),
    )
