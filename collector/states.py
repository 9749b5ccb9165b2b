"""The state words of nodes and jobs, their orders and a job's sentence, in one module: ``nodes``,
the fleet page, ``StreamJobs`` and ``jobs``, ``/metrics``, remote write, the history and replay all
say a state as this module does.

A node's one state word. The detector's verdict says what the node's GPUs do while its reports come; two facts it cannot
see override it. A node silent for ``[alerts] node_down_seconds`` is ``down`` (its last verdict
says nothing of now; the views that show it say when it was last heard): the one threshold, which
``NodeDown`` fires on too (``alerts/report_rules.py``). A node without a GPU
is ``no-gpu`` rather than ``idle`` (nothing there can wait for data). A node that said hello but
sent no report yet is ``new``. A node whose agent said goodbye (it moved to another collector,
its routing key ranks that one first) is ``moved`` until it connects here again: not down. One
whose agent said goodbye because it stopped cleanly (``--max-reports`` done, SIGTERM) is
``stopped`` until it connects again: not down either. Any
other state, one the detector adds later included, passes through as the detector says it.

A job's word is its roll-up verdict's (``jobs/verdict.py``); the fleet page shows ``down`` for
a job none of whose nodes reported within the detector's window (``job_shown_state``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from nodeagent.collector.ingest.intake import Ingest
    from nodeagent.collector.ingest.node_state import NodeState

DOWN: Final = "down"
NO_GPU: Final = "no-gpu"
NEW: Final = "new"
MOVED: Final = "moved"
STOPPED: Final = "stopped"
# Worst first: a starved node costs GPU time now, and so does one waiting on another node of its
# job; a down one says nothing at all; a moved one reports to another collector now.
STATE_ORDER: Final = (
    "starved", "waiting", DOWN, "lost", "throttled", "warmup", "busy", "idle", NO_GPU, STOPPED, NEW, MOVED,
)  # fmt: skip

SLOWED: Final = "slowed"
# Jobs: a slowed one costs every GPU of it now.
JOB_STATE_ORDER: Final = (SLOWED, DOWN, "warmup", "busy", "idle")


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


def worst_first(row: dict[str, Any]) -> tuple[int, float, float, str]:
    """The order of the fleet's node rows (the page's JSON): by ``STATE_ORDER``, then the most
    starved, the most lost today, by id."""
    return (state_rank(row["state"], STATE_ORDER), -(row["starvation_ratio"] or 0.0), -row["gpu_hours_lost_today"],
            row["node_id"])  # fmt: skip


def job_shown_state(verdict_state: str, nodes: tuple[str, ...] | list[str], fresh: set[str]) -> str:
    """A job's word: ``down`` when none of its ``nodes`` is ``fresh`` (heard within the window),
    else its verdict's."""
    return verdict_state if any(node in fresh for node in nodes) else DOWN


def job_worst_first(job: dict[str, Any]) -> tuple[int, float, str]:
    """The order of jobs (the page's JSON): by ``JOB_STATE_ORDER``, then the most lost, by name."""
    return (state_rank(job["state"], JOB_STATE_ORDER), -job["gpu_hours_lost"], job["job"])


def state_rank(state: str, order: tuple[str, ...]) -> int:
    """Where ``state`` stands in ``order``; a word it does not list after all of it."""
    return order.index(state) if state in order else len(order)


def job_sentence(job: dict[str, Any]) -> str:
    """A job verdict's plain form (``JobVerdict.to_plain``, its state the shown one) in one sentence.
    Without its GPU-hours lost: the job's page gives the ledger's (``/api/ledger``), the figure
    ``jobs``, ``/jobs`` and ``ledger`` give, where the roll-up's live count would be a second one."""
    nodes, gpus = len(job["nodes"]), job["gpus"]
    what = f"{gpus} GPU{'s' if gpus != 1 else ''} on {nodes} node{'s' if nodes != 1 else ''}"
    wait = job["wait_ratio"]
    # A slowed job whose wait share cannot be measured says so, never a guessed share.
    share = f" {wait:.0%} of their time" if wait is not None else " an unknown share of their time"
    if job["state"] == DOWN:
        return f"{what}: no node of the job has reported for a window"
    if job["state"] != SLOWED:
        return f"{what} {job['state']}" + (f", waiting{share}" if wait else "")
    if job["job_wide"] or not job["straggler_nodes"]:
        return f"{what} wait{share} — cause {cause_word(job['cause'])} on every node (job-wide)"
    held = ", ".join(job["straggler_nodes"])
    text = f"{what} wait{share} for {held} — cause {cause_word(job['cause'])}"
    if job["needed_bytes_per_second"]:
        text += f"; keeping them busy needs {job['needed_bytes_per_second'] * 8 / 1e9:.1f} Gb/s there"
    return text


def cause_word(cause: str | None) -> str:
    """A slowed job's cause as every view says it: ``unknown`` when the roll-up names none."""
    return cause or "unknown"
