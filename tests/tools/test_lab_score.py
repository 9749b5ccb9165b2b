"""bench/lab_score.py: the multi-node lab's score table from saved rows, without root."""

from __future__ import annotations

import json
import subprocess
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


# ---- the regime matrix ---------------------------------------------------------------------------

MATRIX = """
runs = 2
seconds = 45
[regimes]
gpm = { gpu = "h100_sxm5" }
mean1s = { gpu = "a100_sxm4", power = "mean1s" }
sampled = { gpu = "a100_sxm4", power = "sampled", lag_ms = 75 }
[[cells]]
regimes = ["*"]
scenarios = ["network"]
steps = [0.22]
[[cells]]
regimes = ["mean1s"]
scenarios = ["fabric"]
steps = [0.15, 2.0]
collectives = ["bursts"]
"""


def _matrix_rows() -> list[dict[str, Any]]:
    network = {"expected": "slowed, node-1 (network)", "verdict": "slowed, node-1 (network)"}
    return [
        # GPM, rows of the lab as it always was (no emulation words): right, twice.
        _row("network", "h100_sxm5", **network, wait_ratio=0.53, window_truth=0.55),
        _row("network", "h100_sxm5", **network, run=1, wait_ratio=0.58, window_truth=0.55),
        # The 1 s mean: the straggler named, the wait share unknown with its reason, once with none.
        _row(
            "network",
            "a100_sxm4",
            power="mean1s",
            lag_ms=0,
            collective="bandwidth",
            step=0.22,
            **network,
            wait_ratio=None,
            wait_unknown="wait share unknown: power is a 1 s mean at 0.2 s steps",
        ),
        _row(
            "network",
            "a100_sxm4",
            power="mean1s",
            lag_ms=0,
            collective="bandwidth",
            step=0.22,
            **network,
            run=1,
            wait_ratio=None,
            ok=False,
        ),
        # Sampled with a lag: a wrong number.
        _row("network", "a100_sxm4", power="sampled", lag_ms=75, **network, wait_ratio=0.17, ok=False),
        # Another step length than the matrix's: not a cell of it.
        _row("network", "h100_sxm5", **network, step=0.5),
        _row(
            "fabric",
            "a100_sxm4",
            power="mean1s",
            collective="bursts",
            step=2.0,
            verdict="busy",
            ok=False,
            named_polls=0,
            right_polls=0,
            first_named_seconds=None,
            wait_ratio=0.03,
            window_truth=0.39,
        ),
    ]


