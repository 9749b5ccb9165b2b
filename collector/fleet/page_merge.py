"""The fleet page's answers from several shards (``Page`` RPC replies) made into one page.

JSON (``/api/fleet``, ``/api/alerts``, ``/api/jobs``, ``/api/node/NAME``, ``/api/job/NAME``): the
items concatenated and each key's winner picked (``merge.pick_winners``; ranks and orders:
``fleet/winning_copy.py``; nodes by id, the freshest wins, the others named in ``stale_shards``; alerts
by (name, node, key), firing first; jobs by job, the verdict over most nodes; a job's cards of
nodes its judge does not hold from the shards that do, a 404 among them), each tagged with its
``shard``, re-sorted as the page sorts them, the counts per state re-summed, and a ``"shards"``
list saying which shard answered. A node's page is the answer of the shard that heard from the
node last. ``/api/fleet``'s filters (``state``, ``cause``) are applied here, after the merge:
ask the shards with ``shard_query`` (the filters taken off), so that a stale copy on one shard
never stands in for the fresh one on another.

``/metrics`` (Prometheus text): each family's HELP and TYPE once, the samples of every shard
after them, an identical series from several shards kept once (the first).

The HTML shells are the same on every shard: the first answer's is the page.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from nodeagent.collector.alerts.alert import plain_alert
from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.merge import pick_winner, pick_winners
from nodeagent.collector.fleet.winning_copy import node_rank, plain_job_rank, stale_shards
from nodeagent.collector.states.words import job_worst_first, worst_first
from nodeagent.collector.views.fleet_page import JSON_TYPE, counts
from nodeagent.v1 import nodeagent_pb2 as pb

FILTERS = ("state", "cause")
_SOURCE = "gpu_hours_lost_today_source"
METRICS_PATH = "/metrics"


def merge_page(path: str, query: str, answers: Sequence[Answer]) -> pb.PageResponse:
    """One page for ``path?query`` from the shards' ``PageResponse``s."""
    shards = shard_list(answers)
    pages = [(a.shard, a.reply) for a in answers if not a.error and isinstance(a.reply, pb.PageResponse)]
    if path == METRICS_PATH:
        texts = [reply.body.decode() for _shard, reply in pages if reply.status == 200]
        content_type = next((reply.content_type for _shard, reply in pages), "text/plain; version=0.0.4")
        return pb.PageResponse(status=200, content_type=content_type, body=merge_metrics_text(texts).encode())
    merger = _json_merger(path)
    if merger is None:  # an HTML shell, a script: the same on every shard
        if pages:
            return pages[0][1]
        return _json_reply(502, {"error": "no shard answered", "shards": shards})
    found = [(shard, json.loads(reply.body)) for shard, reply in pages if reply.status == 200]
    # A shard that holds nodes of a job without judging it answers 404 with their cards.
    held = [
        (shard, json.loads(reply.body or b"{}"))
        for shard, reply in pages
        if reply.status == 404 and reply.content_type == JSON_TYPE
    ]
    if not found:
        if held:
            cards = [{**card, "shard": shard} for shard, body in held for card in body.get("node_details", [])]
            body = {**held[0][1], **({"node_details": cards} if cards else {})}  # kept for a merge above this one
            return _json_reply(404, {**body, "shards": shards})
        if any(reply.status == 404 for _shard, reply in pages):
            return _json_reply(404, {"error": "not found", "shards": shards})
        return _json_reply(502, {"error": "no shard answered", "shards": shards})
    params = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
    merged = merge_job(found, params, held) if merger is merge_job else merger(found, params)
    merged["shards"] = shards
    return _json_reply(200, merged)


def shard_query(path: str, query: str) -> str:
    """The query to ask each shard for ``path``: ``/api/fleet``'s filters left to the merge."""
    if path != "/api/fleet":
        return query
    kept = [(k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True) if k not in FILTERS]
    return urllib.parse.urlencode(kept)


