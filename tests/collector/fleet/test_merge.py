"""Merged Query answers: the freshest copy of a node wins, the stale shards are named; alerts,
job verdicts, job totals and history rows by their rules; a shard that did not answer is marked."""

from __future__ import annotations

from nodeagent.collector.fleet.fanout import Answer, StreamAnswer
from nodeagent.collector.fleet.merge import merge
from nodeagent.collector.views.fleet_table import node_rows, render_fleet
from nodeagent.v1 import nodeagent_pb2 as pb

DEAD = Answer("c:3", None, "UNAVAILABLE: connection refused")


def test_nodes_freshest_wins_and_the_stale_shard_is_named() -> None:
    a = pb.ListNodesResponse(nodes=[
        pb.NodeSummary(node_id="moved", last_seen_unix_seconds=100.0, state="down"),
        pb.NodeSummary(node_id="only-a", last_seen_unix_seconds=50.0),
    ])  # fmt: skip
    b = pb.ListNodesResponse(nodes=[pb.NodeSummary(node_id="moved", last_seen_unix_seconds=200.0, state="busy")])
    for order in ([Answer("a:1", a), Answer("b:2", b), DEAD], [DEAD, Answer("b:2", b), Answer("a:1", a)]):
        merged = merge("ListNodes", order)
        assert isinstance(merged, pb.ListNodesResponse)
        by_id = {n.node_id: n for n in merged.nodes}
        assert [n.node_id for n in merged.nodes] == ["moved", "only-a"]
        assert (by_id["moved"].shard, by_id["moved"].state, list(by_id["moved"].stale_shards)) == (
            "b:2",
            "busy",
            ["a:1"],
        )
        assert (by_id["only-a"].shard, list(by_id["only-a"].stale_shards)) == ("a:1", [])
        shards = {s.shard: (s.answered, s.error) for s in merged.shards}
        assert shards == {"a:1": (True, ""), "b:2": (True, ""), "c:3": (False, "UNAVAILABLE: connection refused")}


def test_a_failing_store_travels_with_its_nodes_and_nodes_says_it_once_per_store() -> None:
    full = "OperationalError: database or disk is full"

    def held(*names: str, seconds: float = 0.0, error: str = "") -> pb.ListNodesResponse:
        return pb.ListNodesResponse(nodes=[
            pb.NodeSummary(node_id=n, last_seen_unix_seconds=10.0, store_error=error, store_failing_seconds=seconds)
            for n in names
        ])  # fmt: skip

    failing = held("w0-a", "w0-b", seconds=42.4, error=full)
    answers = [Answer("worker-0", failing), Answer("worker-1", held("w1-a")), DEAD]
    rows = node_rows(merge("ListNodes", answers))  # type: ignore[arg-type]
    assert {r["node_id"]: r["store_failing"] for r in rows} == {
        "w0-a": {"seconds": 42.4, "error": full}, "w0-b": {"seconds": 42.4, "error": full}, "w1-a": None,
    }  # fmt: skip
    lines = render_fleet(rows).splitlines()
    assert lines[-1] == (
        f"store failing on worker-0 for 42 s: {full} — its nodes' reports are held by their agents until it "
        "writes (their figures are its last commit's)"
    )
    assert sum(line.startswith("store failing") for line in lines) == 1
    # One collector of its own (no merge, no shard): the line names no shard.
    alone = render_fleet(node_rows(held("n1", seconds=5.0, error=full))).splitlines()
    assert alone[-1].startswith(f"store failing for 5 s: {full} — ")
    assert not any(line.startswith("store failing") for line in render_fleet(node_rows(held("n1"))).splitlines())


