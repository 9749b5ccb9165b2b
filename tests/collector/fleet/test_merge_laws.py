"""The merges of shards' answers as laws, over random answers (Hypothesis): the order the shards
answer in does not matter, merging a shard's answer twice changes nothing, and a merge of one
well-formed answer gives it back. Both forms are checked: the Query streams (``stream_merge.py``
by ``merge.py``'s rules) and the fleet page's JSON (``page_merge.py``); both pick each key's
winner by ``merge.pick_winners`` and rank and order by ``winning_copy.py`` and, for alerts, by
the one alert shape (``alerts/alert.py``).

The values are drawn from small sets, so that copies tie on their rank and the tie rule is exercised.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.collector.alerts.alert import Alert, alert_order, fingerprint, plain_alert, record_alert
from nodeagent.collector.fleet.answer_pages import KINDS
from nodeagent.collector.fleet.page_merge import merge_alert_list, merge_fleet, merge_jobs
from nodeagent.collector.states.words import STATE_ORDER
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.shard_streams import merged

SHARDS = ("a:1", "b:2", "c:3")
LAWS = settings(max_examples=60, deadline=None)

times = st.sampled_from([10.0, 20.0, 30.0])
node_ids = st.sampled_from(["n1", "n2", "n3", "n4"])
alert_ids = st.tuples(st.sampled_from(["GpuLost", "NodeDown"]), node_ids, st.sampled_from(["", "0"]))
job_names = st.sampled_from(["j1", "j2", "j3"])


@st.composite
def plain_alerts(draw: st.DrawFn) -> dict[str, Any]:
    name, node_id, key = draw(alert_ids)
    ends = draw(st.one_of(st.none(), times))
    return {
        "name": name, "node_id": node_id, "key": key, "severity": draw(st.sampled_from(["warning", "critical"])),
        "starts_at_unix_seconds": draw(times), "ends_at_unix_seconds": ends,
    }  # fmt: skip


@st.composite
def plain_jobs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "job": draw(job_names),
        "state": draw(st.sampled_from(["slowed", "busy", "idle"])),
        "nodes": sorted(draw(st.sets(node_ids, min_size=1))),
        "time_unix_seconds": draw(times),
        "gpu_hours_lost": draw(st.sampled_from([0.0, 0.5, 1.0])),
    }


@st.composite
def plain_nodes(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "node_id": draw(node_ids),
        "last_seen": draw(times),
        "state": draw(st.sampled_from(STATE_ORDER[:4])),
        "cause": draw(st.sampled_from([None, "network"])),
        "starvation_ratio": draw(st.sampled_from([None, 0.5])),
        "gpu_hours_lost_today": draw(st.sampled_from([0.0, 1.0])),
    }


def unique(items: list[dict[str, Any]], identity: Any) -> list[dict[str, Any]]:
    """One item per identity, as one shard's answer holds."""
    return list({identity(item): item for item in items}.values())


def alert_identity(a: dict[str, Any]) -> tuple[str, str, str]:
    return (a["name"], a["node_id"], a["key"])


def shard_lists(items: st.SearchStrategy[dict[str, Any]], identity: Any) -> st.SearchStrategy[Any]:
    """(shard, its items) for one to three shards."""
    per_shard = st.lists(items, max_size=6).map(lambda xs: unique(xs, identity))
    return st.lists(st.tuples(st.sampled_from(SHARDS), per_shard), min_size=1, max_size=3, unique_by=lambda t: t[0])


def to_record(a: dict[str, Any]) -> pb.AlertRecord:
    record = pb.AlertRecord(
        name=a["name"], node_id=a["node_id"], key=a["key"], severity=a["severity"],
        starts_at_unix_seconds=a["starts_at_unix_seconds"],
    )  # fmt: skip
    if a["ends_at_unix_seconds"] is not None:
        record.ends_at_unix_seconds = a["ends_at_unix_seconds"]
    return record


def to_verdict(j: dict[str, Any]) -> pb.JobVerdict:
    return pb.JobVerdict(
        job=j["job"], state=j["state"], nodes=j["nodes"], time_unix_seconds=j["time_unix_seconds"],
        gpu_seconds_lost=j["gpu_hours_lost"] * 3600,
    )  # fmt: skip


def to_summary(n: dict[str, Any]) -> pb.NodeSummary:
    return pb.NodeSummary(node_id=n["node_id"], last_seen_unix_seconds=n["last_seen"], state=n["state"])


def query_streams(method: str, lists: list[tuple[str, list[dict[str, Any]]]]) -> list[tuple[str, list[Any]]]:
    to_item = {"StreamNodes": to_summary, "StreamAlerts": to_record, "StreamJobs": to_verdict}[method]
    return [(shard, [to_item(i) for i in items]) for shard, items in lists]


