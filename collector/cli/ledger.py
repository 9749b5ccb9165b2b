"""``nodeagent-collector ledger``: the GPU-hours held over a span, what they did, what they cost.

Each row (a job, a node, the fleet, or the jobs of one Slurm account or Kubernetes namespace,
``--by account|namespace``, "" for the jobs without one) is the history's split (``collector/history/split.py``)
summed over [``--since``, ``--until``) and priced by the collectors' ``[prices]``
(``Query.Ledger``, ``collector/ledger/read.py``): GPU-hours held, computing, lost by category,
the hours nothing measured (``unmeasured``), the cost and the cost of what was lost (a range where
some hours are unmeasured: ``cost_lost`` to ``cost_lost_max``); a job's straggler nodes with the GPU-hours its GPUs
waited on each, and its account and namespace; an account's or namespace's jobs. Several
collectors (``--collector`` repeated or ``[fleet] collectors``): their
rows summed by key. ``--json``: one object per row; ``--csv``: a header and one line per row, every
category a column, for a spreadsheet or a bill. Without ``[prices]`` the money is left out (the
table's and CSV's columns; null in JSON) and one line says how to set them.
"""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import UTC, datetime
from typing import Any, Final

import click

from nodeagent.collector.cli.client import client_options, query
from nodeagent.collector.cli.history import Duration, TimePoint
from nodeagent.collector.history.split import LOST_CATEGORIES
from nodeagent.collector.ledger.prices import NO_PRICES_LINE, priced
from nodeagent.collector.ledger.read import BY
from nodeagent.collector.views.fleet_table import short
from nodeagent.collector.views.ledger_page import ledger_plain
from nodeagent.core.program.safe_text import csv_cell, escape_controls

DEFAULT_SINCE: Final = "30d"
UNMEASURED_LINE: Final = (
    "UNMEAS: held hours whose split between computing and waiting the GPUs' readings cannot measure "
    "(docs/ledger.md#unmeasured)"
)


class Since(click.ParamType[float]):
    """A span back from ``--until`` (``30d``, ``12h``: with its unit), or a time (unix seconds,
    ISO 8601): as negative seconds for a span, else the time."""

    name = "DURATION|TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return float(value)  # a bare number is a time, as for --until; a span has its unit
        except ValueError:
            pass
        try:
            return -Duration().convert(value, param, ctx)
        except click.BadParameter:
            pass
        try:
            return TimePoint().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value!r} is neither a span (30d, 12h) nor a time (unix seconds, ISO 8601)", param, ctx)