def test_a_matrix_file_lists_its_cells_as_cross_products(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    matrix = lab_score.load_matrix(path)
    assert (matrix.runs, matrix.seconds) == (2, 45)
    assert [(c.regime.name, c.scenario, c.collective, c.step) for c in matrix.cells] == [
        ("gpm", "network", "bandwidth", 0.22), ("mean1s", "network", "bandwidth", 0.22),
        ("sampled", "network", "bandwidth", 0.22), ("mean1s", "fabric", "bursts", 0.15),
        ("mean1s", "fabric", "bursts", 2.0),
    ]  # fmt: skip
    # The matrix the docs describe loads: every regime for every scenario, every step for two.
    shipped = lab_score.load_matrix(lab_score.MATRIX)
    assert len({c.regime.name for c in shipped.cells}) >= 5 and shipped.runs >= 2
    steps = {c.step for c in shipped.cells if c.scenario in ("network", "fabric")}
    assert {0.15, 0.5, 2.0} <= steps


def test_each_cell_scores_its_own_rows_and_says_unknown_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    cells, missing = lab_score.score_matrix(_matrix_rows(), lab_score.load_matrix(path))
    by = {(c["regime"], c["scenario"], c["step"]): c for c in cells}
    gpm = by["gpm", "network", 0.22]
    assert (gpm["jobs"], gpm["ok"], gpm["runs"]) == (2, 2, 2)  # the 0.5 s row is not this cell's
    assert gpm["wait"] == "0.030" and gpm["unknown"] == []
    mean1s = by["mean1s", "network", 0.22]
    assert mean1s["wait_error"] is None and mean1s["cause_accuracy"] == 1.0
    assert mean1s["wait"] == "unknown (wait share unknown: power is a 1 s mean at 0.2 s steps; no reason given)"
    sampled = by["sampled", "network", 0.22]
    assert sampled["wait"] == "0.380" and sampled["ok"] == 0  # a wrong number is a number, not unknown
    bursts = by["mean1s", "fabric", 2.0]
    assert bursts["recall"] == 0.0 and bursts["cause_accuracy"] == 0.0 and bursts["wait"] == "0.360"
    assert missing == 1  # fabric at 0.15 s has no runs
    table = lab_score.matrix_table(cells, missing)
    assert "| mean1s | network | bandwidth | 0.22 s | 2 | 1 of 2 | slowed, node-1 (network) |" in table
    assert table.count("|---") == 12  # twelve columns
    assert "1 cells of the matrix have no runs here." in table


def test_the_matrix_prints_markdown_or_json_and_rewrites_its_own_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, rows, doc = tmp_path / "m.toml", tmp_path / "rows.jsonl", tmp_path / "lab.md"
    path.write_text(MATRIX)
    rows.write_text("".join(json.dumps(r) + "\n" for r in _matrix_rows()))
    doc.write_text(f"# Lab\n\n{lab_score.START}\nthe class table\n{lab_score.END}\n")
    args = ["--matrix", str(path), "--from", str(rows), "--doc", str(doc)]
    assert lab_score.main(args) == 0
    text = doc.read_text()
    assert "the class table" in text and lab_score.MATRIX_START in text and "| gpm | network |" in text
    assert lab_score.main(args) == 0 and doc.read_text() == text  # regenerated: the same document
    capsys.readouterr()
    assert lab_score.main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["missing_cells"] == 1 and {c["regime"] for c in out["cells"]} == {"gpm", "mean1s", "sampled"}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[regimes]\nx = { power = 'ideal' }\n[[cells]]\nregimes = ['x']\n", "regime 'x' has no gpu"),
        ("[regimes]\nx = { gpu = 'a100_sxm4' }\n[[cells]]\nregimes = ['y']\n", "unknown regime 'y'"),
        ("runs = [\n", "m.toml"),
        ("[regimes]\nx = { gpu = 'a100_sxm4' }\n", "no cells"),
    ],
)
def test_a_bad_matrix_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text)
    assert lab_score.main(["--matrix", str(path), "--from", str(tmp_path / "none.jsonl"), "--no-doc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab_score: ") and err.count("\n") == 1 and named in err


def test_a_dcgm_row_is_its_own_regimes_not_the_power_regimes_it_shares_a_sensor_with(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        'runs = 1\nseconds = 45\n[regimes]\nmean1s = { gpu = "a100_sxm4", power = "mean1s" }\n'
        'dcgm = { gpu = "a100_sxm4", power = "mean1s", source = "dcgm" }\n'
        '[[cells]]\nscenarios = ["network"]\nsteps = [0.22]\ncollectives = ["bandwidth"]\n'
    )
    mean1s, dcgm = sorted(lab_score.load_matrix(path).cells, key=lambda c: c.regime.source)
    row = {"scenario": "network", "gpu": "a100_sxm4", "power": "mean1s", "source": "dcgm"}
    assert dcgm.holds(row) and not mean1s.holds(row)
    assert mean1s.holds({**row, "source": ""}) and mean1s.holds({k: v for k, v in row.items() if k != "source"})
    assert any(c.regime.source == "dcgm" for c in lab_score.load_matrix(lab_score.MATRIX).cells)


def test_a_resumed_matrix_runs_only_what_its_cells_lack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    matrix = lab_score.load_matrix(path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in _matrix_rows()))
    todo = lab_score.missing_runs(lab_score.load(rows), matrix, 2)
    by = {(regime.name, collective, step): scenarios for (regime, collective, step), scenarios in todo.items()}
    # gpm's network cell has its two runs; mean1s's has two; sampled's one; the bursts cells none.
    assert ("gpm", "bandwidth", 0.22) not in by
    assert ("mean1s", "bandwidth", 0.22) not in by
    assert by["sampled", "bandwidth", 0.22] == {"network": 1}
    assert by["mean1s", "bursts", 2.0] == {"fabric": 1} and by["mean1s", "bursts", 0.15] == {"fabric": 2}
    ran: list[list[str]] = []
    monkeypatch.setattr(
        lab_score.subprocess, "run", lambda cmd, **_: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0)
    )
    assert lab_score.run_matrix(rows, matrix, 2, resume=True, max_labs=2) == 0
    assert len(ran) == 2 and rows.exists()  # the rows it had are kept; two labs, then it stops
    first = ran[0]
    assert first[first.index("--power") + 1] == "sampled" and first[first.index("--runs") + 1] == "1"
    assert first[first.index("--scenarios") + 1] == "network"
    ran.clear()
    assert lab_score.run_matrix(rows, matrix, 2, resume=True) == 0
    assert len(ran) == len({(r, c, s, n) for (r, c, s), sc in todo.items() for n in sc.values()})


def test_runs_of_two_labs_count_apart_though_both_number_from_0() -> None:
    first = _row("network", "h100_sxm5", job="network-101-0-j0")
    again = _row("network", "h100_sxm5", job="network-202-0-j0")
    same_lab_run_1 = _row("network", "h100_sxm5", run=1, job="network-101-1-j0")
    scored = lab_score.score([first, again, same_lab_run_1], "network", "h100_sxm5")
    assert scored is not None and (scored["runs"], scored["jobs"]) == (3, 3)