def merged_items(method: str, streams: list[tuple[str, list[Any]]]) -> list[Any]:
    items, _shards = merged(method, streams, page_bytes=1024)  # small pages: keys meet across pages
    return items


QUERY_CASES = st.one_of(
    st.tuples(st.just("StreamNodes"), shard_lists(plain_nodes(), lambda n: n["node_id"])),
    st.tuples(st.just("StreamAlerts"), shard_lists(plain_alerts(), alert_identity)),
    st.tuples(st.just("StreamJobs"), shard_lists(plain_jobs(), lambda j: j["job"])),
)


@LAWS
@given(QUERY_CASES, st.randoms(use_true_random=False))
def test_a_query_merge_does_not_depend_on_the_order_shards_answer_in(case: Any, rnd: Any) -> None:
    method, lists = case
    streams = query_streams(method, lists)
    shuffled = list(streams)
    rnd.shuffle(shuffled)
    assert merged_items(method, shuffled) == merged_items(method, streams)


@LAWS
@given(QUERY_CASES)
def test_a_query_merge_is_idempotent(case: Any) -> None:
    """The same answer from a second shard too: the merged items are the same but for the shard
    each names and, for a node, the other copy named stale."""
    method, lists = case
    streams = query_streams(method, lists)
    twice = streams + [(f"{shard}-again", items) for shard, items in streams]

    def plain(items: list[Any]) -> list[Any]:
        for item in items:
            item.shard = item.shard.removesuffix("-again")
            if method == "StreamNodes":
                del item.stale_shards[:]
        return items

    assert plain(merged_items(method, twice)) == plain(merged_items(method, streams))


@LAWS
@given(QUERY_CASES)
def test_a_query_merge_of_one_answer_is_that_answer(case: Any) -> None:
    method, lists = case
    shard, items = query_streams(method, lists[:1])[0]
    expected = sorted(items, key=KINDS[method].key)
    for item in expected:
        item.shard = shard
    assert merged_items(method, [(shard, items)]) == expected


def fleet_bodies(lists: list[tuple[str, list[dict[str, Any]]]]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for shard, nodes in lists:
        states: dict[str, int] = {}
        for n in nodes:
            states[n["state"]] = states.get(n["state"], 0) + 1
        found.append((shard, {"time_unix_seconds": 1.0, "states": states, "causes": {}, "nodes": nodes}))
    return found


PAGE_CASES = st.one_of(
    st.tuples(st.just(merge_fleet), shard_lists(plain_nodes(), lambda n: n["node_id"]).map(fleet_bodies)),
    st.tuples(
        st.just(merge_alert_list),
        shard_lists(plain_alerts(), alert_identity).map(lambda ls: [(s, {"alerts": xs}) for s, xs in ls]),
    ),
    st.tuples(
        st.just(merge_jobs),
        shard_lists(plain_jobs(), lambda j: j["job"]).map(
            lambda ls: [(s, {"time_unix_seconds": 1.0, "jobs": xs}) for s, xs in ls]
        ),
    ),
)


@LAWS
@given(PAGE_CASES, st.randoms(use_true_random=False))
def test_a_page_merge_does_not_depend_on_the_order_shards_answer_in(case: Any, rnd: Any) -> None:
    merger, found = case
    shuffled = list(found)
    rnd.shuffle(shuffled)
    # The fleet merge tags the answers it is given in place: each call gets its own copy.
    assert merger(copy.deepcopy(shuffled), {}) == merger(copy.deepcopy(found), {})


@LAWS
@given(PAGE_CASES)
def test_the_page_merges_of_alerts_and_jobs_are_idempotent(case: Any) -> None:
    merger, found = case
    if merger is merge_fleet:  # its state counts are summed: a shard counted twice counts twice
        return
    assert merger(copy.deepcopy(found + found), {}) == merger(copy.deepcopy(found), {})


@LAWS
@given(shard_lists(plain_alerts(), alert_identity))
def test_every_form_of_an_alert_ranks_and_orders_alike(lists: Any) -> None:
    """The Query answer's record and the page's JSON read back as the alert book's Alert: the page
    and the ``alerts`` command list one set of alerts in one order."""
    for _shard, alerts in lists:
        for a in alerts:
            book = Alert(
                name=a["name"], node_id=a["node_id"], key=a["key"], severity=a["severity"], labels={},
                annotations={}, starts_at=a["starts_at_unix_seconds"], ends_at=a["ends_at_unix_seconds"],
                fingerprint=fingerprint(a["name"], a["node_id"], a["key"]),
            )  # fmt: skip
            assert record_alert(to_record(a)) == plain_alert(a) == plain_alert(book.to_plain()) == book
            assert alert_order(to_record(a)) == book.order
