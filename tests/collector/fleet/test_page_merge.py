"""The fleet page merged: counts re-summed without a moved node's stale copy, filters after the
merge, the page's order, a node's freshest page, a job's cards filled from the shard that holds
them, ``/metrics`` families once and series once."""

from __future__ import annotations

import json
from typing import Any

from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.page_merge import merge_metrics_text, merge_page, series_of, shard_query
from nodeagent.collector.views.fleet_page import JSON_TYPE
from nodeagent.v1 import nodeagent_pb2 as pb

DEAD = Answer("c:3", None, "DEADLINE_EXCEEDED: no answer within 2 s")


def _page(body: dict[str, Any], status: int = 200) -> pb.PageResponse:
    return pb.PageResponse(status=status, content_type=JSON_TYPE, body=json.dumps(body).encode())


def _node(node_id: str, state: str, last_seen: float, cause: str | None = None, ratio: float = 0.0) -> dict[str, Any]:
    return {"node_id": node_id, "state": state, "cause": cause, "last_seen": last_seen,
            "starvation_ratio": ratio, "gpu_hours_lost_today": 0.0}  # fmt: skip


def _fleet(*nodes: dict[str, Any]) -> dict[str, Any]:
    states: dict[str, int] = {}
    causes: dict[str, int] = {}
    for n in nodes:
        states[n["state"]] = states.get(n["state"], 0) + 1
        if n["cause"]:
            causes[n["cause"]] = causes.get(n["cause"], 0) + 1
    return {"time_unix_seconds": max(n["last_seen"] for n in nodes), "gpu_hours_lost_today_source": "history",
            "states": states, "causes": causes, "nodes": list(nodes)}  # fmt: skip


def _merged(path: str, query: str, answers: list[Answer]) -> tuple[int, dict[str, Any]]:
    reply = merge_page(path, query, answers)
    return reply.status, json.loads(reply.body)


def test_fleet_counts_order_filters_and_the_dead_shard() -> None:
    a = _fleet(_node("moved", "down", 100.0), _node("a1", "busy", 150.0))
    b = _fleet(_node("moved", "starved", 200.0, "network", 0.4), _node("b1", "starved", 190.0, "storage", 0.2))
    answers = [Answer("a:1", _page(a)), Answer("b:2", _page(b)), DEAD]
    status, body = _merged("/api/fleet", "", answers)
    assert status == 200
    assert [(n["node_id"], n["shard"], n["stale_shards"]) for n in body["nodes"]] == [
        ("moved", "b:2", ["a:1"]), ("b1", "b:2", []), ("a1", "a:1", []),
    ]  # fmt: skip
    assert body["states"] == {"starved": 2, "busy": 1}  # the stale "down" copy is not a node
    assert body["causes"] == {"network": 1, "storage": 1}
    assert body["time_unix_seconds"] == 200.0 and body["gpu_hours_lost_today_source"] == "history"
    assert body["shards"] == [
        {"shard": "a:1", "answered": True, "error": ""}, {"shard": "b:2", "answered": True, "error": ""},
        {"shard": "c:3", "answered": False, "error": "DEADLINE_EXCEEDED: no answer within 2 s"},
    ]  # fmt: skip
    # Filters apply to the merged rows: the stale "down" copy of "moved" is not shown for state=down.
    _, down = _merged("/api/fleet", "state=down", answers)
    assert down["nodes"] == [] and down["states"] == body["states"]
    _, net = _merged("/api/fleet", "cause=network", answers)
    assert [n["node_id"] for n in net["nodes"]] == ["moved"]
    assert shard_query("/api/fleet", "state=down&cause=network&x=1") == "x=1"
    assert shard_query("/api/alerts", "state=down") == "state=down"


def _alert(name: str, node: str, starts: float, ends: float | None) -> dict[str, Any]:
    return {"name": name, "node_id": node, "key": "", "state": "firing" if ends is None else "resolved",
            "starts_at_unix_seconds": starts, "ends_at_unix_seconds": ends, "labels": {}}  # fmt: skip


