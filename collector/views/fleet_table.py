"""What a collector knows, as rows for JSON and as the fleet table people read."""

from __future__ import annotations

import datetime as dt
from typing import Any

from nodeagent.collector.alerts.alert import Alert, record_alert
from nodeagent.collector.history.split import WAIT_UNKNOWN
from nodeagent.collector.payoff.model import if_fixed_of, worth_words
from nodeagent.collector.states.words import DOWN, MOVED, NEW, NO_GPU, STOPPED
from nodeagent.core.detector.computing_source import CODE_WORDS
from nodeagent.core.detector.verdict_words import forming_words, ingest_words
from nodeagent.core.program.safe_text import escape_controls
from nodeagent.v1 import nodeagent_pb2 as pb


def node_rows(response: pb.ListNodesResponse) -> list[dict[str, Any]]:
    """Rows for JSON and the table; a merged answer's (several collectors) name each node's
    ``shard`` and the ``stale_shards`` that still hold an older copy of it."""
    rows = [
        {
            "node_id": n.node_id,
            "hostname": n.hostname,
            "agent_version": n.agent_version,
            "connected": n.connected,
            "gpu_count": n.gpu_count,
            "reports_total": n.reports_total,
            "duplicates_total": n.duplicates_total,
            "gap_reports_total": n.gap_reports_total,
            "spool_dropped_reports_total": n.spool_dropped_reports_total,
            "epoch": n.epoch,
            "last_seq": n.last_seq,
            "first_seen": n.first_seen_unix_seconds,
            "last_seen": n.last_seen_unix_seconds,
            "state": n.state,
            "cause": n.cause or None,
            "tier": n.tier or None,
            "starvation_ratio": n.starvation_ratio if n.HasField("starvation_ratio") else None,
            "interconnect_ratio": n.interconnect_ratio if n.HasField("interconnect_ratio") else None,
            # Today's (UTC), the ledger's split: the page's figure (the detector's without a history).
            "gpu_hours_lost_today": n.gpu_seconds_lost / 3600,
            "needed_ingest_bytes_per_second": (
                n.needed_ingest_bytes_per_second if n.HasField("needed_ingest_bytes_per_second") else None
            ),
            "starved_gpus": [int(i) for i in n.starved_gpus.split(",") if i],
            "jobs": list(n.jobs),
            "waiting_on": list(n.waiting_on),
            "waiting_job": n.waiting_job or None,
            "evidence": dict(n.evidence),
            "clock_skew_seconds": n.clock_skew_seconds if n.HasField("clock_skew_seconds") else None,
            "clock_refused_reports_total": n.clock_refused_reports_total,
            "window_seconds": n.window_seconds or None,
            "window_seen_seconds": n.window_seen_seconds if n.window_seconds else None,
            # The store that holds the node cannot commit: its figures are those of its last commit.
            "store_failing": {"seconds": n.store_failing_seconds, "error": n.store_error} if n.store_error else None,
            # While starved: what lifting its bottleneck is worth (collector/payoff/).
            "if_fixed": if_fixed_of(n.if_fixed).to_plain() if n.HasField("if_fixed") else None,
        }
        for n in response.nodes
    ]
    if response.shards:
        for row, n in zip(rows, response.nodes, strict=True):
            row.update(shard=n.shard, stale_shards=list(n.stale_shards))
    return rows


def alert_rows(response: pb.ListAlertsResponse) -> list[dict[str, Any]]:
    """The ``alerts`` command's rows: each record read as its alert (``alerts/alert.py``); a merged
    answer's (several collectors) name each alert's ``shard``."""
    rows = [alert_row(record_alert(a)) for a in response.alerts]
    if response.shards:  # merged: the collector that holds each
        for row, a in zip(rows, response.alerts, strict=True):
            row["shard"] = a.shard
    return rows


def alert_row(alert: Alert) -> dict[str, Any]:
    return {
        "name": alert.name, "node_id": alert.node_id, "key": alert.key, "severity": alert.severity,
        "state": alert.state, "labels": dict(alert.labels), "annotations": dict(alert.annotations),
        "starts_at": alert.starts_at, "ends_at": alert.ends_at,
    }  # fmt: skip


def alert_subject(row: dict[str, Any]) -> str:
    """What an alert row is about beyond its node: ``job J`` for a job's alert, else its key
    (``gpu:3``, ``nic:eth0:speed``); its cause after it, where it has one; ``-`` for neither."""
    labels: dict[str, str] = row["labels"]
    job = labels.get("job", "")
    parts = [f"job {job}" if job else str(row["key"])]
    if labels.get("cause"):
        parts.append(f"({labels['cause']})")
    return " ".join(p for p in parts if p) or "-"


