"""The fleet page on ``--http-listen``: ``/``, ``/node/NAME``, ``/alerts`` and their JSON API.

Each page is a small HTML shell (``fleet_assets``) whose script fetches the JSON behind it
(``/api/fleet``, ``/api/node/NAME``, ``/api/alerts``) and draws it as plain SVG, refreshing
itself; nothing is fetched from anywhere else. The JSON is made from what the collector keeps in
memory (each node's row, its detector's latest verdict), on the HTTP server's thread, like
``/metrics``; a node's timeline comes from the collector's history (its per-minute rows) and
alerts from the alert book, both on the store's thread. GPU-hours lost today are the count kept
beside each node's detector (``node_timeline``), which a collector with a history starts at
start-up from what the history holds of the day: the page reads no SQLite for them. The pages
sit behind the same binding, TLS and credentials as ``/metrics``.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

from nodeagent.collector.alerts.book import Alert
from nodeagent.collector.history.minutes import DAY_SECONDS, NODE_ROW, MinuteRow
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.views.fleet_assets import page
from nodeagent.collector.views.shown_state import DOWN, is_silent, node_shown_state
from nodeagent.core.detector.verdict_words import evidence_words, forming_words, verdict_sentence

if TYPE_CHECKING:
    from nodeagent.collector.ingest.server import CollectorServer

# Worst first: a starved node costs GPU time now; a down one says nothing at all.
STATE_ORDER: Final = ("starved", "down", "lost", "throttled", "warmup", "busy", "idle", "no-gpu", "new")
ALERTS_TIMEOUT_SECONDS: Final = 5.0
# The node page's timeline: this far back, from the collector's history (per-minute rows).
TIMELINE_SECONDS: Final = 6 * 3600.0
HISTORY_TIMEOUT_SECONDS: Final = 5.0
JSON_TYPE: Final = "application/json"
HTML_TYPE: Final = "text/html; charset=utf-8"

Reply = tuple[str, str, bytes]


class FleetPage:
    def __init__(self, server: CollectorServer) -> None:
        self.server = server

    def route(self, path: str, query: str) -> Reply | None:
        """The reply for ``path``, None where it is not a page of the fleet view."""
        params = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
        if path == "/":
            return "200 OK", HTML_TYPE, page("fleet")
        if path == "/alerts":
            return "200 OK", HTML_TYPE, page("alerts")
        if path.startswith("/node/") and len(path) > len("/node/"):
            return "200 OK", HTML_TYPE, page("node")
        if path == "/api/fleet":
            return _json(self.fleet(params.get("state"), params.get("cause")))
        if path == "/api/alerts":
            return _json({"alerts": [a.to_plain() for a in self._alerts()]})
        if path.startswith("/api/node/"):
            detail = self.node(urllib.parse.unquote(path.removeprefix("/api/node/")))
            if detail is None:
                return "404 Not Found", JSON_TYPE, b'{"error": "no such node"}\n'
            return _json(detail)
        return None

    # ---- what the pages show ----

    def fleet(self, state: str | None = None, cause: str | None = None) -> dict[str, Any]:
        now = self.server.ingest.clock()
        window = self.server.ingest.detector_config.window_seconds
        source = self.lost_today_source(now)
        rows = [_row(node, now, window) for node in list(self.server.ingest.nodes.values())]
        states = _counts(r["state"] for r in rows)
        causes = _counts(r["cause"] for r in rows if r["cause"])
        shown = [r for r in rows if (not state or r["state"] == state) and (not cause or r["cause"] == cause)]
        shown.sort(key=_worst_first)
        return {
            "time_unix_seconds": now, "gpu_hours_lost_today_source": source, "states": states, "causes": causes,
            "nodes": shown,
        }  # fmt: skip

    def lost_today_source(self, now: float) -> str:
        """Where GPU-hours lost today come from: ``history`` (the day as stored, then counted live),
        or ``memory since HH:MM UTC`` (``--no-history``: counted since this collector started, or
        since midnight UTC once it has run through one)."""
        ingest = self.server.ingest
        if ingest.history_config.enabled:
            return "history"
        since = max(ingest.counting_since, now // DAY_SECONDS * DAY_SECONDS)
        return "memory since " + time.strftime("%H:%M UTC", time.gmtime(since))

    def node(self, node_id: str) -> dict[str, Any] | None:
        node = self.server.ingest.nodes.get(node_id)
        if node is None:
            return None
        now = self.server.ingest.clock()
        window = self.server.ingest.detector_config.window_seconds
        out = _row(node, now, window)
        out["gpu_hours_lost_today_source"] = self.lost_today_source(now)
        detector = node.detector
        verdict = detector.verdict.to_plain() if detector is not None else None
        out["verdict"] = verdict
        said = verdict_sentence(verdict) if verdict is not None else "no reports yet"
        if out["state"] == DOWN:
            # What follows is the last verdict, not now: say when it was heard.
            heard = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(node.row.last_seen))
            out["sentence"] = f"down: no report for {_ago(now - node.row.last_seen)}, last heard {heard}"
            out["last_known"] = said
        else:
            out["sentence"] = f"{said} ({out['forming']})" if out["forming"] else said
            out["last_known"] = None
        evidence = detector.evidence.values if detector is not None else {}
        out["highways"] = {
            cause: evidence_words(cause, evidence) for cause in ("network", "storage", "cpu") if evidence
        }
        out["timeline_source"], out["timeline"] = self._timeline(node)
        out["alerts"] = [a.to_plain() for a in self._alerts() if a.node_id == node_id]
        return out

    def _timeline(self, node: NodeState) -> tuple[str, list[dict[str, Any]]]:
        """The node's minutes from the history store; without a history (``serve --no-history``)
        or when the store does not answer in time, the points kept in memory beside the detector."""
        server = self.server
        memory = ("memory", [p.to_plain() for p in node.timeline.points])
        if not server.ingest.history_config.enabled:
            return memory
        since = server.ingest.clock() - TIMELINE_SECONDS
        store = server.writer.store
        try:
            rows = server.writer.call_sync(
                store.history.minutes, node.row.node_id, NODE_ROW, since, None, timeout=HISTORY_TIMEOUT_SECONDS
            )
        except TimeoutError:
            return memory
        return "history", [_minute_point(r) for r in rows]

    def _alerts(self) -> list[Alert]:
        server = self.server
        try:
            alerts = server.writer.call_sync(server.alerting.recent, True, timeout=ALERTS_TIMEOUT_SECONDS)
        except TimeoutError:
            return []
        return sorted(alerts, key=lambda a: (a.ends_at is not None, -a.starts_at))


def _row(node: NodeState, now: float, window_seconds: float) -> dict[str, Any]:
    row = node.row
    detector = node.detector
    verdict = detector.verdict if detector is not None else None
    fresh = verdict is not None and bool(verdict.time_unix_seconds) and not is_silent(node, now, window_seconds)
    state = node_shown_state(node, now, window_seconds)
    gpus = []
    if fresh and verdict is not None:
        for g in verdict.gpus:
            busy = None if g.idle_ratio is None else round(1.0 - g.idle_ratio, 3)
            gpus.append({"index": g.index, "state": g.state, "cause": g.cause, "busy_ratio": busy})
    seen = detector.seen_seconds if detector is not None else 0.0
    return {
        "node_id": row.node_id,
        "connected": node.stream is not None,
        "last_seen": row.last_seen,
        "state": state,
        "cause": verdict.cause if fresh and verdict is not None else None,
        "starvation_ratio": verdict.starvation_ratio if fresh and verdict is not None else None,
        "gpu_hours_lost_today": round(node.timeline.lost_today_seconds_at(now) / 3600, 3),
        "gpu_count": row.gpu_count,
        "gpus": gpus,
        # While the detector's window fills, a starved node still reads busy: say so.
        "forming": forming_words(seen, window_seconds) if fresh else "",
    }


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _minute_point(row: MinuteRow) -> dict[str, Any]:
    """A history minute in the timeline's terms (those of ``node_timeline.TimelinePoint``)."""
    v = row.values
    received = [v[k] for k in ("nic_rx_bytes_per_second", "rdma_rx_bytes_per_second") if v.get(k) is not None]
    return {
        "time_unix_seconds": row.minute,
        "state": row.state,
        "starvation_ratio": v.get("starvation_ratio"),
        "gpu_busy_ratio": v.get("utilization_mean"),
        "network_rx_bytes_per_second": sum(received) if received else None,
        "disk_read_bytes_per_second": v.get("disk_read_bytes_per_second"),
        "cpu_busy_ratio": v.get("cpu_busy_ratio"),
    }


def _worst_first(row: dict[str, Any]) -> tuple[int, float, float, str]:
    rank = STATE_ORDER.index(row["state"]) if row["state"] in STATE_ORDER else len(STATE_ORDER)
    return (rank, -(row["starvation_ratio"] or 0.0), -row["gpu_hours_lost_today"], row["node_id"])


def _counts(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _json(body: dict[str, Any]) -> Reply:
    return "200 OK", JSON_TYPE, json.dumps(body, separators=(",", ":")).encode()
