"""The state words of nodes and jobs, their orders and a job's sentence: ``shown_state`` decides
a node's word from its verdict and the facts the detector cannot see (``collector/states/__init__``
says which); ``ingest/shown_state.py`` applies it to a node the collector holds."""

from __future__ import annotations

from typing import Any, Final

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