def shows_shards(rows: list[dict[str, Any]]) -> bool:
    """Whether a table of these rows gets a SHARD column: they come from several collectors. A
    front's own workers ("worker-N") are one collector: the JSON names them, the tables do not."""
    return any(not str(row.get("shard", "worker-")).startswith("worker-") for row in rows)


def render_fleet(rows: list[dict[str, Any]]) -> str:
    """The fleet at a glance: per node its verdict, why, and what it costs; from several
    collectors, the one that holds it (``+N``: N others hold an older copy)."""
    merged = shows_shards(rows)
    lines = [
        f"{'NODE':<22} {'CONN':<4} {'GPUS':>4} {'STATE':<9} {'CAUSE':<13} {'STARVED':>7} {'LOST TODAY':>10} "
        f"{'NEEDS':>10} {'WORTH':<20} {'REPORTS':>8} {'LAST SEEN':>20} {'SKEW':>7} {'REFUSED':>7}"
        + ("  SHARD" if merged else "")
    ]
    notes = []
    for row in rows:
        ratio = row["starvation_ratio"]
        # The state is the collector's (collector/states/): the same word as the page's.
        state = row["state"] or "-"
        needs = row["needed_ingest_bytes_per_second"]
        forming = forming_words(row.get("window_seen_seconds") or 0.0, row.get("window_seconds") or 0.0)
        if forming and state not in (DOWN, MOVED, NEW, NO_GPU, STOPPED) and row.get("gpu_count"):
            notes.append(f"{row['node_id']}: {forming}")
        # A waiting node's "why" is the node of its job it waits on.
        waiting = row.get("waiting_on") or []
        cause = row["cause"] or (f"on {','.join(waiting)}" if waiting else "-")
        unknown = (row.get("evidence") or {}).get(WAIT_UNKNOWN)
        if unknown:  # its GPUs' readings cannot tell computing from waiting: said, never a guessed share
            notes.append(f"{row['node_id']}: wait share unknown: {CODE_WORDS.get(unknown, unknown)}")
        lines.append(
            f"{row['node_id']!s:<22} {'yes' if row['connected'] else 'no':<4} {row['gpu_count']:>4} "
            f"{state:<9} {short(cause, 13):<13} {f'{ratio:.0%}' if ratio is not None else '-':>7} "
            f"{row['gpu_hours_lost_today']:>10.2f} {ingest_words(row['cause'], needs) if needs else '-':>10} "
            f"{short(worth_words(row.get('if_fixed')), 20):<20} "
            f"{row['reports_total']:>8} {iso_time(float(row['last_seen'])):>20} "
            f"{clock_skew(row.get('clock_skew_seconds')):>7} {row.get('clock_refused_reports_total', 0):>7}"
            + (f"  {_shard_words(row)}" if merged else "")
        )
    if any(row.get("if_fixed") for row in rows):
        notes.append(
            "(WORTH: the speed-up if the node's bottleneck were lifted, and what it saves a day; --json says how)"
        )
    return "\n".join(map(escape_controls, lines + notes + stores_failing(rows)))


def stores_failing(rows: list[dict[str, Any]]) -> list[str]:
    """One line for each store (a collector's, or a front's worker's) that holds some of ``rows``
    and cannot commit: where, for how long, and the last flush's error."""
    failing: dict[str, dict[str, Any]] = {}
    for row in rows:
        store = row.get("store_failing")
        where = str(row.get("shard", ""))
        if store and (where not in failing or store["seconds"] > failing[where]["seconds"]):
            failing[where] = store
    return [
        f"store failing{f' on {where}' if where else ''} for {store['seconds']:.0f} s: {store['error']} — "
        "its nodes' reports are held by their agents until it writes (their figures are its last commit's)"
        for where, store in sorted(failing.items())
    ]


def _shard_words(row: dict[str, Any]) -> str:
    stale = row.get("stale_shards") or []
    return str(row.get("shard", "")) + (f" (+{len(stale)} stale)" if stale else "")


def short(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut in the middle, where names that share a
    prefix or a suffix (``torch/10.0.0.1:29500``, ``gpu-node-017``) still differ, marked ``…``;
    control characters escaped first (``core/program/safe_text.py``), so the cut text is what shows."""
    text = escape_controls(text)
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def clock_skew(seconds: float | None) -> str:
    """A node's clock skew, short: ``+0.2s``, ``-12m``, ``+1.5h``; ``-`` when not known."""
    if seconds is None:
        return "-"
    if abs(seconds) < 60:
        return f"{seconds:+.1f}s"
    if abs(seconds) < 3600:
        return f"{seconds / 60:+.0f}m"
    return f"{seconds / 3600:+.1f}h"


def iso_time(seconds: float) -> str:
    if not seconds:
        return "-"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
