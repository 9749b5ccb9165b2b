"""The overhead benchmark keeps working (its figures are read by people, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import require
from tests.fakes.trees import REPO


def test_overhead_benchmark_runs_and_reports_both_sides() -> None:
    import shutil

    require(shutil.which("prometheus-node-exporter") is not None, "needs prometheus-node-exporter (Debian)")
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "agent_overhead.py"), "--cycles", "5", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    results = json.loads(out.stdout)
    assert results[0]["tree"] == "this machine"
    for result in results:
        assert result["agent"]["cpu_seconds_per_cycle"] > 0
        assert result["node_exporter"]["cpu_seconds_per_scrape"] >= 0
        assert result["agent"]["peak_rss_bytes"] > 10e6


def test_diag_speed_benchmark_runs_on_the_fake_8_gpu_nodes(fake_nvml_dir: Path) -> None:
    """``fake_nvml_dir``: the benchmark builds the same fake library; skip (or fail in CI) without it."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "diag_speed.py"), "--runs", "1", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    results = json.loads(out.stdout)
    assert {r["node"] for r in results} == {"8xH100-SXM5", "8xA100-SXM4"}
    assert all(r["checks"] > 15 and r["max_seconds"] > 0 for r in results)
