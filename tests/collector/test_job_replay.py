"""``replay`` of a multi-node trace: several nodes' reports merged in time order, each node its
own detector, the job roll-up fed as the collector feeds it, and each job's verdicts over time.

The roll-up here is a toy (``tests/fakes/jobs.py: straggler_script``) where the test is about
replay's plumbing; the last test runs the collector's own roll-up as a user does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeagent.collector import replay as replay_module
from nodeagent.collector.cli.replay import replay as replay_command
from nodeagent.collector.replay import Replay, merged
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.wire.trace import format_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.jobs import TRACE_JOB, TRACE_START, FakeRollup, straggler_script, three_node_reports

# Seconds of reports per node: the straggler is named within 90 s, and the trace goes on after it.
SECONDS = 150


@pytest.fixture(scope="module")
def reports() -> dict[str, list[pb.NodeReport]]:
    return three_node_reports(SECONDS)


@pytest.fixture
def traces(reports: dict[str, list[pb.NodeReport]], tmp_path: Path) -> list[Path]:
    """Each node's trace in a file of its own, as each node's `nodeagent record` writes it."""
    paths = []
    for node_id, node_reports in reports.items():
        path = tmp_path / f"{node_id}.jsonl"
        path.write_text("".join(format_report(r) + "\n" for r in node_reports))
        paths.append(path)
    return paths


def test_reports_reach_each_nodes_detector_and_the_rollup_in_time_order(
    reports: dict[str, list[pb.NodeReport]],
) -> None:
    rollup = FakeRollup(script=straggler_script())
    result = Replay(DetectorConfig(), jobs=lambda _on_rewait: rollup)
    for report in merged(*reports.values()):
        result.observe(report)
    times = [t for _, t, _ in rollup.observed]
    assert times == sorted(times) and len(times) == 3 * SECONDS
    assert {n for n, _, _ in rollup.observed[:3]} == {"sim-a", "sim-b", "sim-c"}  # interleaved, not one after another
    # One detector per node; the roll-up told when each node's verdict advanced (every 10 s step).
    assert len({id(node.detector) for node in result.nodes.values()}) == 3
    for node_id, node_reports in reports.items():
        detector, steps = NodeDetector(node_id, DetectorConfig()), []
        for report in node_reports:
            before = detector.verdict
            if detector.observe(report) is not before:
                steps.append(report.time_unix_seconds)
        assert [t for n, t, advanced in rollup.observed if n == node_id and advanced] == steps and steps

    (job,) = result.to_plain()["jobs"]
    assert job["job"] == TRACE_JOB
    assert [c["state"] for c in job["timeline"]][:1] == ["warmup"] and job["timeline"][-1]["state"] == "slowed"
    slowed = job["first_slowed"]
    assert slowed["straggler_nodes"] == ["sim-b"] and slowed["cause"] == "network"
    # The detector names sim-b starved within its first window; the job is slowed from then on.
    assert TRACE_START < slowed["time_unix_seconds"] <= TRACE_START + 90
    assert job["final_verdict"]["straggler_nodes"] == ["sim-b"] and job["final_verdict"]["nodes"] == [
        "sim-a", "sim-b", "sim-c",
    ]  # fmt: skip
    (alert,) = job["alerts"]
    assert alert["status"] == "firing" and alert["name"] == "JobStraggler"
    assert alert["labels"] == {"job": TRACE_JOB, "node": "sim-b", "cause": "network"}
    assert alert["time_unix_seconds"] == slowed["time_unix_seconds"]


def _cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """The command in process, with the toy roll-up in place of the collector's."""
    monkeypatch.setattr(replay_module, "JobRollup", lambda _config, **_wiring: FakeRollup(script=straggler_script()))
    return CliRunner().invoke(replay_command, list(args))