def test_alerts_firing_wins_then_newest() -> None:
    resolved = pb.AlertRecord(
        name="GpuLost", node_id="n", key="0", starts_at_unix_seconds=300.0, ends_at_unix_seconds=310.0
    )
    firing = pb.AlertRecord(name="GpuLost", node_id="n", key="0", starts_at_unix_seconds=100.0)
    other_old = pb.AlertRecord(name="NodeDown", node_id="m", starts_at_unix_seconds=10.0, ends_at_unix_seconds=20.0)
    other_new = pb.AlertRecord(name="NodeDown", node_id="m", starts_at_unix_seconds=30.0, ends_at_unix_seconds=40.0)
    merged = merge("ListAlerts", [
        Answer("a", pb.ListAlertsResponse(alerts=[resolved, other_old])),
        Answer("b", pb.ListAlertsResponse(alerts=[firing, other_new])),
    ])  # fmt: skip
    assert isinstance(merged, pb.ListAlertsResponse)
    got = [(r.name, r.shard, r.starts_at_unix_seconds, r.HasField("ends_at_unix_seconds")) for r in merged.alerts]
    assert got == [("GpuLost", "b", 100.0, False), ("NodeDown", "b", 30.0, True)]


def test_job_verdicts_most_nodes_then_newest_and_totals_summed() -> None:
    small = pb.JobVerdict(job="j", nodes=["n1"], time_unix_seconds=900.0, gpu_seconds_lost=1.0)
    big = pb.JobVerdict(job="j", nodes=["n1", "n2"], time_unix_seconds=800.0, gpu_seconds_lost=5.0)
    k_old = pb.JobVerdict(job="k", nodes=["m"], time_unix_seconds=1.0, gpu_seconds_lost=9.0)
    k_new = pb.JobVerdict(job="k", nodes=["m"], time_unix_seconds=2.0, gpu_seconds_lost=8.0)
    merged = merge("ListJobs", [
        Answer("a", pb.ListJobsResponse(jobs=[small, k_old])), Answer("b", pb.ListJobsResponse(jobs=[big, k_new])),
    ])  # fmt: skip
    assert isinstance(merged, pb.ListJobsResponse)
    assert [(v.job, v.shard, v.gpu_seconds_lost) for v in merged.jobs] == [("k", "b", 8.0), ("j", "b", 5.0)]

    t1 = pb.JobTotal(
        job="j", gpu_hours=1.0, gpu_hours_lost=0.5, nodes=["n1"], first_unix_seconds=100, last_unix_seconds=200
    )
    t1.gpu_hours_lost_by_cause["network"] = 0.5
    t2 = pb.JobTotal(
        job="j", gpu_hours=2.0, gpu_hours_lost=0.25, nodes=["n2", "n1"], first_unix_seconds=50, last_unix_seconds=150
    )
    t2.gpu_hours_lost_by_cause["network"] = 0.125
    t2.gpu_hours_lost_by_cause["cpu"] = 0.125
    totals = merge("Jobs", [Answer("a", pb.JobsResponse(jobs=[t1])), Answer("b", pb.JobsResponse(jobs=[t2])), DEAD])
    assert isinstance(totals, pb.JobsResponse)
    (j,) = totals.jobs
    assert (j.gpu_hours, j.gpu_hours_lost, list(j.nodes)) == (3.0, 0.75, ["n1", "n2"])
    assert dict(j.gpu_hours_lost_by_cause) == {"network": 0.625, "cpu": 0.125}
    assert (j.first_unix_seconds, j.last_unix_seconds) == (50, 200)
    assert [s.answered for s in totals.shards] == [True, True, False]


def test_history_rows_concatenated_and_sorted_from_pages() -> None:
    def page(*rows: tuple[float, int]) -> pb.HistoryResponse:
        return pb.HistoryResponse(rows=[pb.HistoryRow(time_unix_seconds=t, gpu=g) for t, g in rows])

    before = StreamAnswer("old", page((120, 0)), "", [page((0, -1), (0, 0)), page((60, 0), (120, 0))])
    after = Answer("new", page((180, -1), (120, 1)))
    merged = merge("StreamHistory", [after, before, DEAD])
    assert isinstance(merged, pb.HistoryResponse)
    rows = [(r.time_unix_seconds, r.gpu) for r in merged.rows]
    assert rows == [(0, -1), (0, 0), (60, 0), (120, 0), (120, 1), (180, -1)]
