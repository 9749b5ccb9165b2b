"""``nodeagent-collector history NODE``: a node's per-minute rows from a running collector;
``reset-history``: a stopped collector's history deleted and started afresh, after damage
stopped it (docs/history.md). ``jobs``, beside the history's totals per job, is ``jobs.py``.

Several collectors: each streams its rows of the node (one it moved from holds the minutes
before the move), all of them are collected, sorted by (minute, GPU) and printed with the
collector each row came from (``shard``)."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from nodeagent.collector.cli.client import ask_each_pages, client_options, query_pages, several
from nodeagent.collector.history.minutes import MINUTE_SECONDS, VALUES
from nodeagent.collector.store.database import StoreUnreadableError, default_db_path
from nodeagent.collector.store.database import reset_history as reset_stored_history
from nodeagent.collector.views.fleet_table import iso_time, shows_shards
from nodeagent.core.program.command_line import RuntimeFailure
from nodeagent.core.program.lock_file import LockedError
from nodeagent.core.program.safe_text import csv_cell, escape_controls
from nodeagent.core.quantities.units import parse_duration_seconds


class Duration(click.ParamType[float]):
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration_seconds(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


class TimePoint(click.ParamType[float]):
    """Unix seconds or an ISO 8601 time."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return float(value)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(str(value)).timestamp()
        except ValueError:
            self.fail(f"{value!r} is neither unix seconds nor an ISO 8601 time", param, ctx)