def shard_list(answers: Sequence[Answer]) -> list[dict[str, Any]]:
    return [{"shard": a.shard, "answered": not a.error, "error": a.error} for a in answers]


Found = list[tuple[str, dict[str, Any]]]


def merge_fleet(found: Found, params: dict[str, str]) -> dict[str, Any]:
    states: dict[str, int] = {}
    causes: dict[str, int] = {}
    for _shard, body in found:
        _add_counts(states, body.get("states", {}))
        _add_counts(causes, body.get("causes", {}))
    copies = [(shard, node) for shard, body in found for node in body.get("nodes", [])]
    for shard, node in copies:
        node["shard"] = shard  # the parsed answers are this merge's own: tagged in place
    picks = pick_winners(copies, lambda n: n["node_id"], lambda n: node_rank(n["last_seen"]))
    # A node counted on two shards is one node: its stale copies leave the counts.
    for pick in picks.values():
        for _shard, copy in pick.losers:
            _add_counts(states, {copy["state"]: -1})
            if copy.get("cause"):
                _add_counts(causes, {copy["cause"]: -1})
    nodes = []
    state, cause = params.get("state"), params.get("cause")
    for pick in picks.values():
        node = pick.item
        node["stale_shards"] = stale_shards(pick.shard, [shard for shard, _copy in pick.losers])
        if (not state or node["state"] == state) and (not cause or node.get("cause") == cause):
            nodes.append(node)
    nodes.sort(key=worst_first)
    sources = sorted({str(body["gpu_hours_lost_today_source"]) for _s, body in found if body.get(_SOURCE)})
    return {
        "time_unix_seconds": max(body.get("time_unix_seconds", 0.0) for _s, body in found),
        "gpu_hours_lost_today_source": "; ".join(sources),
        "states": {k: v for k, v in states.items() if v > 0},
        "causes": {k: v for k, v in causes.items() if v > 0},
        "nodes": nodes,
        "stores_failing": stores_failing(found),
    }


def stores_failing(found: Found) -> list[dict[str, Any]]:
    """Every shard's failing store, named by its shard (``HOST:PORT/worker-N`` for a front's
    worker among ``[fleet] collectors``), the longest failing first."""
    stores = [
        {**store, "shard": f"{shard}/{store['shard']}" if store.get("shard") else shard}
        for shard, body in found
        for store in body.get("stores_failing", [])
    ]
    return sorted(stores, key=lambda store: (-store["seconds"], store["shard"]))


def merge_alert_list(found: Found, _params: dict[str, str]) -> dict[str, Any]:
    return {"alerts": _merged_alerts((shard, body.get("alerts", [])) for shard, body in found)}


def merge_jobs(found: Found, _params: dict[str, str]) -> dict[str, Any]:
    copies = [(shard, {**row, "shard": shard}) for shard, body in found for row in body.get("jobs", [])]
    picks = pick_winners(copies, lambda j: j["job"], plain_job_rank)
    jobs = sorted((pick.item for pick in picks.values()), key=job_worst_first)
    return {
        "time_unix_seconds": max(body.get("time_unix_seconds", 0.0) for _s, body in found),
        "states": counts(j["state"] for j in jobs),
        "jobs": jobs,
    }


def merge_node(found: Found, _params: dict[str, str]) -> dict[str, Any]:
    """The shard that heard from the node last; its alerts and those of the others (a job's
    alert naming the node is held where the job is judged)."""
    won = pick_winner(found, lambda b: node_rank(b.get("last_seen", 0.0)))
    shard, body = won.shard, won.item
    return {
        **body, "shard": shard, "stale_shards": sorted(s for s, _b in found if s != shard),
        "alerts": _merged_alerts((s, b.get("alerts", [])) for s, b in found),
    }  # fmt: skip


