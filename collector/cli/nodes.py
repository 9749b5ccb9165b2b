"""``nodeagent-collector nodes`` and ``alerts``: what a running collector knows of the fleet,
asked over its query service (``client.py``) and shown as a table or JSON; ``forget``, which
retires a node there."""

from __future__ import annotations

import json

import click

from nodeagent.collector.alerts.alert import alert_order
from nodeagent.collector.cli.client import ask_each, client_options, query, query_whole, several
from nodeagent.collector.views.fleet_table import (
    alert_rows,
    alert_subject,
    iso_time,
    node_rows,
    render_fleet,
    short,
    shows_shards,
)
from nodeagent.core.program.command_line import RuntimeFailure
from nodeagent.core.program.safe_text import escape_controls
from nodeagent.core.wire.identity import check_node_id


@click.command()
@client_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def nodes(as_json: bool, **options: object) -> None:
    """The nodes a running collector knows."""
    response = query_whole(options, "StreamNodes")
    rows = node_rows(response)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(render_fleet(rows))


@click.command()
@client_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option("--all", "include_resolved", is_flag=True, help="Recently resolved alerts too.")
def alerts(as_json: bool, include_resolved: bool, **options: object) -> None:
    """The alerts of a running collector: firing ones (and, with --all, recently resolved)."""
    response = query_whole(options, "StreamAlerts", include_resolved=include_resolved)
    # Streamed by key: shown as the fleet page shows them, firing first, then the newest.
    response.alerts.sort(key=alert_order)
    rows = alert_rows(response)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no alerts" if include_resolved else "no firing alerts")
        return
    merged = shows_shards(rows)
    shard_head = f"{'SHARD':<21} " if merged else ""
    click.echo(
        f"{'ALERT':<20} {'NODE':<20} {'SUBJECT':<28} {'SEVERITY':<9} {'STATE':<9} {'SINCE':<20} {shard_head}SUMMARY"
    )
    for row in rows:
        annotations: dict[str, str] = row["annotations"]
        labels: dict[str, str] = row["labels"]
        summary = annotations.get("summary", "")
        # A job's alert (JobStraggler) names its node among its labels, and the job it holds back.
        node = str(row["node_id"]) or labels.get("node", "") or "-"
        shard = f"{short(str(row['shard']), 21):<21} " if merged else ""
        click.echo(
            escape_controls(
                f"{row['name']!s:<20} {short(node, 20):<20} {short(alert_subject(row), 28):<28} {row['severity']!s:<9} "
                f"{row['state']!s:<9} {iso_time(float(str(row['starts_at']))):<20} {shard}{summary}"
            )
        )


@click.command()
@click.argument("node_id", metavar="NODE", callback=lambda _ctx, _param, value: _checked_node_id(value))
@client_options
def forget(node_id: str, **options: object) -> None:
    """Retire a node the collector holds: its row, watermarks and stored reports go, its alerts
    resolve and it stops counting toward --max-nodes (its per-minute history stays). A connected
    node is refused: stop its agent first. Several collectors: each is asked, and each that held
    the node says so."""
    if several(options):
        _forget_on_each(node_id, options)
        return
    response = query(options, "ForgetNode", node_id=node_id)
    click.echo(f"forgot {node_id}: {response.reports_deleted} stored reports deleted; its per-minute history stays")


def _forget_on_each(node_id: str, options: dict[str, object]) -> None:
    """A node may be held by more than one collector (it moved): every one that holds it forgets
    it and says so. One that refuses (the node is connected there) fails the command; one that
    does not answer is said on stderr."""
    answers = ask_each(options, "ForgetNode", report=False, node_id=node_id)
    held = [a for a in answers if a.answered]
    for answer in held:
        deleted = getattr(answer.reply, "reports_deleted", 0)
        click.echo(
            f"forgot {node_id} on {answer.shard}: {deleted} stored reports deleted; its per-minute history stays"
        )
    silent = [a for a in answers if a.error.startswith(_SILENT)]
    refused = [a for a in answers if a.error and not a.error.startswith(("NOT_FOUND", *_SILENT))]
    for answer in silent:
        click.echo(f"nodeagent-collector: collector {answer.shard} did not answer: {answer.error}", err=True)
    for answer in refused:
        click.echo(f"nodeagent-collector: collector {answer.shard} refused: {answer.error}", err=True)
    if refused:
        raise RuntimeFailure(f"{len(refused)} of {len(answers)} collectors refused to forget {node_id}")
    if not held:
        asked = ", ".join(a.shard for a in answers if a not in silent)
        raise RuntimeFailure(f"no collector holds node {node_id!r} (asked: {asked or 'none answered'})")


# A collector that did not answer, not one that said no.
_SILENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def _checked_node_id(value: str) -> str:
    try:
        return check_node_id(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
