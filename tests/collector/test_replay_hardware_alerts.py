"""Replay raises the hardware alerts too, from the same rules as the live collector."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nodeagent.core.wire.trace import format_report
from nodeagent.tools.simulator import Simulation
from tests.fakes.trees import REPO


def test_replay_shows_a_lost_gpu_firing_and_resolving(tmp_path: Path) -> None:
    simulation = Simulation("healthy", node_id="replayed", seed=1)
    lines = []
    for seq in range(1, 121):
        report = simulation.step(1.0)
        report.epoch, report.seq = 1, seq
        if seq == 1:
            report.info.CopyFrom(simulation.info())
        report.gpus[2].lost = 60 <= seq < 90
        lines.append(format_report(report).rstrip("\n") + "\n")
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(lines))
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "replay", str(trace), "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    alerts = json.loads(done.stdout)["nodes"][0]["alerts"]
    lost = [(a["status"], a["key"], a["time_unix_seconds"] - alerts[0]["time_unix_seconds"]) for a in alerts]
    assert [(status, key) for status, key, _ in lost] == [("firing", "gpu:2"), ("resolved", "gpu:2")]
    assert 25 <= lost[1][2] <= 40  # lost for 30 s of trace time, judged once every check_seconds
