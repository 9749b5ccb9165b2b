"""``nodeagent-collector jobs``: each multi-node job's live verdict (``StreamJobs``, the job
roll-up's memory) beside the history's totals per job (``StreamJobTotals``, over ``--since``), as one table
or one JSON list.

A job the roll-up follows now has its state, straggler, cause and wait share: these are the
multi-node jobs of the fleet page's ``/jobs``, the same list. A job found only in the history
(finished, or one that never spanned nodes, such as a single node's Slurm job) is listed too,
marked: ``live`` false and its live fields null in JSON, under its own line in the table.
The history's GPU-hours lost are the ledger's split of the hours held (by category), counting
every GPU of a job, the waiting ones included (the roll-up makes a waiting GPU count as lost).

Several collectors: each job's verdict from the one whose roll-up judged it over most nodes
(its ``shard``), the history's totals summed over all of them.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import click

from nodeagent.collector.cli.client import client_options, query_whole, several
from nodeagent.collector.cli.history import Duration
from nodeagent.collector.history.split import WAIT_UNKNOWN
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.payoff.model import if_fixed_of, worth_words
from nodeagent.collector.states.words import JOB_STATE_ORDER, SLOWED, state_rank
from nodeagent.collector.views.fleet_table import short, shows_shards
from nodeagent.core.program.safe_text import escape_controls
from nodeagent.v1 import nodeagent_pb2 as pb

_EVIDENCE_CHARS: Final = 48
# Above the jobs the roll-up does not follow now: the live ones are the fleet page's /jobs.
HISTORY_ONLY: Final = "-- in the history only (no live verdict: finished, or never on more than one node) --"


@click.command()
@client_options
@click.option(
    "--since", type=Duration(), default="24h", show_default=True,
    help="The history's totals over this far back from the newest stored minute.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="JSON: one object per job.")
def jobs(since: float, as_json: bool, **options: object) -> None:
    """Multi-node jobs: the live verdict (state, straggler, cause, wait share) beside the
    history's GPU-hours and GPU-hours lost (by the ledger's category) per job."""
    live, shards = _live(options)
    history = query_whole(options, "StreamJobTotals", last_seconds=since)
    rows = job_rows(live, history)
    if several(options):
        for row in rows:
            row["shard"] = shards.get(row["job"])
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no job live or in the history")
        return
    click.echo(render_jobs(rows, since))


def _live(options: dict[str, Any]) -> tuple[list[JobVerdict], dict[str, str]]:
    """The live verdicts, and the shard of each job (merged answers only)."""
    response = query_whole(options, "StreamJobs")
    return [verdict_of(message) for message in response.jobs], {m.job: m.shard for m in response.jobs if m.shard}


def verdict_of(message: pb.JobVerdict) -> JobVerdict:
    """A ``JobVerdict`` as the wire carries it, back as the record (evidence numbers as numbers)."""
    return JobVerdict(
        job=message.job, source=message.source, state=message.state, time_unix_seconds=message.time_unix_seconds,
        nodes=tuple(message.nodes), gpus=message.gpus, world_size=message.world_size,
        ranks_reported=message.ranks_reported, straggler_nodes=tuple(message.straggler_nodes),
        cause=message.cause or None, job_wide=message.job_wide,
        wait_ratio=message.wait_ratio if message.HasField("wait_ratio") else None,
        gpu_seconds_lost=message.gpu_seconds_lost,
        needed_bytes_per_second=(
            message.needed_bytes_per_second if message.HasField("needed_bytes_per_second") else None
        ),
        evidence={k: _number_or_text(v) for k, v in message.evidence.items()}, notes=tuple(message.notes),
        if_fixed=if_fixed_of(message.if_fixed) if message.HasField("if_fixed") else None,
    )  # fmt: skip


def job_rows(live: list[JobVerdict], history: pb.JobsResponse) -> list[dict[str, Any]]:
    """One row per job: the live verdict's fields (``JobVerdict.to_plain``; null for a job only in
    the history) and ``history``, the history's totals (null for a job it does not hold yet)."""
    totals = {total.job: _history_plain(total) for total in history.jobs}
    rows = []
    for verdict in live:
        rows.append({**verdict.to_plain(), "live": True, "history": totals.pop(verdict.job, None)})
    for name, total in totals.items():
        rows.append({**_absent(name), "live": False, "nodes": total["nodes"], "history": total})
    rows.sort(key=_order)
    return rows


