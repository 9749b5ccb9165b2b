"""What a name does to the command line's outputs: every table escapes its control characters
(C0, C1: ESC, CR, LF cannot clear a screen or forge a line), whatever reaches it (an older shard,
rows stored before names were checked); every CSV neutralises a cell that would start a formula
(OWASP), and a number stays a number."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.collector.cli.history import RowPrinter
from nodeagent.collector.cli.jobs import job_rows, render_jobs
from nodeagent.collector.cli.ledger import ledger_csv, render_ledger
from nodeagent.collector.views.fleet_table import render_fleet
from nodeagent.collector.views.ledger_page import ledger_plain
from nodeagent.core.program.safe_text import csv_value
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.jobs import job_verdict

ANY_TEXT = st.text(min_size=1, max_size=30)  # every code point, controls included
ATTACK = "run\x1b[2J\x1b]0;owned\x07\rFAKE\nrow\x9b31m\x85"


def _ledger_row(key: str, account: str = "", namespace: str = "", jobs: tuple[str, ...] = ()) -> pb.LedgerRow:
    row = pb.LedgerRow(
        key=key, gpu_hours_held=2.0, gpu_hours_computing=1.5, cost=4.0, cost_lost=1.0, currency="USD",
        first_unix_seconds=1_800_000_000.0, last_unix_seconds=1_800_003_600.0, account=account,
        namespace=namespace, nodes=["n1"], jobs=list(jobs),
    )  # fmt: skip
    row.gpu_hours_lost["network"] = 0.5
    row.stragglers.add(node_id="n2", gpu_hours_waited=0.25)
    return row


def _no_control(text: str, lines: int) -> None:
    assert all(line.isprintable() for line in text.splitlines()), repr(text)
    assert len(text.splitlines()) == lines, text


@settings(max_examples=50, deadline=None)
@given(name=ANY_TEXT)
def test_every_table_escapes_control_characters(name: str) -> None:
    for by in ("job", "account", "namespace"):
        rows = [ledger_plain(_ledger_row(name, name, name, jobs=(name, "b")), by)]
        _no_control(render_ledger(rows, by, 1_800_000_000.0, 1_800_003_600.0), 3)
    history = pb.JobsResponse(jobs=[pb.JobTotal(job=name, gpu_hours=1.0, nodes=["n1"])])
    table = render_jobs(job_rows([job_verdict(name)], history), 86400.0)
    _no_control(table, 3)
    _no_control(render_fleet([_fleet_row(name)]), 2)


def test_a_job_name_s_escapes_show_as_text_on_its_own_line() -> None:
    """Issue 47: ``ledger --by job|account`` and ``jobs`` printed ESC, CR and LF raw."""
    table = render_ledger([ledger_plain(_ledger_row(ATTACK, jobs=(ATTACK,)), "account")], "account", 1.0, 2.0)
    assert "\x1b" not in table and "\r" not in table and "\x9b" not in table and len(table.splitlines()) == 3
    assert "run\\x1b[2J" in table
    jobs = render_jobs(job_rows([job_verdict(ATTACK)], pb.JobsResponse()), 86400.0)
    assert "\x1b" not in jobs and len(jobs.splitlines()) == 3


def test_the_history_table_escapes_what_a_shard_says() -> None:
    out = _printed(RowPrinter("n1", "table"), [{**_history_row(), "state": ATTACK, "cause": ATTACK, "shard": "b:1"}])
    _no_control(out, 2)


@pytest.mark.parametrize(
    ("by", "name_cells"),
    [("job", ("job", "account", "namespace")), ("account", ("account",)), ("namespace", ("namespace",))],
)
def test_ledger_csv_neutralises_formula_cells_and_keeps_numbers(by: str, name_cells: tuple[str, ...]) -> None:
    """Issue 47: a key ``=1+1`` and an account ``+cmd|x`` started formulas in ``ledger --csv``."""
    names = {"job": "=1+1", "account": "+cmd|x", "namespace": "@SUM(A1)"}
    row = _ledger_row(names[by], names["account"], names["namespace"], jobs=("-2+3", "a,b;c"))
    row.gpu_hours_lost["idle"] = 0.0
    [line] = list(csv.DictReader(io.StringIO(ledger_csv([ledger_plain(row, by)], by))))
    for cell in name_cells:
        assert line[cell] == "'" + names[cell if cell != "job" else "job"], line
        assert csv_value(line[cell]) == names[cell]
    assert float(line["gpu_hours_held"]) == 2.0 and line["gpu_hours_lost_idle"] == "0.0000"
    if by != "job":
        assert json.loads(line["jobs"]) == ["-2+3", "a,b;c"]  # each job whole, in a cell no formula starts


def test_a_negative_number_stays_a_number_and_a_quote_reads_back() -> None:
    from nodeagent.core.program.safe_text import csv_cell

    assert csv_cell(-0.25) == -0.25 and csv_cell("-0.2500") == "-0.2500" and csv_cell("-3e-05") == "-3e-05"
    assert csv_cell("-1+2") == "'-1+2" and csv_cell("\tx") == "'\tx" and csv_cell("\rx") == "'\rx"
    assert csv_cell("'=x") == "''=x" and csv_value("''=x") == "'=x"
    assert csv_cell("ok") == "ok" and csv_cell("") == ""


def test_history_csv_neutralises_its_text_cells_and_keeps_each_job_whole() -> None:
    row = {**_history_row(), "state": '=HYPERLINK("x")', "cause": "@cmd", "jobs": ["torch/run,x", "a b"]}
    out = _printed(RowPrinter("n1", "csv"), [row])
    [line] = list(csv.DictReader(io.StringIO(out)))
    assert line["state"] == '\'=HYPERLINK("x")' and line["cause"] == "'@cmd"
    assert json.loads(line["jobs"]) == ["torch/run,x", "a b"]


def _printed(printer: RowPrinter, rows: list[dict[str, Any]]) -> str:
    runner = CliRunner()
    with runner.isolation() as (out, _err, *_):
        printer.rows_of(rows)
        return out.getvalue().decode()


def _history_row() -> dict[str, Any]:
    return {
        "time_unix_seconds": 1_800_000_000.0, "gpu": 0, "samples": 60, "utilization_mean": 0.5,
        "utilization_min": 0.1, "starvation_ratio": 0.3, "gpu_seconds_lost": 12.0, "state": "starved",
        "cause": "network", "jobs": ["j"],
    }  # fmt: skip


def _fleet_row(name: str) -> dict[str, Any]:
    return {
        "node_id": "n1", "connected": True, "gpu_count": 8, "state": "starved", "cause": name,
        "starvation_ratio": 0.3, "gpu_hours_lost_today": 1.0, "needed_ingest_bytes_per_second": None,
        "reports_total": 10, "last_seen": 1_800_000_000.0, "waiting_on": [],
    }  # fmt: skip
