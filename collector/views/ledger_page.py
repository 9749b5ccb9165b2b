"""The waste ledger on the HTTP listener: ``/ledger`` (a page rendered here, no script) and its
JSON, ``/api/ledger``.

Both read ``Query.Ledger``'s answer through an ``ask`` given by whoever serves the page: a
collector's own store (``CollectorServer.ask_ledger``), a front's workers merged
(``workers/front_http.py``), or several collectors merged (``fleet/fleet_pages.py``), each by
``fleet/merge.py``'s rules, as the ``ledger`` command gets it. ``?by=job|node|fleet|account|namespace`` (job),
``?since=`` a span back from ``?until=`` (30d) or a time, ``?until=`` (now), ``?sort=lost|held|name``
(the money lost first), ``?job=KEY`` one job's section. A bad value is a 400 with one line.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from nodeagent.collector.history.split import LOST_CATEGORIES
from nodeagent.collector.ledger.prices import NO_PRICES_LINE, priced
from nodeagent.collector.ledger.read import BY
from nodeagent.collector.views.ledger_html import render_job_ledger, render_ledger
from nodeagent.core.quantities.units import parse_duration_seconds
from nodeagent.v1 import nodeagent_pb2 as pb

LEDGER_PATHS: Final = ("/ledger", "/api/ledger")
SORTS: Final = ("lost", "held", "name", "worth")
DEFAULT_SINCE: Final = "30d"
PARAMS: Final = ("by", "since", "until", "sort", "job")
HTML_TYPE: Final = "text/html; charset=utf-8"
JSON_TYPE: Final = "application/json"

Reply = tuple[str, str, bytes]
AskLedger = Callable[[pb.LedgerRequest], pb.LedgerResponse]


class LedgerUnavailableError(Exception):
    """No ledger to show: the store or the shards did not answer (one line why)."""


class BadLedgerQueryError(ValueError):
    """A query value the page cannot take (one line why)."""


@dataclass(frozen=True)
class LedgerAsk:
    by: str
    sort: str
    since: str
    start: float
    end: float
    job: str

    def request(self) -> pb.LedgerRequest:
        return pb.LedgerRequest(since_unix_seconds=self.start, until_unix_seconds=self.end, by=self.by)

    def link(self, **changed: str) -> str:
        """This page's address with ``changed`` values (a value of "" left out)."""
        values = {"by": self.by, "since": self.since, "sort": self.sort, "job": self.job, **changed}
        kept = {k: v for k, v in values.items() if v and (k, v) not in (("by", "job"), ("sort", "lost"))}
        if values.get("since") == DEFAULT_SINCE:
            kept.pop("since", None)
        query = urllib.parse.urlencode(kept)
        return "/ledger" + (f"?{query}" if query else "")


def parse_ledger_query(query: str, now: float) -> LedgerAsk:
    """The page's question; ``BadLedgerQueryError`` with one line for a value it cannot take."""
    params: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key not in PARAMS:
            raise BadLedgerQueryError(f"unknown parameter {key[:40]!r}: expected one of {', '.join(PARAMS)}")
        if key in params:
            raise BadLedgerQueryError(f"{key} given twice")
        params[key] = value
    by = params.get("by") or "job"
    if by not in BY:
        raise BadLedgerQueryError(f"by: expected one of {', '.join(BY)}, got {by[:40]!r}")
    sort = params.get("sort") or "lost"
    if sort not in SORTS:
        raise BadLedgerQueryError(f"sort: expected one of {', '.join(SORTS)}, got {sort[:40]!r}")
    job = params.get("job", "")
    if job and by != "job":
        raise BadLedgerQueryError("job: a job's ledger is by=job")
    end = _time("until", params["until"]) if params.get("until") else now
    since = params.get("since") or DEFAULT_SINCE
    start = _since(since, end)
    if start >= end:
        raise BadLedgerQueryError(f"since: the span starts at {start:.0f}, not before its end {end:.0f}")
    return LedgerAsk(by=by, sort=sort, since=since, start=start, end=end, job=job)


def _since(text: str, end: float) -> float:
    """A span back from ``end`` with its unit (``30d``, ``12h``), or a time."""
    if text[-1:].isalpha() and text[-1:].upper() != "Z":
        try:
            return end - parse_duration_seconds(text)
        except ValueError:
            raise BadLedgerQueryError(f"since: {text[:40]!r} is not a span (7d, 12h) nor a time") from None
    return _time("since", text)