def render_jobs(rows: list[dict[str, Any]], since: float) -> str:
    """The table: the live verdict, then the history's GPU-hours lost over ``since``."""
    window = _span(since)
    merged = shows_shards(rows)
    lines = [
        f"{'JOB':<24} {'STATE':<7} {'NODES':>5} {'GPUS':>5} {'STRAGGLER':<18} {'CAUSE':<9} {'WAIT %':>7} "
        f"{'GPU-H LOST ' + window:>15}  " + (f"{'SHARD':<21} " if merged else "") + f"{'WORTH':<20} EVIDENCE"
    ]
    for index, row in enumerate(rows):
        if not row["live"] and (index == 0 or rows[index - 1]["live"]):
            lines.append(HISTORY_ONLY)
        lost = _lost_words(row["history"])
        straggler = "job-wide" if row["job_wide"] else ",".join(row["straggler_nodes"]) or "-"
        gpus = "-" if row["gpus"] is None else str(row["gpus"])
        lines.append(
            f"{short(row['job'], 24):<24} {row['state'] or '-':<7} {len(row['nodes']):>5} {gpus:>5} "
            f"{short(straggler, 18):<18} {short(row['cause'] or '-', 9):<9} "
            f"{wait_words(row):>7} {lost:>15}  "
            + (f"{short(row['shard'] or '-', 21):<21} " if merged else "")
            + f"{short(worth_words(row.get('if_fixed')), 20):<20} "
            + evidence_short(row["evidence"])
        )
    lines.append(
        f"(WAIT %: share of the job's GPU time spent waiting, live, unknown where its GPUs' readings cannot "
        f"measure it (EVIDENCE wait_unknown_reason says why); GPU-H LOST: the history's over the last "
        f"{window}, on every GPU of the job; A..B where some hours are unmeasured: A lost, up to B; WORTH: the "
        f"speed-up if the straggler or the shared cause were lifted, and what it saves a day)"
    )
    return "\n".join(map(escape_controls, lines))


def wait_words(row: dict[str, Any]) -> str:
    """A job's wait share as the tables say it: a share, ``unknown`` where it cannot be measured
    (a reason in its evidence, or a slowed job without one), ``-`` where there is none to say."""
    wait = row["wait_ratio"]
    if wait is not None:
        return f"{wait * 100:.0f}%"
    unknown = WAIT_UNKNOWN in (row.get("evidence") or {}) or row.get("state") == SLOWED
    return "unknown" if unknown else "-"


def _lost_words(history: dict[str, Any] | None) -> str:
    """The history's GPU-hours lost: ``-`` for none, a range ``lost..lost+unmeasured`` where some
    hours are unmeasured (docs/ledger.md#unmeasured)."""
    if history is None:
        return "-"
    lost, unmeasured = history["gpu_hours_lost"], history.get("gpu_hours_unmeasured") or 0.0
    return f"{lost:.2f}..{lost + unmeasured:.2f}" if unmeasured >= 0.005 else f"{lost:.2f}"


def evidence_short(evidence: dict[str, Any]) -> str:
    """The evidence as ``name=value`` pairs by name, a line's worth of them (JSON has all)."""
    if not evidence:
        return "-"
    # By name: the wire's map has no order of its own. Whole pairs while they fit, then "…".
    pairs = [f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(evidence.items())]
    text = pairs[0] if len(pairs[0]) <= _EVIDENCE_CHARS else pairs[0][: _EVIDENCE_CHARS - 1] + "…"
    for pair in pairs[1:]:
        if len(text) + 1 + len(pair) > _EVIDENCE_CHARS:
            return text + " …"
        text += " " + pair
    return text


def _history_plain(total: pb.JobTotal) -> dict[str, Any]:
    return {
        "gpu_hours": total.gpu_hours, "gpu_hours_lost": total.gpu_hours_lost,
        "gpu_hours_unmeasured": total.gpu_hours_unmeasured,
        "gpu_hours_lost_by_cause": dict(sorted(total.gpu_hours_lost_by_cause.items())), "nodes": list(total.nodes),
        "first_unix_seconds": total.first_unix_seconds, "last_unix_seconds": total.last_unix_seconds,
    }  # fmt: skip


def _absent(name: str) -> dict[str, Any]:
    """A job the roll-up does not follow (now): every live field of ``to_plain`` null or empty."""
    plain = JobVerdict(job=name, source="", state="", time_unix_seconds=0.0, nodes=(), gpus=0, world_size=0,
                       ranks_reported=0).to_plain()  # fmt: skip
    empty: dict[str, Any] = dict.fromkeys(plain)
    empty.update(job=name, straggler_nodes=[], evidence={}, notes=[])
    return empty


def _order(row: dict[str, Any]) -> tuple[int, float, str]:
    state = row["state"]
    # Live jobs first, in the page's order (the ones that cost GPU time now first); then those only
    # in the history (no state).
    rank = state_rank(state, JOB_STATE_ORDER) if state else len(JOB_STATE_ORDER) + 1
    lost = row["history"]["gpu_hours_lost"] if row["history"] else 0.0
    return (rank, -(row["gpu_hours_lost"] or lost), row["job"])


def _number_or_text(text: str) -> float | str:
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def _span(seconds: float) -> str:
    """``--since`` as it is usually written: ``24h``, ``2h``, ``14d``, ``30m``."""
    if seconds % 3600 == 0 and 0 < seconds <= 48 * 3600:
        return f"{seconds / 3600:.0f}h"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"