@click.command()
@client_options
@click.option(
    "--since", type=Since(), default=DEFAULT_SINCE, show_default=True,
    help="Start: a span back from --until (30d, 12h) or a time (unix seconds, ISO 8601).",
)  # fmt: skip
@click.option("--until", type=TimePoint(), help="End (unix seconds or ISO 8601); default: now.")
@click.option(
    "--by", type=click.Choice(BY), default="job", show_default=True,
    help="One row per job, node, the fleet, or the jobs' Slurm account or Kubernetes namespace.",
)  # fmt: skip
@click.option(
    "--sort", type=click.Choice(["lost", "worth"]), default="lost", show_default=True,
    help="Rows by money (else hours) lost, or by what fixing their live bottleneck is worth a day (by job, node).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="JSON: one object per row.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: a header, then one line per row.")
def ledger(
    since: float, until: float | None, by: str, sort: str, as_json: bool, as_csv: bool, **options: object
) -> None:
    """GPU-hours held, computing and lost (by category), and their cost, per job, node, the fleet,
    Slurm account or Kubernetes namespace."""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other")
    end = time.time() if until is None else until
    start = end + since if since < 0 else since
    if start >= end:
        raise click.BadParameter(f"the span starts at {start:.0f}, not before its end {end:.0f}", param_hint="--since")
    response = query(options, "Ledger", since_unix_seconds=start, until_unix_seconds=end, by=by)
    rows = [ledger_plain(row, by) for row in response.rows]
    money = priced(row.currency for row in response.rows)
    if sort == "worth":  # the most worth fixing first, by money where priced, else by GPU-hours a day
        rows.sort(key=_worth_order, reverse=True)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif as_csv:
        click.echo(ledger_csv(rows, by, money=money), nl=False)
    elif not rows:
        click.echo(f"no GPU time held between {_when(start)} and {_when(end)}")
    else:
        click.echo(render_ledger(rows, by, start, end, money=money))
    if rows and not money:  # beside the table; on stderr, out of the way of JSON and CSV
        click.echo(NO_PRICES_LINE, err=as_json or as_csv)


def ledger_csv(rows: list[dict[str, Any]], by: str, *, money: bool = True) -> str:
    """The CSV; ``money`` False (no ``[prices]``): without cost, cost_lost and currency."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = [by, "gpu_hours_held", "gpu_hours_computing", *(f"gpu_hours_lost_{c}" for c in LOST_CATEGORIES)]
    header += ["gpu_hours_unmeasured", *(["cost", "cost_lost", "cost_lost_max", "currency"] if money else [])]
    header += ["first", "last"]
    extra = {"job": ["stragglers", "account", "namespace"], "node": ["gpu_model"], "fleet": []}
    # What fixing the row's live bottleneck is worth a day (by job or node; empty where none).
    worth = ["worth_gpu_hours_per_day", *(["worth_money_per_day"] if money else [])] if by in ("job", "node") else []
    writer.writerow(header + extra.get(by, ["jobs", "stragglers"]) + worth)
    for row in rows:
        line = [row[by], _num(row["gpu_hours_held"]), _num(row["gpu_hours_computing"])]
        line += [_num(row["gpu_hours_lost"][c]) for c in LOST_CATEGORIES]
        line.append(_num(row["gpu_hours_unmeasured"]))
        if money:
            money_cells = (row["cost"], row["cost_lost"], row["cost_lost_max"])
            line += [f"{value or 0.0:.2f}" for value in money_cells] + [row["currency"] or ""]
        line += [_when(row["first_unix_seconds"]), _when(row["last_unix_seconds"])]
        if by in ("account", "namespace"):
            line.append(json.dumps(row["jobs"], ensure_ascii=False))  # a list of keys that may hold any printable
        if by in ("job", "account", "namespace"):
            line.append(";".join(f"{s['node']}:{s['gpu_hours_waited']:.4f}" for s in row["stragglers"]))
        if by == "job":
            line += [row["account"], row["namespace"]]
        elif by == "node":
            line.append(row["gpu_model"])
        if worth:
            fixing = row.get("worth_fixing") or {}
            hours, money_a_day = fixing.get("gpu_hours_per_day"), fixing.get("money_per_day")
            line.append("" if hours is None else _num(hours))
            if money:
                line.append("" if money_a_day is None else f"{money_a_day:.2f}")
        writer.writerow([csv_cell(cell) for cell in line])
    return buffer.getvalue()


def render_ledger(rows: list[dict[str, Any]], by: str, start: float, end: float, *, money: bool = True) -> str:
    """The table: hours held, the share computing, each category lost that any row has (as a
    share of the row's held time), the money (``money`` False: without it)."""
    shown = [c for c in LOST_CATEGORIES if any(r["gpu_hours_lost"][c] > 0 for r in rows)]
    # Hours nothing measured: a column of their own, and the money lost a range (LOST to LOST MAX).
    unmeasured = any(r["gpu_hours_unmeasured"] > 0 for r in rows)
    none = f"(no {by})"  # the jobs without an account or namespace
    width = max(12, min(32, max(len(escape_controls(str(r[by])) or none) for r in rows)))
    head = f"{by.upper():<{width}} {'GPU-H':>9} {'COMPUTE':>7} " + " ".join(f"{_label(c):>7}" for c in shown)
    head += f" {'UNMEAS':>7}" if unmeasured else ""
    if money:
        head += f" {'COST':>11} {'LOST':>11}" + (f" {'LOST MAX':>11}" if unmeasured else "") + f" {'CUR':<4}"
    worth = any(r.get("worth_fixing") for r in rows)
    head += f" {'WORTH FIXING':>16}" if worth else ""
    head += {"job": "  STRAGGLERS", "account": "  JOBS", "namespace": "  JOBS"}.get(by, "")
    lines = [f"ledger {_when(start)} .. {_when(end)}: shares of each row's held GPU time", head.rstrip()]
    for row in rows:
        held = row["gpu_hours_held"]

        def share(hours: float, held: float = held) -> str:
            return f"{hours / held * 100:.1f}%" if held > 0 else "-"

        line = f"{short(str(row[by]) or none, width):<{width}} {held:>9.2f} {share(row['gpu_hours_computing']):>7} "
        line += " ".join(f"{share(row['gpu_hours_lost'][c]):>7}" for c in shown)
        if unmeasured:
            line += f" {share(row['gpu_hours_unmeasured']):>7}"
        if money:  # a row of a collector without prices, among priced ones: 0.00 in its currency's place
            line += f" {row['cost'] or 0.0:>11.2f} {row['cost_lost'] or 0.0:>11.2f}"
            line += f" {row['cost_lost_max'] or 0.0:>11.2f}" if unmeasured else ""
            line += f" {row['currency'] or '-':<4}"
        if worth:
            line += f" {_worth_words(row.get('worth_fixing')):>16}"
        if by == "job":
            line += "  " + (", ".join(f"{s['node']} ({s['gpu_hours_waited']:.2f} h)" for s in row["stragglers"]) or "-")
        elif by not in {"node", "fleet"}:
            line += f"  {len(row['jobs'])}: " + ", ".join(row["jobs"][:3]) + (", ..." if len(row["jobs"]) > 3 else "")
        lines.append(line.rstrip())
    if unmeasured:
        lines.append(UNMEASURED_LINE + (": the money lost is LOST to LOST MAX" if money else ""))
    if worth:
        lines.append(
            "WORTH FIXING: what lifting the live bottleneck would save a day, at the current size "
            "(money where priced, else GPU-hours; docs/jobs.md#what-a-fix-is-worth)"
        )
    return "\n".join(map(escape_controls, lines))


def _worth_words(worth: dict[str, Any] | None) -> str:
    if not worth:
        return "-"
    if worth["money_per_day"] is not None:
        return f"{worth['money_per_day']:.2f}/day"
    return f"{worth['gpu_hours_per_day']:.1f} GPU-h/day"


def _worth_order(row: dict[str, Any]) -> tuple[float, float]:
    worth = row.get("worth_fixing") or {}
    return (worth.get("money_per_day") or 0.0, worth.get("gpu_hours_per_day") or 0.0)


_LABELS: Final = {"interconnect": "interco", "unresponsive": "unresp", "throttled": "throttl"}


def _label(category: str) -> str:
    return _LABELS.get(category, category).upper()


def _num(value: float) -> str:
    return f"{value:.4f}"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if seconds else ""
