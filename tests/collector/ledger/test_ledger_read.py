"""``Query.Ledger``'s read: a job's rows summed over its nodes with each node's price, a GPU shared
by two jobs halved between them, the hours waited put on the nodes waited on, the fleet one row,
and minutes stored before the split left out."""

from __future__ import annotations

import functools
import math
import sqlite3
from pathlib import Path

import pytest

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import NODE_ROW, MinuteRow
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import ledger_answer
from nodeagent.collector.store.database import Store
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.collector.store.reader import ReadContext
from nodeagent.v1 import nodeagent_pb2 as pb

PRICES = Prices("EUR", 2.0, nodes=(("n3", 4.0),))


def _rows(
    node_id: str, gpu: int, jobs: tuple[str, ...], minute: int, waiting_on: str = "", **seconds: float
) -> MinuteRow:
    parts = split.empty()
    for name, value in seconds.items():
        parts[split.INDEX[name]] = value
    return MinuteRow(
        node_id, gpu, minute, samples=1, jobs=jobs, held_seconds=sum(parts), split=parts, waiting_on=waiting_on
    )


def _ledger(
    tmp_path: Path, by: str, rows: list[MinuteRow], since: float = 0.0, until: float = 0.0,
    compact: tuple[tuple[str, int], ...] = (), owners: tuple[tuple[str, str, str, str, int], ...] = (),
    prices: Prices = PRICES,
) -> pb.LedgerResponse:  # fmt: skip
    """The ledger after writing ``rows`` (their nodes known) and ``owners``, and summing the ``compact`` hours."""
    store = Store(tmp_path / "c.db")
    try:
        nodes = [NodeRow(node_id=n, first_seen=1.0, last_seen=2.0) for n in sorted({r.node_id for r in rows})]
        batch = HistoryBatch(minutes=rows, compact=list(compact), owners=list(owners))
        store.write(nodes, before_commit=functools.partial(store.history.write, batch))
    finally:
        store.close()
    conn = sqlite3.connect(tmp_path / "c.db")
    try:
        request = pb.LedgerRequest(since_unix_seconds=since, until_unix_seconds=until, by=by)
        return ledger_answer(ReadContext(conn), request, prices, 1000, 1 << 20)
    finally:
        conn.close()


def test_a_job_over_two_nodes_its_straggler_and_a_shared_gpu(tmp_path: Path) -> None:
    rows = [
        _rows("n1", 0, ("j",), 60, waiting_on="n3", computing=30.0, waiting=30.0),
        _rows("n1", 1, ("j", "k"), 60, computing=40.0, idle=20.0),
        _rows("n3", 0, ("j",), 60, computing=40.0, network=20.0),
        _rows("n3", 0, ("j",), 120, computing=60.0),
        _rows("n1", NODE_ROW, ("j", "k"), 60, computing=70.0, waiting=30.0, idle=20.0),
        _rows("n3", NODE_ROW, ("j",), 60, computing=40.0, network=20.0),
        _rows("n3", NODE_ROW, ("j",), 120, computing=60.0),
    ]
    jobs = {row.key: row for row in _ledger(tmp_path, "job", rows).rows}
    j = jobs["j"]
    assert j.gpu_hours_held * 3600 == pytest.approx(60 + 30 + 60 + 60)
    assert j.gpu_hours_computing * 3600 == pytest.approx(30 + 20 + 40 + 60)
    assert {k: v * 3600 for k, v in j.gpu_hours_lost.items()} == pytest.approx(
        {"waiting": 30, "idle": 10, "network": 20}
    )
    assert j.cost == pytest.approx((90 * 2.0 + 120 * 4.0) / 3600)  # each node at its own price
    assert j.cost_lost == pytest.approx((40 * 2.0 + 20 * 4.0) / 3600)
    assert [(s.node_id, s.gpu_hours_waited * 3600) for s in j.stragglers] == [("n3", pytest.approx(30.0))]
    assert list(j.nodes) == ["n1", "n3"] and j.currency == "EUR"
    assert jobs["k"].gpu_hours_held * 3600 == pytest.approx(30.0)
    [fleet] = _ledger(tmp_path, "fleet", []).rows
    assert fleet.key == "fleet" and fleet.gpu_hours_held * 3600 == pytest.approx(120 + 60 + 60)
    nodes = {row.key: row for row in _ledger(tmp_path, "node", [], since=120).rows}
    assert set(nodes) == {"n3"} and nodes["n3"].gpu_hours_computing * 3600 == pytest.approx(60.0)


