"""A wait share that cannot be measured (``wait_ratio`` null) reads ``unknown`` in the ``jobs``
and ``nodes`` tables and the job's sentence, with its reason where there is room; never a number,
and never ``unknown`` for a job with no wait share to say (idle, only in the history)."""

from __future__ import annotations

from typing import Any

from nodeagent.collector.cli.jobs import job_rows, render_jobs, wait_words
from nodeagent.collector.history.split import WAIT_UNKNOWN
from nodeagent.collector.states.words import job_sentence
from nodeagent.collector.views.fleet_table import render_fleet
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.jobs import job_verdict

REASON = "power is the last second's mean: it cannot separate 0.5 s phases"


def _wait_cell(table: str, job: str) -> str:
    head, *lines = table.splitlines()
    start = head.index("WAIT %") - 1  # right-aligned in its 7 characters
    line = next(line for line in lines if line.startswith(job))
    return line[start : start + 7].strip()


def test_the_jobs_table_says_unknown_where_the_wait_share_cannot_be_measured() -> None:
    unknown = job_verdict("torch/a100", wait_ratio=None, evidence={WAIT_UNKNOWN: REASON})
    measured = job_verdict("torch/h100", wait_ratio=0.38)
    slowed_without_reason = job_verdict("torch/l40s", wait_ratio=None, evidence={})
    idle = job_verdict("torch/idle", state="idle", wait_ratio=None, straggler_nodes=(), cause=None, evidence={})
    history = pb.JobsResponse(jobs=[pb.JobTotal(job="old/run", gpu_hours=1.0, nodes=["n1"])])
    rows = job_rows([unknown, measured, slowed_without_reason, idle], history)
    table = render_jobs(rows, 86400.0)
    assert _wait_cell(table, "torch/a100") == "unknown"
    assert _wait_cell(table, "torch/h100") == "38%"
    assert _wait_cell(table, "torch/l40s") == "unknown"
    assert _wait_cell(table, "torch/idle") == "-" and _wait_cell(table, "old/run") == "-"
    # The reason where there is room: the evidence column, and all of it in JSON.
    line = next(line for line in table.splitlines() if line.startswith("torch/a100"))
    assert "wait_unknown_reason=power" in line
    row = next(r for r in rows if r["job"] == "torch/a100")
    assert row["wait_ratio"] is None and row["evidence"][WAIT_UNKNOWN] == REASON
    assert wait_words(row) == "unknown"


def test_a_slowed_jobs_sentence_says_its_share_is_unknown_never_a_number() -> None:
    plain = job_verdict(wait_ratio=None, evidence={WAIT_UNKNOWN: REASON}).to_plain()
    sentence = job_sentence(plain)
    assert "an unknown share of their time for n2" in sentence and "%" not in sentence
    assert "53% of their time" in job_sentence(job_verdict().to_plain())


def _node(node_id: str, evidence: dict[str, str]) -> dict[str, Any]:
    return {
        "node_id": node_id, "connected": True, "gpu_count": 8, "state": "waiting", "cause": None,
        "starvation_ratio": None, "gpu_hours_lost_today": 1.0, "needed_ingest_bytes_per_second": None,
        "reports_total": 10, "last_seen": 1_800_000_000.0, "waiting_on": ["n2"], "evidence": evidence,
    }  # fmt: skip


def test_the_nodes_table_names_a_node_whose_wait_share_is_unknown_with_its_reason() -> None:
    table = render_fleet([_node("n1", {WAIT_UNKNOWN: REASON}), _node("n3", {"wait_ratio": "0.4"})])
    lines = table.splitlines()
    assert lines[1].split()[4] == "on" and lines[1].split()[5] == "n2"  # its why: the node it waits on
    assert f"n1: wait share unknown: {REASON}" in lines
    assert not any(line.startswith("n3: wait share unknown") for line in lines)


def test_the_nodes_table_says_the_detectors_reason_code_in_words() -> None:
    table = render_fleet([_node("n1", {WAIT_UNKNOWN: "no_swing"})])
    assert "n1: wait share unknown: the job's phases average out in the GPUs' power readings" in table
    assert "no_swing" not in table
