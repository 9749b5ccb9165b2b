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


def test_the_ledger_page_and_csv_carry_worth_fixing_and_the_page_sorts_by_it() -> None:
    from nodeagent.collector.cli.ledger import ledger_csv
    from nodeagent.collector.views.ledger_html import render_ledger as render_page
    from nodeagent.collector.views.ledger_page import LedgerAsk, sorted_rows

    rows = [_row("a", 5.0), _row("b", 1.0, 64.9, 71.45), _row("c", 2.0, 100.0, 20.0)]
    ask = LedgerAsk(by="job", sort="worth", since="30d", start=0.0, end=3600.0, job="")
    ordered = sorted_rows(rows, "worth")
    assert [r.key for r in ordered] == ["b", "c", "a"]  # by money a day where priced
    page = render_page(ask, ordered, shards=[]).decode()
    assert "<th>worth fixing a day</th>" in page and "71.45 USD (64.9 GPU-h)" in page
    assert page.index("data-key='b'") < page.index("data-key='c'") < page.index("data-key='a'")
    assert "sorted by" in page and ">worth fixing<" in page
    lines = ledger_csv([ledger_plain(r, "job") for r in rows], "job").splitlines()
    header = lines[0].split(",")
    assert header[-2:] == ["worth_gpu_hours_per_day", "worth_money_per_day"]
    assert lines[1].split(",")[-2:] == ["", ""] and lines[2].split(",")[-2:] == ["64.9000", "71.45"]
    # Without any row worth fixing (the history alone), the page has no such column.
    assert "worth fixing a day" not in render_page(ask, [_row("a", 5.0)], shards=[]).decode()