def test_by_account_and_namespace_each_jobs_hours_go_to_whom_it_is_billed(tmp_path: Path) -> None:
    rows = [
        _rows("n1", 0, ("j",), 60, waiting_on="n3", computing=30.0, waiting=30.0),
        _rows("n1", 1, ("j", "k"), 60, computing=40.0, idle=20.0),  # shared: half to each job's account
        _rows("n3", 0, ("j",), 60, computing=40.0, network=20.0),
        _rows("n3", 1, ("pod-uid-1",), 60, computing=60.0),
        _rows("n3", 2, ("lone",), 60, computing=60.0),  # a job with no account and no namespace
    ]
    owners = (
        ("n1", "j", "ml", "", 60), ("n3", "j", "", "", 60),  # a node that did not see it keeps the other's
        ("n1", "k", "vision", "", 60), ("n3", "pod-uid-1", "", "team-a", 60),
    )  # fmt: skip
    accounts = {row.key: row for row in _ledger(tmp_path, "account", rows, owners=owners).rows}
    assert set(accounts) == {"ml", "vision", ""}
    assert accounts["ml"].gpu_hours_held * 3600 == pytest.approx(60 + 30 + 60)
    assert list(accounts["ml"].jobs) == ["j"] and list(accounts["ml"].nodes) == ["n1", "n3"]
    assert [(s.node_id, s.gpu_hours_waited * 3600) for s in accounts["ml"].stragglers] == [("n3", pytest.approx(30.0))]
    assert accounts["vision"].gpu_hours_held * 3600 == pytest.approx(30.0)
    assert list(accounts[""].jobs) == ["lone", "pod-uid-1"]
    total = sum(r.gpu_hours_held for r in accounts.values())
    [fleet] = _ledger(tmp_path, "fleet", []).rows
    assert total == pytest.approx(fleet.gpu_hours_held)  # every held hour in one row, whoever pays
    namespaces = {row.key: row for row in _ledger(tmp_path, "namespace", []).rows}
    assert namespaces["team-a"].gpu_hours_held * 3600 == pytest.approx(60.0)
    assert list(namespaces["team-a"].jobs) == ["pod-uid-1"]
    jobs = {row.key: row for row in _ledger(tmp_path, "job", []).rows}
    assert (jobs["j"].account, jobs["j"].namespace) == ("ml", "")
    assert (jobs["pod-uid-1"].account, jobs["pod-uid-1"].namespace) == ("", "team-a")
    assert (jobs["lone"].account, jobs["lone"].namespace) == ("", "")


def test_a_job_key_with_a_comma_is_one_job_billed_to_its_account(tmp_path: Path) -> None:
    """Issue 47: ``torch/run,x`` was stored comma-joined and read back as two jobs, ``torch/run``
    and ``x``, neither with the account, whose hours went to the no-account row."""
    rows = [
        _rows("n1", 0, ("torch/run,x",), 60, computing=60.0),
        _rows("n1", 1, ("torch/run,x", "a b"), 60, computing=60.0),  # shared: half to each
        _rows("n1", 0, ("torch/run,x",), 120, computing=60.0),
    ]
    owners = (("n1", "torch/run,x", "acme", "", 60),)
    jobs = {row.key: row for row in _ledger(tmp_path, "job", rows, owners=owners, compact=(("n1", 0),)).rows}
    assert set(jobs) == {"torch/run,x", "a b"}
    assert jobs["torch/run,x"].gpu_hours_held * 3600 == pytest.approx(150.0)
    assert jobs["torch/run,x"].account == "acme"
    accounts = {row.key: row for row in _ledger(tmp_path, "account", []).rows}
    assert accounts["acme"].gpu_hours_held * 3600 == pytest.approx(150.0)
    assert list(accounts["acme"].jobs) == ["torch/run,x"] and list(accounts[""].jobs) == ["a b"]