def _time(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        try:
            value = datetime.fromisoformat(text).timestamp()
        except ValueError:
            raise BadLedgerQueryError(f"{name}: {text[:40]!r} is neither unix seconds nor ISO 8601") from None
    if not 0 <= value < float("inf"):
        raise BadLedgerQueryError(f"{name}: {text[:40]!r} is not a time")
    return value


def sorted_rows(rows: list[pb.LedgerRow], sort: str) -> list[pb.LedgerRow]:
    """``lost``: the most money lost first (then the most hours lost), ``held``: the most
    GPU-hours held first, ``name``: by key, ``worth``: what fixing the row's live bottleneck is
    worth a day, the most first (docs/jobs.md#what-a-fix-is-worth)."""
    if sort == "name":
        return sorted(rows, key=lambda r: r.key)
    if sort == "held":
        return sorted(rows, key=lambda r: (-r.gpu_hours_held, r.key))
    if sort == "worth":  # what fixing its live bottleneck is worth a day: money where priced, else hours
        return sorted(rows, key=lambda r: (-r.worth_money_per_day, -r.worth_gpu_hours_per_day, r.key))
    return sorted(rows, key=lambda r: (-r.cost_lost, -sum(r.gpu_hours_lost.values()), r.key))


def ledger_plain(row: pb.LedgerRow, by: str) -> dict[str, Any]:
    """One row as JSON: the hours, each lost category (0 when none), the unmeasured hours, the
    money (null without ``[prices]``: no price is not a price of 0), the money lost as a range
    (``cost_lost`` to ``cost_lost_max``, its unmeasured hours' price added); a job's account,
    namespace, nodes and stragglers; an account's or namespace's jobs, nodes and stragglers."""
    priced = bool(row.currency)
    out: dict[str, Any] = {
        by: row.key, "gpu_hours_held": row.gpu_hours_held, "gpu_hours_computing": row.gpu_hours_computing,
        "gpu_hours_lost": {name: row.gpu_hours_lost.get(name, 0.0) for name in LOST_CATEGORIES},
        "gpu_hours_unmeasured": row.gpu_hours_unmeasured,
        "cost": row.cost if priced else None, "cost_lost": row.cost_lost if priced else None,
        "cost_unmeasured": row.cost_unmeasured if priced else None,
        "cost_lost_max": row.cost_lost + row.cost_unmeasured if priced else None,
        "currency": row.currency or None,
        "first_unix_seconds": row.first_unix_seconds, "last_unix_seconds": row.last_unix_seconds,
    }  # fmt: skip
    if by == "job":
        out["account"], out["namespace"] = row.account, row.namespace
    if by in ("account", "namespace"):
        out["jobs"] = list(row.jobs)
    if by in ("job", "account", "namespace"):
        out["nodes"] = list(row.nodes)
        out["stragglers"] = [{"node": s.node_id, "gpu_hours_waited": s.gpu_hours_waited} for s in row.stragglers]
    if by == "node":
        out["gpu_model"] = row.gpu_model
    if by in ("job", "node"):  # what lifting its live bottleneck would save a day (collector/payoff/)
        out["worth_fixing"] = (
            {
                "gpu_hours_per_day": row.worth_gpu_hours_per_day,
                "money_per_day": row.worth_money_per_day if row.HasField("worth_money_per_day") else None,
            }
            if row.HasField("worth_gpu_hours_per_day")
            else None
        )
    return out


class LedgerPage:
    def __init__(self, ask: AskLedger, clock: Callable[[], float] = time.time) -> None:
        self.ask = ask
        self.clock = clock

    def route(self, path: str, query: str) -> Reply | None:
        """``/ledger`` or ``/api/ledger``; None for any other path."""
        if path not in LEDGER_PATHS:
            return None
        as_json = path == "/api/ledger"
        try:
            asked = parse_ledger_query(query, self.clock())
        except BadLedgerQueryError as err:
            return _refusal("400 Bad Request", str(err), as_json)
        try:
            response = self.ask(asked.request())
        except LedgerUnavailableError as err:
            return _refusal("503 Service Unavailable", str(err), as_json)
        rows = sorted_rows(list(response.rows), asked.sort)
        if asked.job:
            rows = [r for r in rows if r.key == asked.job]
        shards = [{"shard": s.shard, "answered": s.answered, "error": s.error} for s in response.shards]
        if as_json:
            body = {
                "by": asked.by, "sort": asked.sort, "since_unix_seconds": asked.start, "until_unix_seconds": asked.end,
                "rows": [ledger_plain(r, asked.by) for r in rows], "shards": shards,
                "priced": priced(r.currency for r in response.rows),
            }  # fmt: skip
            if rows and not body["priced"]:
                body["no_prices"] = NO_PRICES_LINE  # the line the page and the command show
            return "200 OK", JSON_TYPE, json.dumps(body, separators=(",", ":")).encode()
        render = render_job_ledger if asked.job else render_ledger
        return "200 OK", HTML_TYPE, render(asked, rows, shards)


def _refusal(status: str, reason: str, as_json: bool) -> Reply:
    line = reason.splitlines()[0] if reason else status
    if as_json:
        return status, JSON_TYPE, json.dumps({"error": line}).encode() + b"\n"
    return status, "text/plain; charset=utf-8", line.encode() + b"\n"
