"""The fleet page on ``--http-listen``: ``/``, ``/node/NAME``, ``/jobs``, ``/job/NAME``, ``/alerts``
and their JSON API; ``/ledger`` and ``/api/ledger`` from this collector's own store (``ledger_page``).

Each page is a small HTML shell (``fleet_assets``) whose script fetches the JSON behind it
(``/api/fleet``, ``/api/node/NAME``, ``/api/alerts``) and draws it as plain SVG, refreshing
itself; nothing is fetched from anywhere else. The JSON is made from what the collector keeps in
memory (each node's row, ``page_rows``; its detector's latest verdict), on the HTTP server's
thread, like ``/metrics``; a node's timeline comes from the collector's history (its per-minute
rows) and alerts from the alert book, both on the store's thread. GPU-hours lost today are the ledger's
split, counted by each node's history in memory (``NodeState.lost_today_seconds``) from what the
store held of the day at start-up: the page reads no SQLite for them (without a history, the
detector's count beside it, ``node_timeline``). The job pages' JSON is ``job_pages``'s: the job
roll-up's verdicts beside each node's own; a job judged elsewhere (another worker or collector)
is a 404 here that carries the cards of its nodes held here, for the merged page
(``fleet/page_merge.py``). The pages sit behind the same binding, TLS and credentials as
``/metrics``.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

from nodeagent.collector.alerts.alert import Alert
from nodeagent.collector.history.minutes import DAY_SECONDS, NODE_ROW, MinuteRow
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.ingest.shown_state import down_after_seconds
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.payoff.worth import node_worth
from nodeagent.collector.states.words import DOWN, MOVED, NEW, NO_GPU, STOPPED, worst_first
from nodeagent.collector.views.fleet_assets import shell_for
from nodeagent.collector.views.job_pages import JobPages
from nodeagent.collector.views.ledger_page import LedgerPage
from nodeagent.collector.views.page_rows import counts, node_row
from nodeagent.core.detector.verdict_words import evidence_words, verdict_sentence

if TYPE_CHECKING:
    from nodeagent.collector.views.fleet_state import FleetState

# ``counts`` too, which the merged page (fleet/page_merge.py) takes from here.
__all__ = ["HTML_TYPE", "JSON_TYPE", "FleetPage", "Reply", "counts"]

ALERTS_TIMEOUT_SECONDS: Final = 5.0
# The node page's timeline: this far back, from the collector's history (per-minute rows).
TIMELINE_SECONDS: Final = 6 * 3600.0
HISTORY_TIMEOUT_SECONDS: Final = 5.0
JSON_TYPE: Final = "application/json"
HTML_TYPE: Final = "text/html; charset=utf-8"

Reply = tuple[str, str, bytes]


class FleetPage:
    def __init__(self, server: FleetState) -> None:
        self.server = server
        self.ledger = LedgerPage(server.ask_ledger)
        self.job_pages = JobPages(server, self._alerts)

    def route(self, path: str, query: str) -> Reply | None:
        """The reply for ``path``, None where it is not a page of the fleet view."""
        ledger = self.ledger.route(path, query)
        if ledger is not None:
            return ledger
        params = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
        shell = shell_for(path)
        if shell is not None:
            return "200 OK", HTML_TYPE, shell
        if path == "/api/fleet":
            return _json(self.fleet(params.get("state"), params.get("cause")))
        if path == "/api/alerts":
            return _json({"alerts": [a.to_plain() for a in self._alerts()]})
        if path.startswith("/api/node/"):
            detail = self.node(urllib.parse.unquote(path.removeprefix("/api/node/")))
            if detail is None:
                return "404 Not Found", JSON_TYPE, b'{"error": "no such node"}\n'
            return _json(detail)
        if path == "/api/jobs":
            return _json(self.jobs())
        if path.startswith("/api/job/"):
            # A job key may hold "/" (torch/HOST:PORT): the rest of the path, unquoted, is the name.
            name = urllib.parse.unquote(path.removeprefix("/api/job/"))
            job = self.job_pages.job(name)
            if job is None:
                # Judged elsewhere (or nowhere): the cards of its nodes held here, for the merge.
                members = self.job_pages.job_members(name)
                body = {"error": "no such job", **({"node_details": members} if members else {})}
                return "404 Not Found", JSON_TYPE, json.dumps(body, separators=(",", ":")).encode()
            return _json(job)
        return None

    # ---- what the pages show ----

    def jobs(self) -> dict[str, Any]:
        """``/api/jobs`` (``job_pages``)."""
        return self.job_pages.jobs()

    def fleet(self, state: str | None = None, cause: str | None = None) -> dict[str, Any]:
        now = self.server.ingest.clock()
        window = self.server.ingest.detector_config.window_seconds
        down = down_after_seconds(self.server.ingest)
        source = self.lost_today_source(now)
        rows = [node_row(node, now, window, down) for node in list(self.server.ingest.nodes.values())]
        judged = _jobs_of_nodes(self.server.ingest.jobs.verdicts())
        for r in rows:
            r["jobs"] = self._jobs_of(r["node_id"], judged)
        states = counts(r["state"] for r in rows)
        causes = counts(r["cause"] for r in rows if r["cause"])
        shown = [r for r in rows if (not state or r["state"] == state) and (not cause or r["cause"] == cause)]
        shown.sort(key=worst_first)
        # The store cannot commit (a full disk): nothing is acknowledged, the agents hold their reports.
        failing = self.server.ingest.flusher.failing_store()
        stores = [] if failing is None else [{"seconds": failing[0], "error": failing[1]}]
        return {
            "time_unix_seconds": now, "gpu_hours_lost_today_source": source, "states": states, "causes": causes,
            "nodes": shown, "stores_failing": stores,
        }  # fmt: skip

    def lost_today_source(self, now: float) -> str:
        """Where GPU-hours lost today come from: ``history`` (the ledger's split: the day as stored,
        then counted live), or ``memory since HH:MM UTC`` (``--no-history``: the detector's count
        since this collector started, or since midnight UTC once it has run through one)."""
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
        out = node_row(node, now, window, down_after_seconds(self.server.ingest))
        out["gpu_hours_lost_today_source"] = self.lost_today_source(now)
        detector = node.detector
        verdict = detector.verdict.to_plain() if detector is not None else None
        out["verdict"] = verdict
        if verdict is not None:
            _add_computing_sources(node, verdict.get("gpus") or [])
        said = verdict_sentence(verdict) if verdict is not None else "no reports yet"
        if out["state"] == NO_GPU or (not node.row.gpu_count and out["state"] not in (DOWN, STOPPED, NEW, MOVED)):
            said = "no GPU here to wait for data"  # as top says it, not "0 GPUs: idle" nor a forming window
        if out["state"] == STOPPED:
            heard = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(node.row.last_seen))
            out["sentence"] = f"stopped: its agent said goodbye {_ago(now - node.stopped_at)} ago, last heard {heard}"
            out["last_known"] = said
        elif out["state"] == DOWN:
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
        # What lifting its bottleneck is worth, while it is starved now (docs/jobs.md#what-a-fix-is-worth).
        fixed = None
        if detector is not None and out["last_known"] is None:
            prices, payoff = self.server.worth_config
            fixed = node_worth(detector.verdict, evidence, node.topology, prices, payoff)
        out["if_fixed"] = fixed.to_plain() if fixed is not None else None
        out["timeline_source"], out["timeline"] = self._timeline(node)
        # Its own alerts, and a job's alert that names it (JobStraggler: the straggler).
        out["alerts"] = [a.to_plain() for a in self._alerts() if node_id in (a.node_id, a.labels.get("node"))]
        out["jobs"] = self._jobs_of(node_id, _jobs_of_nodes(self.server.ingest.jobs.verdicts()))
        return out

    def _jobs_of(self, node_id: str, judged: dict[str, list[str]]) -> list[str]:
        """The node's multi-node jobs: those its reports name (judged here or on another worker or
        collector, the job's owner) and those judged here that count it."""
        return sorted({*judged.get(node_id, ()), *self.server.ingest.jobs.jobs_of(node_id)})

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
        return sorted(alerts, key=lambda a: a.order)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _jobs_of_nodes(verdicts: tuple[JobVerdict, ...]) -> dict[str, list[str]]:
    """Node -> the multi-node jobs that count it, by name."""
    out: dict[str, list[str]] = {}
    for v in sorted(verdicts, key=lambda v: v.job):
        for node_id in v.nodes:
            out.setdefault(node_id, []).append(v.job)
    return out


def _add_computing_sources(node: NodeState, gpus: list[dict[str, Any]]) -> None:
    """Each GPU row's computing-share source and its evidence, as the node's reports last said
    (``GpuSample.computing_source``, decided by the agent; its words sent when they say something
    new, agent/sampling/source_reasons.py): which reading its shares come from."""
    detector = node.detector
    if detector is None or not gpus:
        return
    sources = detector.computing_sources()
    for row in gpus:
        said = sources.get(row.get("index", -1))
        if said is not None:
            row.setdefault("computing_source", said[0])
            row.setdefault("computing_source_reason", said[1])


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


def _json(body: dict[str, Any]) -> Reply:
    return "200 OK", JSON_TYPE, json.dumps(body, separators=(",", ":")).encode()
