"""The job roll-up's bench keeps working, tiny (its figures are read by people, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakes.trees import REPO


def test_the_job_rollup_bench_runs_both_ways_and_finds_its_stragglers() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "job_rollup.py"), "--nodes", "12", "--jobs", "3", "--seconds", "70",
         "--straggler-jobs", "1", "--gpus", "2", "--json"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    figures = json.loads(out.stdout)
    assert figures["reports"] == 12 * 70
    assert figures["ingest_on_cpu_seconds_per_report"] > 0 and figures["ingest_off_cpu_seconds_per_report"] > 0
    assert figures["detector_cpu_seconds_per_report"] > 0
    assert figures["job_steps_judged"] >= 3 * 7
    assert (figures["jobs_named"], figures["jobs_right"], figures["jobs_wrong"]) == (1, 1, 0)
