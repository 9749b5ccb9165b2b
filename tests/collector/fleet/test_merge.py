"""Merged Query streams: the freshest copy of a node wins, the stale shards are named; alerts,
job verdicts, job totals and history rows by their rules; a shard that did not answer is marked."""

from __future__ import annotations

from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.merge import merge_ledger
from nodeagent.collector.views.fleet_table import node_rows, render_fleet
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.shard_streams import merged

DEAD = ("c:3", "UNAVAILABLE: connection refused")


def test_nodes_freshest_wins_and_the_stale_shard_is_named() -> None:
    a = [
        pb.NodeSummary(node_id="moved", last_seen_unix_seconds=100.0, state="down"),
        pb.NodeSummary(node_id="only-a", last_seen_unix_seconds=50.0),
    ]
    b = [pb.NodeSummary(node_id="moved", last_seen_unix_seconds=200.0, state="busy")]
    for order in ([("a:1", a), ("b:2", b), DEAD], [DEAD, ("b:2", b), ("a:1", a)]):
        nodes, shards = merged("StreamNodes", order)
        by_id = {n.node_id: n for n in nodes}
        assert [n.node_id for n in nodes] == ["moved", "only-a"]
        assert (by_id["moved"].shard, by_id["moved"].state, list(by_id["moved"].stale_shards)) == (
            "b:2",
            "busy",
            ["a:1"],
        )
        assert (by_id["only-a"].shard, list(by_id["only-a"].stale_shards)) == ("a:1", [])
        answered = {s.shard: (s.answered, s.error) for s in shards}
        assert answered == {"a:1": (True, ""), "b:2": (True, ""), "c:3": (False, "UNAVAILABLE: connection refused")}


def test_a_failing_store_travels_with_its_nodes_and_nodes_says_it_once_per_store() -> None:
    full = "OperationalError: database or disk is full"

    def held(*names: str, seconds: float = 0.0, error: str = "") -> list[pb.NodeSummary]:
        return [
            pb.NodeSummary(node_id=n, last_seen_unix_seconds=10.0, store_error=error, store_failing_seconds=seconds)
            for n in names
        ]

    nodes, shards = merged("StreamNodes", [("worker-0", held("w0-a", "w0-b", seconds=42.4, error=full)),
                                           ("worker-1", held("w1-a")), DEAD])  # fmt: skip
    rows = node_rows(pb.ListNodesResponse(nodes=nodes, shards=shards))
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
    alone = render_fleet(node_rows(pb.ListNodesResponse(nodes=held("n1", seconds=5.0, error=full)))).splitlines()
    assert alone[-1].startswith(f"store failing for 5 s: {full} — ")
    plain = render_fleet(node_rows(pb.ListNodesResponse(nodes=held("n1")))).splitlines()
    assert not any(line.startswith("store failing") for line in plain)


def test_alerts_firing_wins_then_newest() -> None:
    resolved = pb.AlertRecord(
        name="GpuLost", node_id="n", key="0", starts_at_unix_seconds=300.0, ends_at_unix_seconds=310.0
    )
    firing = pb.AlertRecord(name="GpuLost", node_id="n", key="0", starts_at_unix_seconds=100.0)
    other_old = pb.AlertRecord(name="NodeDown", node_id="m", starts_at_unix_seconds=10.0, ends_at_unix_seconds=20.0)
    other_new = pb.AlertRecord(name="NodeDown", node_id="m", starts_at_unix_seconds=30.0, ends_at_unix_seconds=40.0)
    alerts, _shards = merged("StreamAlerts", [("a", [resolved, other_old]), ("b", [firing, other_new])])
    got = [(r.name, r.shard, r.starts_at_unix_seconds, r.HasField("ends_at_unix_seconds")) for r in alerts]
    assert got == [("GpuLost", "b", 100.0, False), ("NodeDown", "b", 30.0, True)]


def test_job_verdicts_most_nodes_then_newest_and_totals_summed() -> None:
    small = pb.JobVerdict(job="j", nodes=["n1"], time_unix_seconds=900.0, gpu_seconds_lost=1.0)
    big = pb.JobVerdict(job="j", nodes=["n1", "n2"], time_unix_seconds=800.0, gpu_seconds_lost=5.0)
    k_old = pb.JobVerdict(job="k", nodes=["m"], time_unix_seconds=1.0, gpu_seconds_lost=9.0)
    k_new = pb.JobVerdict(job="k", nodes=["m"], time_unix_seconds=2.0, gpu_seconds_lost=8.0)
    jobs, _shards = merged("StreamJobs", [("a", [small, k_old]), ("b", [big, k_new])])
    assert [(v.job, v.shard, v.gpu_seconds_lost) for v in jobs] == [("j", "b", 5.0), ("k", "b", 8.0)]

    t1 = pb.JobTotal(
        job="j", gpu_hours=1.0, gpu_hours_lost=0.5, nodes=["n1"], first_unix_seconds=100, last_unix_seconds=200
    )
    t1.gpu_hours_lost_by_cause["network"] = 0.5
    t2 = pb.JobTotal(
        job="j", gpu_hours=2.0, gpu_hours_lost=0.25, nodes=["n2", "n1"], first_unix_seconds=50, last_unix_seconds=150
    )
    t2.gpu_hours_lost_by_cause["network"] = 0.125
    t2.gpu_hours_lost_by_cause["cpu"] = 0.125
    totals, shards = merged("StreamJobTotals", [("a", [t1]), ("b", [t2]), DEAD])
    (j,) = totals
    assert (j.gpu_hours, j.gpu_hours_lost, list(j.nodes)) == (3.0, 0.75, ["n1", "n2"])
    assert dict(j.gpu_hours_lost_by_cause) == {"network": 0.625, "cpu": 0.125}
    assert (j.first_unix_seconds, j.last_unix_seconds) == (50, 200)
    assert [s.answered for s in shards] == [True, True, False]


def test_history_rows_of_every_shard_are_kept_in_the_streams_order() -> None:
    def rows(*keys: tuple[float, int]) -> list[pb.HistoryRow]:
        return [pb.HistoryRow(time_unix_seconds=t, gpu=g) for t, g in keys]

    # The node moved at minute 120: both shards hold that minute of GPU 0, and both rows are kept.
    before = rows((0, -1), (0, 0), (60, 0), (120, 0))
    after = rows((180, -1), (120, 0), (120, 1))
    got, _shards = merged("StreamHistory", [("new", after), ("old", before), DEAD], page_bytes=1024)
    keys = [(r.gpu, r.time_unix_seconds) for r in got]
    assert keys == [(-1, 0), (-1, 180), (0, 0), (0, 60), (0, 120), (0, 120), (1, 120)]


def test_ledger_rows_are_summed_by_key_and_every_shard_is_named() -> None:
    one = pb.LedgerResponse(rows=[pb.LedgerRow(key="j", gpu_hours_held=1.0, nodes=["n1"], currency="USD")])
    two = pb.LedgerResponse(rows=[pb.LedgerRow(key="j", gpu_hours_held=2.0, nodes=["n2"], currency="EUR")])
    merged_ledger = merge_ledger([Answer("a", one), Answer("b", two), Answer(*DEAD[:1], None, DEAD[1])])
    (row,) = merged_ledger.rows
    assert (row.gpu_hours_held, list(row.nodes), row.currency) == (3.0, ["n1", "n2"], "EUR+USD")
    assert [(s.shard, s.answered) for s in merged_ledger.shards] == [("a", True), ("b", True), ("c:3", False)]