def merge_job(found: Found, _params: dict[str, str], held: Found | None = None) -> dict[str, Any]:
    """The verdict judged over most nodes (then the newest); a node card its shard does not hold
    (``known: false``) filled from the shard that holds the node: another that judged the job too,
    or one that only holds it (``held``: its 404 carries the cards of its nodes that name the job;
    a connected node's card first). Whether the node holds the job back is the verdict's."""
    won = pick_winner(found, plain_job_rank)
    shard, body = won.shard, won.item
    known: dict[str, dict[str, Any]] = {}
    for other, other_body in [*found, *(held or [])]:
        for card in other_body.get("node_details", []):
            had = known.get(card["node_id"])
            if card.get("known") and (had is None or (card.get("connected") and not had.get("connected"))):
                known[card["node_id"]] = {**card, "shard": other}
    cause = str(body.get("cause") or "")
    cards = []
    for card in body.get("node_details", []):
        if card.get("known"):
            cards.append({**card, "shard": shard})
        else:
            cards.append(_filled_card(card, known.get(card["node_id"]), cause))
    return {
        **body, "shard": shard, "node_details": cards,
        "alerts": _merged_alerts((s, b.get("alerts", [])) for s, b in found),
    }  # fmt: skip


def _filled_card(card: dict[str, Any], holder: dict[str, Any] | None, cause: str) -> dict[str, Any]:
    """The winner's card of a node it does not hold, as the node's holder shows it; the sentence
    and the highway (the one of the job's cause, of the holder's words for each) for a straggler."""
    if holder is None:
        return card
    out = {**holder, "straggler": bool(card.get("straggler"))}
    words = out.pop("highways", None)
    if not out["straggler"]:
        out.pop("sentence", None)
        out.pop("highway", None)
    elif words is not None:
        out["highway"] = words.get(cause, "")
    return out


def merge_metrics_text(texts: Sequence[str]) -> str:
    """Prometheus text of several shards as one page: families in the order first seen, HELP and
    TYPE once each, samples concatenated, a series seen twice kept once (the first)."""
    order: list[str] = []
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    seen: set[str] = set()
    for text in texts:
        family = ""
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    if family not in heads:
                        order.append(family)
                        heads[family], samples[family] = [], []
                    if not any(h.split(None, 2)[1] == parts[1] for h in heads[family]):
                        heads[family].append(line)
                continue
            series = series_of(line)
            if series in seen:
                continue
            seen.add(series)
            if family not in heads or not series.startswith(family):
                family = series.split("{", 1)[0]
                if family not in heads:
                    order.append(family)
                    heads[family], samples[family] = [], []
            samples[family].append(line)
    out = [line for family in order for line in (*heads[family], *samples[family])]
    return "\n".join(out) + "\n" if out else ""


def series_of(line: str) -> str:
    """A sample line's series (name and labels), without its value and timestamp."""
    brace = line.find("{")
    space = line.find(" ")
    if brace < 0 or 0 <= space < brace:
        return line.split(" ", 1)[0]
    quoted = escaped = False
    for i in range(brace, len(line)):
        c = line[i]
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            return line[: i + 1]
    return line


def _merged_alerts(lists: Any) -> list[dict[str, Any]]:
    copies = [(shard, {**row, "shard": shard}) for shard, alerts in lists for row in alerts]
    picks = pick_winners(copies, lambda a: plain_alert(a).identity, lambda a: plain_alert(a).rank)
    return sorted((pick.item for pick in picks.values()), key=lambda a: plain_alert(a).order)


def _add_counts(into: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        into[key] = into.get(key, 0) + n


def _json_reply(status: int, body: dict[str, Any]) -> pb.PageResponse:
    return pb.PageResponse(status=status, content_type=JSON_TYPE, body=json.dumps(body, separators=(",", ":")).encode())


def _json_merger(path: str) -> Callable[[Found, dict[str, str]], dict[str, Any]] | None:
    if path == "/api/fleet":
        return merge_fleet
    if path == "/api/alerts":
        return merge_alert_list
    if path == "/api/jobs":
        return merge_jobs
    if path.startswith("/api/node/"):
        return merge_node
    if path.startswith("/api/job/"):
        return merge_job
    return None
