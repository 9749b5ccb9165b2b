"""The ledger's "worth fixing": a row's live prediction as JSON and a column, the rows sortable by
it, and summed across the shards that answer (only the one that judges a job or holds a node has
it)."""

from __future__ import annotations

from nodeagent.collector.cli.ledger import _worth_order, render_ledger
from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.merge import merge_ledger
from nodeagent.collector.views.ledger_page import ledger_plain
from nodeagent.v1 import nodeagent_pb2 as pb


def _row(key: str, lost: float, worth: float | None = None, money: float | None = None) -> pb.LedgerRow:
    row = pb.LedgerRow(key=key, gpu_hours_held=10.0, gpu_hours_computing=10.0 - lost, cost=20.0, cost_lost=2 * lost,
                       currency="USD")  # fmt: skip
    row.gpu_hours_lost["network"] = lost
    if worth is not None:
        row.worth_gpu_hours_per_day = worth
    if money is not None:
        row.worth_money_per_day = money
    return row


def test_worth_fixing_is_a_column_and_an_order() -> None:
    rows = [ledger_plain(r, "job") for r in (_row("a", 5.0), _row("b", 1.0, 64.9, 71.45), _row("c", 2.0, 100.0, 20.0))]
    assert rows[0]["worth_fixing"] is None
    assert rows[1]["worth_fixing"] == {"gpu_hours_per_day": 64.9, "money_per_day": 71.45}
    table = render_ledger(rows, "job", 0.0, 3600.0)
    assert "WORTH FIXING" in table.splitlines()[1] and "71.45/day" in table and "WORTH FIXING: what lifting" in table
    assert [r["job"] for r in sorted(rows, key=_worth_order, reverse=True)] == ["b", "c", "a"]
    assert "worth_fixing" not in ledger_plain(_row("fleet", 1.0), "fleet")


def test_shards_sum_the_one_live_prediction() -> None:
    one = pb.LedgerResponse(rows=[_row("j", 1.0, 64.9, 71.45)])
    other = pb.LedgerResponse(rows=[_row("j", 1.0)])
    merged = merge_ledger([Answer("a", one), Answer("b", other)])
    (row,) = merged.rows
    assert (row.worth_gpu_hours_per_day, row.worth_money_per_day) == (64.9, 71.45)
    neither = merge_ledger([Answer("a", other), Answer("b", other)])
    assert not neither.rows[0].HasField("worth_gpu_hours_per_day")