def history_rows(response: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for row in response.rows:
        plain: dict[str, Any] = {"time_unix_seconds": row.time_unix_seconds, "gpu": None if row.gpu < 0 else row.gpu}
        plain["samples"] = row.samples
        plain.update({name: row.values.get(name) for name in VALUES})
        plain["held_seconds"] = row.values.get("held_seconds")  # a GPU's seconds held by its jobs
        plain.update(state=row.state, cause=row.cause or None, jobs=list(row.jobs))
        rows.append(plain)
    return rows


@click.command()
@click.argument("node")
@client_options
@click.option(
    "--gpu", type=click.IntRange(min=0, max=1023), help="One GPU's rows (default: the node's and every GPU's)."
)
@click.option(
    "--since", type=Duration(), default="2h", show_default=True,
    help="How far back from the node's newest stored minute (e.g. 30m, 2h, 14d).",
)  # fmt: skip
@click.option("--until", type=TimePoint(), help="End (unix seconds or ISO 8601); default: the newest minute.")
@click.option("--step", type=Duration(), default="1m", show_default=True, help="Rows per step (whole minutes).")
@click.option("--json", "as_json", is_flag=True, help="JSON rows.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV rows.")
def history(
    node: str, gpu: int | None, since: float, until: float | None, step: float, as_json: bool, as_csv: bool,
    **options: object,
) -> None:  # fmt: skip
    """A node's history: per-minute utilization, I/O, CPU and the detector's verdict."""
    if step < MINUTE_SECONDS or step % MINUTE_SECONDS:
        raise click.BadParameter(f"{step:g} s is not a whole number of minutes", param_hint="--step")
    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other")
    fields: dict[str, Any] = {"node_id": node, "last_seconds": since, "step_seconds": int(step)}
    if until is not None:
        fields["until_unix_seconds"] = until
    if gpu is not None:
        fields["gpu"] = gpu
    # Pages as they come (a node's 14 days do not fit one message), printed as they come.
    out = RowPrinter(node, "json" if as_json else "csv" if as_csv else "table")
    if several(options):
        out.rows_of(merged_rows(ask_each_pages(options, "StreamHistory", **fields)))
    else:
        query_pages(options, "StreamHistory", out.page, **fields)
    out.close()


def merged_rows(answers: list[Any]) -> list[dict[str, Any]]:
    """Every collector's rows of the node, each naming its collector, by (minute, GPU, collector)."""
    rows: list[dict[str, Any]] = []
    for answer in answers:
        pages = getattr(answer, "pages", None) or ([answer.reply] if answer.reply is not None else [])
        for page in pages:
            rows.extend({**row, "shard": answer.shard} for row in history_rows(page))
    rows.sort(key=lambda r: (r["time_unix_seconds"], -1 if r["gpu"] is None else r["gpu"], r["shard"]))
    return rows


class RowPrinter:
    """History rows printed a page at a time, in the same text as all of them printed at once."""

    def __init__(self, node: str, form: str) -> None:
        self.node = node
        self.form = form
        self.rows = 0
        self._fields: list[str] | None = None

    def page(self, response: Any) -> None:
        self.rows_of(history_rows(response))

    def rows_of(self, rows: list[dict[str, Any]]) -> None:
        """Rows as ``history_rows`` makes them (with ``shard`` when merged), printed now."""
        if not rows:
            return
        out = io.StringIO()
        if self.form == "json":
            for i, row in enumerate(rows):
                out.write(",\n" if self.rows or i else "[\n")
                out.write(textwrap.indent(json.dumps(row, indent=2), "  "))
        elif self.form == "csv":
            writer = csv.DictWriter(out, fieldnames=self._fields or list(rows[0]), lineterminator="\n")
            if self._fields is None:
                self._fields = list(rows[0])
                writer.writeheader()
            for row in rows:
                # The jobs as a JSON list: a job key may hold any printable character, a space or a comma too.
                cells = {**row, "jobs": json.dumps(row["jobs"], ensure_ascii=False)}
                writer.writerow({name: csv_cell(value) for name, value in cells.items()})
        else:
            merged = shows_shards(rows[:1])
            if not self.rows:
                out.write(
                    f"{'TIME':<20} {'GPU':>4} {'UTIL':>6} {'MIN':>6} {'STARVED':>8} {'LOST_S':>8} {'STATE':<10} "
                    + ("CAUSE         SHARD\n" if merged else "CAUSE\n")
                )
            for row in rows:
                util, low, ratio = row["utilization_mean"], row["utilization_min"], row["starvation_ratio"]
                # Words a shard said: their control characters escaped (core/program/safe_text.py).
                state, cause = escape_controls(str(row["state"])), escape_controls(row["cause"] or "-")
                shard = escape_controls(str(row.get("shard", "")))
                out.write(
                    f"{iso_time(row['time_unix_seconds']):<20} {'node' if row['gpu'] is None else row['gpu']:>4} "
                    f"{_pct(util):>6} {_pct(low):>6} {_pct(ratio):>8} {row['gpu_seconds_lost'] or 0.0:>8.1f} "
                    f"{state:<10} " + (f"{cause:<13} {shard}\n" if merged else f"{cause}\n")
                )
        self.rows += len(rows)
        click.echo(out.getvalue(), nl=False)

    def close(self) -> None:
        if self.form == "json":
            click.echo("\n]" if self.rows else "[]")
        elif self.form == "csv" and self._fields is None:
            click.echo("time_unix_seconds")
        if not self.rows:
            # A node the history does not hold (a typo) is the operator's to fix, as `replay --node`
            # says of one without stored reports: one line, exit 2; JSON and CSV stay well-formed.
            raise click.ClickException(f"no history of node {self.node!r} in the range asked")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


@click.command("reset-history")
@click.option(
    "--db", "db_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
    help="The collector's SQLite file (default: serve's default).",
)  # fmt: skip
def reset_history(db_path: Path | None) -> None:
    """Delete a stopped collector's history and start it afresh (after HistoryUnavailable).

    The per-minute rows and full-resolution reports go; node state, watermarks and alerts stay.
    Refused while a collector holds the database."""
    path = db_path or default_db_path()
    if not path.is_file():
        raise click.BadParameter(f"{path}: no such file", param_hint="--db")
    try:
        before, after, check = reset_stored_history(path)
    except LockedError as err:
        raise click.BadParameter(f"{err}; stop the collector first", param_hint="--db") from err
    except StoreUnreadableError as err:
        raise click.BadParameter(f"{path}: {err}", param_hint="--db") from err
    click.echo(
        f"history of {path} deleted (per-minute rows and stored reports); nodes, watermarks and alerts kept; "
        f"{before} -> {after} bytes"
    )
    if check != "ok":
        raise RuntimeFailure(f"{path} is damaged outside the history too (quick_check: {check.splitlines()[0]})")