def test_a_job_list_stored_comma_joined_before_reads_as_it_was_written(tmp_path: Path) -> None:
    """Rows of an older collector name their jobs comma-joined: each still counts to its jobs."""
    rows = [_rows("n1", 0, ("j", "k"), 60, computing=60.0)]
    _ledger(tmp_path, "job", rows)
    conn = sqlite3.connect(tmp_path / "c.db")
    with conn:
        conn.execute("UPDATE history_minutes SET jobs='j,k'")
    conn.close()
    jobs = {row.key: row.gpu_hours_held * 3600 for row in _ledger(tmp_path, "job", []).rows}
    assert jobs == {"j": pytest.approx(30.0), "k": pytest.approx(30.0)}


def test_minutes_stored_before_the_split_are_left_out(tmp_path: Path) -> None:
    old = MinuteRow("n1", 0, 60, samples=1, jobs=("j",), held_seconds=60.0)
    new = _rows("n1", 0, ("j",), 120, computing=60.0)
    [row] = _ledger(tmp_path, "node", [old, new]).rows
    assert row.gpu_hours_held * 3600 == pytest.approx(60.0)


def test_summed_hours_and_minutes_give_the_minutes_answer(tmp_path: Path) -> None:
    """Three hours of a node's minutes, the first two summed into hours: any span, ragged or
    whole hours, reads what the minutes alone say, each minute once."""
    hour = 1_800_000_000 // 3600 * 3600
    rows = [
        _rows("n1", 0, ("j",), hour + m * 60, computing=50.0, network=10.0 if m % 2 else 0.0) for m in range(3 * 60)
    ]
    compact = (("n1", hour), ("n1", hour + 3600))
    spans = [
        (0.0, 0.0), (hour + 600, 0.0), (hour + 600, hour + 7800), (hour + 3600, hour + 7200), (hour + 60, hour + 120),
    ]  # fmt: skip
    for index, (since, until) in enumerate(spans):
        run = tmp_path / str(index)
        run.mkdir()
        summed = {r.key: r for r in _ledger(run, "node", rows, since, until, compact).rows}
        end = until or math.inf
        expected = [r for r in rows if since <= r.minute < end]
        assert summed["n1"].gpu_hours_held * 3600 == pytest.approx(sum(r.held_seconds or 0.0 for r in expected))
        network = sum(r.split[split.INDEX["network"]] for r in expected if r.split is not None)
        assert summed["n1"].gpu_hours_lost["network"] * 3600 == pytest.approx(network)


def test_an_owner_goes_with_the_last_hour_that_counts_its_job(tmp_path: Path) -> None:
    """Pruned by the retention as the summed hours are: not while an hour that holds the job's
    minutes is still read, so no hour of it falls to the row of no owner."""
    hour = 1_800_000_000 // 3600 * 3600
    store = Store(tmp_path / "c.db")
    try:
        batch = HistoryBatch(owners=[("n1", "j", "ml", "", hour + 1800)])
        store.write((), before_commit=functools.partial(store.history.write, batch))
        owner = store.history.ledger.owners()
        assert owner("j") == ("ml", "") and owner("other") == ("", "")
        for before, kept in ((hour + 3599, True), (hour + 3600, False)):
            store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(sweep=(0.0, before))))
            assert (store.history.ledger.owners()("j") == ("ml", "")) is kept
    finally:
        store.close()


def test_without_prices_a_row_has_no_currency_rather_than_a_price_of_zero(tmp_path: Path) -> None:
    """Every money cell read 0.00 and nothing said why: the row says it was not priced."""
    rows = [_rows("n1", 0, ("j",), 60, computing=30.0, network=30.0)]
    (unpriced,) = _ledger(tmp_path, "job", rows, prices=Prices()).rows
    assert (unpriced.currency, unpriced.cost, unpriced.cost_lost) == ("", 0.0, 0.0)
    assert unpriced.gpu_hours_held * 3600 == pytest.approx(60.0)  # the hours are all there
    assert not Prices().configured and Prices(default_per_gpu_hour=0.5).configured
    assert Prices(gpu_models=(("NVIDIA H100*", 3.5),)).configured