def test_alerts_and_jobs() -> None:
    a = {"alerts": [_alert("NodeDown", "n", 10.0, 20.0), _alert("GpuLost", "m", 5.0, None)]}
    b = {"alerts": [_alert("NodeDown", "n", 1.0, None), _alert("Xid", "k", 30.0, 31.0)]}
    _, body = _merged("/api/alerts", "", [Answer("a", _page(a)), Answer("b", _page(b))])
    assert [(x["name"], x["shard"], x["state"]) for x in body["alerts"]] == [
        ("GpuLost", "a", "firing"), ("NodeDown", "b", "firing"), ("Xid", "b", "resolved"),
    ]  # fmt: skip

    def job(name: str, state: str, nodes: list[str], t: float, lost: float) -> dict[str, Any]:
        return {"job": name, "state": state, "nodes": nodes, "time_unix_seconds": t, "gpu_hours_lost": lost}

    ja = {
        "time_unix_seconds": 5.0,
        "states": {},
        "jobs": [job("j", "busy", ["n1"], 9.0, 0.0), job("k", "idle", ["x"], 1.0, 0.0)],
    }
    jb = {"time_unix_seconds": 7.0, "states": {}, "jobs": [job("j", "slowed", ["n1", "n2"], 8.0, 2.0)]}
    _, jobs = _merged("/api/jobs", "", [Answer("a", _page(ja)), Answer("b", _page(jb)), DEAD])
    assert [(j["job"], j["shard"], j["state"]) for j in jobs["jobs"]] == [("j", "b", "slowed"), ("k", "a", "idle")]
    assert jobs["states"] == {"slowed": 1, "idle": 1} and jobs["time_unix_seconds"] == 7.0


def test_node_page_is_the_freshest_and_404_only_when_nobody_holds_it() -> None:
    old = {**_node("n", "down", 100.0), "alerts": [_alert("NodeDown", "n", 90.0, None)]}
    new = {**_node("n", "busy", 300.0), "alerts": [_alert("NodeDown", "n", 90.0, 250.0)]}
    missing = _page({"error": "no such node"}, 404)
    answers = [Answer("a", _page(old)), Answer("b", _page(new)), Answer("c", missing), DEAD]
    status, body = _merged("/api/node/n", "", answers)
    assert (status, body["shard"], body["state"], body["stale_shards"]) == (200, "b", "busy", ["a"])
    assert [(x["shard"], x["state"]) for x in body["alerts"]] == [("a", "firing")]
    status, body = _merged("/api/node/zz", "", [Answer("c", missing), DEAD])
    assert (
        status == 404 and body["error"] == "no such node" and [s["answered"] for s in body["shards"]] == [True, False]
    )
    status, body = _merged("/api/node/zz", "", [DEAD])
    assert status == 502 and body["shards"][0]["shard"] == "c:3"


def test_job_page_cards_filled_from_the_shard_that_holds_the_node() -> None:
    base = {"job": "j", "state": "slowed", "time_unix_seconds": 5.0, "alerts": []}
    a = {**base, "nodes": ["n1", "n2"], "node_details": [
        {"node_id": "n1", "known": True, "state": "starved"}, {"node_id": "n2", "known": False, "state": "unknown"},
    ]}  # fmt: skip
    b = {**base, "nodes": ["n2"], "node_details": [{"node_id": "n2", "known": True, "state": "waiting"}]}
    status, body = _merged("/api/job/j", "", [Answer("b", _page(b)), Answer("a", _page(a))])
    assert status == 200 and body["shard"] == "a"
    assert [(c["node_id"], c["known"], c["state"], c["shard"]) for c in body["node_details"]] == [
        ("n1", True, "starved", "a"), ("n2", True, "waiting", "b"),
    ]  # fmt: skip