def test_three_traces_replay_as_their_interleaved_trace_does(
    traces: list[Path], reports: dict[str, list[pb.NodeReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interleaved = tmp_path / "job.jsonl"
    interleaved.write_text("".join(format_report(r) + "\n" for r in merged(*reports.values())))
    separate = _cli(monkeypatch, "--json", *map(str, traces))
    joined = _cli(monkeypatch, "--json", str(interleaved))
    assert separate.exit_code == 0 and joined.exit_code == 0, separate.output + joined.output
    apart, together = json.loads(separate.stdout), json.loads(joined.stdout)
    assert apart["traces"] == [str(t) for t in traces]
    assert [n["node_id"] for n in apart["nodes"]] == ["sim-a", "sim-b", "sim-c"]
    assert [n["reports"] for n in apart["nodes"]] == [SECONDS] * 3
    assert apart["nodes"] == together["nodes"] and apart["jobs"] == together["jobs"]
    assert apart["jobs"][0]["first_slowed"]["straggler_nodes"] == ["sim-b"]

    text = _cli(monkeypatch, *map(str, traces))
    assert text.exit_code == 0, text.output
    out = text.stdout
    assert "trace " in out and f"{3 * SECONDS} reports, 3 node(s)" in out
    jobs = out.split("\njobs (times from the trace's start, 2026-01-01T00:00:00Z)\n", 1)[1]
    assert f"job {TRACE_JOB}  torch, 3 node(s), 24 GPUs (24 of 24 ranks)" in jobs
    first = next(line for line in jobs.splitlines() if "first slowed at" in line)
    assert first.endswith("straggler sim-b (network)")
    seconds = int(first.split("+", 1)[1].split(":", 3)[2][:2]) + 60 * int(first.split("+", 1)[1].split(":")[1])
    assert abs(TRACE_START + seconds - apart["jobs"][0]["first_slowed"]["time_unix_seconds"]) <= 1
    assert "firing   JobStraggler warning  cause=network job=torch/lab-3:29500 node=sim-b  wait 0.500" in jobs
    assert "at the end: slowed  straggler sim-b (network)  wait 0.500, " in jobs


def test_a_trace_joined_end_to_end_is_named(
    reports: dict[str, list[pb.NodeReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    joined = tmp_path / "cat.jsonl"
    joined.write_text("".join(format_report(r) + "\n" for node in reports.values() for r in node))
    done = _cli(monkeypatch, str(joined))
    assert done.exit_code == 0
    (said,) = [line for line in done.stderr.splitlines() if "not in time order" in line]
    assert f"{joined}:{SECONDS + 1}: node 'sim-b'" in said and "give each node's trace as its own file" in said


def test_the_collectors_replay_takes_several_traces(traces: list[Path], tmp_path: Path) -> None:
    """As a user runs it: three files, the collector's own roll-up; and a file among them with no
    valid report is named, exit 2, as one alone is."""
    command = [sys.executable, "-m", "nodeagent.collector", "replay", "--json", *map(str, traces)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    plain = json.loads(done.stdout)
    assert [n["reports"] for n in plain["nodes"]] == [SECONDS] * 3
    assert isinstance(plain["jobs"], list)
    for job in plain["jobs"]:
        assert set(job) >= {"job", "first_slowed", "timeline", "alerts", "final_verdict"}
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    failed = subprocess.run([*command, str(empty)], capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 2 and failed.stdout == ""
    assert failed.stderr.strip().splitlines()[-1] == f"nodeagent-collector: error: {empty}: no valid report (empty)"


def test_a_gzipped_trace_replays_as_its_plain_one_and_a_damaged_one_is_one_line(
    reports: dict[str, list[pb.NodeReport]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import gzip

    text = "".join(format_report(r) + "\n" for r in merged(*reports.values()))
    plain, packed = tmp_path / "job.jsonl", tmp_path / "job.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    a, b = _cli(monkeypatch, "--json", str(plain)), _cli(monkeypatch, "--json", str(packed))
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert json.loads(a.stdout)["jobs"] == json.loads(b.stdout)["jobs"] and json.loads(b.stdout)["jobs"]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"not gzip at all\n")
    from nodeagent.collector.cli.main import cli
    from nodeagent.core.program.command_line import run_cli

    for bad in (cut, broken):
        capsys.readouterr()
        assert run_cli(cli, "nodeagent-collector", ["replay", str(bad)]) == 2
        said = capsys.readouterr().err
        (line,) = said.strip().splitlines()
        assert line.startswith(f"nodeagent-collector: error: {bad}: cannot read: ") and "Traceback" not in said
