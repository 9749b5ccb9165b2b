"""bench/lab_score.py: the multi-node lab's score table from saved rows, without root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import lab_score


def _row(scenario: str, gpu: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "gpu": gpu, "seconds": 45, "scenario": scenario, "run": 0, "job": "j0",
        "expected": "slowed, node-1 (link)", "verdict": "slowed, node-1 (link)", "window_truth": 0.55,
        "wait_ratio": 0.56, "first_named_seconds": 22.0, "named_polls": 10, "right_polls": 10,
        "straggler_run": True, "ok": True,
    }  # fmt: skip
    row.update(over)
    return row


ROWS = [
    _row("fabric", "h100_sxm5"),
    _row("fabric", "a100_sxm4", run=0, first_named_seconds=30.0, wait_ratio=0.50),
    _row(
        "fabric", "a100_sxm4", run=1, verdict="slowed, node-2 (network)", right_polls=4, first_named_seconds=None, ok=0
    ),
    _row(
        "clean",
        "a100_sxm4",
        expected="busy",
        verdict="busy",
        wait_ratio=0.0,
        first_named_seconds=None,
        named_polls=0,
        right_polls=0,
        straggler_run=False,
    ),
]


def test_a_cell_scores_precision_recall_cause_timing_and_the_wait_error() -> None:
    s = lab_score.score(ROWS, "fabric", "a100_sxm4")
    assert s is not None
    assert s["precision"] == pytest.approx(14 / 20)
    assert s["recall"] == pytest.approx(0.5)  # one of two straggler runs named within 60 s
    assert s["cause_accuracy"] == pytest.approx(0.5)  # `network` where `link` was expected
    assert (s["median_seconds"], s["worst_seconds"]) == (30.0, 30.0)
    assert s["wait_error"] == pytest.approx(0.05)
    clean = lab_score.score(ROWS, "clean", "a100_sxm4")
    assert clean is not None and clean["precision"] is None and clean["recall"] is None
    assert lab_score.score(ROWS, "storage", "a100_sxm4") is None


def test_the_table_is_rewritten_between_its_markers_and_only_there(tmp_path: Path) -> None:
    doc = tmp_path / "lab.md"
    doc.write_text(f"# Lab\n\nbefore\n\n{lab_score.START}\nold table\n{lab_score.END}\n\nafter\n")
    results = tmp_path / "rows.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert lab_score.main(["--from", str(results), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert "old table" not in text and text.startswith("# Lab\n\nbefore\n") and text.endswith("\n\nafter\n")
    assert "| fabric | A100 (no GPM) | 1 of 2 |" in text and "| clean | A100 (no GPM) | 1 of 1 | busy | - (0) |" in text
    assert "Minder" in text and "precision 0.904, F1 0.893" in text
    # Regenerating from the same rows gives the same document.
    assert lab_score.main(["--from", str(results), "--doc", str(doc)]) == 0
    assert doc.read_text() == text


def test_rows_that_cannot_be_read_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"scenario": "fabric"}\n')
    assert lab_score.main(["--from", str(bad), "--doc", str(tmp_path / "lab.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab_score: ") and err.count("\n") == 1


def test_the_final_answers_are_taken_while_the_ranks_ran() -> None:
    """On a loaded machine the CLI's answers can come after the job ended (its verdict gone, its
    nodes idle): then the last poll begun 3 s before the first rank ended stands for them."""
    from bench.lab_cluster import _while_running

    truths = {"node-0": {"ended_unix_seconds": 100.0}, "node-1": {"ended_unix_seconds": 101.0}}
    polls = [
        {"t": 90.0, "jobs": [{"time_unix_seconds": 90.0, "state": "slowed"}], "nodes": [{"state": "waiting"}]},
        {"t": 96.5, "jobs": [{"time_unix_seconds": 96.5, "state": "slowed"}], "nodes": [{"state": "waiting"}]},
        {"t": 98.0, "jobs": [], "nodes": [{"state": "idle"}]},
        {"t": 96.9, "error": ["jobs: refused"]},
    ]
    on_time = [{"time_unix_seconds": 97.0, "state": "slowed"}]
    assert _while_running(polls, truths, on_time, [{"state": "waiting"}]) == (on_time, [{"state": "waiting"}])
    late: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [{"state": "idle"}])
    assert _while_running(polls, truths, *late) == (polls[1]["jobs"], polls[1]["nodes"])
    assert _while_running([], truths, *late) == late