def test_job_page_cards_of_nodes_on_shards_that_do_not_judge_the_job() -> None:
    # The owner judges the job over n1 (its own), n2 and n3 (held elsewhere); n2 holds it back.
    owner = {"job": "j", "state": "slowed", "cause": "network", "time_unix_seconds": 5.0, "alerts": [],
             "nodes": ["n1", "n2", "n3"], "node_details": [
                 {"node_id": "n1", "known": True, "straggler": False, "state": "waiting"},
                 {"node_id": "n2", "known": False, "straggler": True, "state": "unknown"},
                 {"node_id": "n3", "known": False, "straggler": False, "state": "unknown"}]}  # fmt: skip
    words = {"network": "eth0 receives 1.2 GB/s", "storage": "", "cpu": ""}
    held = {"error": "no such job", "node_details": [
        {"node_id": n, "known": True, "straggler": None, "state": state, "sentence": state, "highways": words}
        for n, state in (("n2", "starved"), ("n3", "waiting"))
    ]}  # fmt: skip
    answers = [Answer("worker-0", _page(held, 404)), Answer("worker-1", _page(owner)), DEAD]
    status, body = _merged("/api/job/j", "", answers)
    assert status == 200 and body["shard"] == "worker-1"
    cards = {c["node_id"]: c for c in body["node_details"]}
    assert {n: (c["known"], c["state"], c["straggler"], c["shard"]) for n, c in cards.items()} == {
        "n1": (True, "waiting", False, "worker-1"), "n2": (True, "starved", True, "worker-0"),
        "n3": (True, "waiting", False, "worker-0"),
    }  # fmt: skip
    # The straggler's words are those of the job's cause; a node that does not hold it back has none.
    assert cards["n2"]["highway"] == "eth0 receives 1.2 GB/s" and cards["n2"]["sentence"] == "starved"
    assert not {"sentence", "highway", "highways"} & set(cards["n3"])
    # Nobody judges it here: still no such job, with every card held here for a merge above this
    # one (a front's answer to another collector of the fleet).
    other = {"error": "no such job", "node_details": [{**held["node_details"][0], "node_id": "n4"}]}
    status, body = _merged("/api/job/j", "", [Answer("worker-0", _page(held, 404)), Answer("w1", _page(other, 404))])
    assert status == 404 and body["error"] == "no such job"
    assert [(c["node_id"], c["shard"]) for c in body["node_details"]] == [
        ("n2", "worker-0"), ("n3", "worker-0"), ("n4", "w1"),
    ]  # fmt: skip


def test_metrics_text_families_once_series_once() -> None:
    one = (
        "# HELP nodeagent_collector_up Up.\n# TYPE nodeagent_collector_up gauge\nnodeagent_collector_up 1\n"
        "# HELP nodeagent_node_state State.\n# TYPE nodeagent_node_state gauge\n"
        'nodeagent_node_state{node="a",state="busy"} 1\n'
    )
    two = (
        "# HELP nodeagent_node_state State.\n# TYPE nodeagent_node_state gauge\n"
        'nodeagent_node_state{node="b",state="x y} z"} 1\nnodeagent_node_state{node="a",state="busy"} 0\n'
        "# HELP nodeagent_collector_up Up.\n# TYPE nodeagent_collector_up gauge\nnodeagent_collector_up 1\n"
        '# HELP h H.\n# TYPE h histogram\nh_bucket{le="+Inf"} 3\nh_sum 1.5\nh_count 3\n'
    )
    text = merge_metrics_text([one, two])
    assert text.splitlines() == [
        "# HELP nodeagent_collector_up Up.", "# TYPE nodeagent_collector_up gauge", "nodeagent_collector_up 1",
        "# HELP nodeagent_node_state State.", "# TYPE nodeagent_node_state gauge",
        'nodeagent_node_state{node="a",state="busy"} 1', 'nodeagent_node_state{node="b",state="x y} z"} 1',
        "# HELP h H.", "# TYPE h histogram", 'h_bucket{le="+Inf"} 3', "h_sum 1.5", "h_count 3",
    ]  # fmt: skip
    assert series_of('m{a="q\\"}"} 1 123') == 'm{a="q\\"}"}'
    reply = merge_page(
        "/metrics", "", [Answer("a", pb.PageResponse(status=200, content_type="text/plain", body=one.encode())), DEAD]
    )
    assert reply.status == 200 and reply.body.decode() == one


def test_failing_stores_named_by_their_shard_the_longest_first() -> None:
    full = "OperationalError: database or disk is full"
    one = {**_fleet(_node("a1", "busy", 150.0)), "stores_failing": [{"seconds": 12.0, "error": full}]}
    # A front among the collectors: its own merge named its worker.
    worker = {"seconds": 40.0, "error": full, "shard": "worker-1"}
    front = {**_fleet(_node("b1", "busy", 160.0)), "stores_failing": [worker]}
    fine = {**_fleet(_node("c1", "busy", 170.0)), "stores_failing": []}
    older = _fleet(_node("d1", "busy", 180.0))  # a collector from before: no such field
    answers = [Answer("a:1", _page(one)), Answer("b:2", _page(front)), Answer("c:3", _page(fine)),
               Answer("d:4", _page(older)), DEAD]  # fmt: skip
    _, body = _merged("/api/fleet", "state=idle", answers)
    assert body["stores_failing"] == [
        {"seconds": 40.0, "error": full, "shard": "b:2/worker-1"}, {"seconds": 12.0, "error": full, "shard": "a:1"},
    ]  # fmt: skip
    _, healthy = _merged("/api/fleet", "", [Answer("c:3", _page(fine)), Answer("d:4", _page(older))])
    assert healthy["stores_failing"] == []
