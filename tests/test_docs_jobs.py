"""docs/jobs.md's recipe for a simulated job, run as written: four ``nodeagent run --simulate``
nodes of one job (one on the 10 Gb/s link), sped up 30x on one anchor, then
``nodeagent-collector jobs`` names the straggler and its cause while they run; once all have
stopped the job has ended and its alert resolved. Only the collector's address is
the test's own (a free port instead of the quick start's 50051)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.fleet import Collector, cli, free_port, processes
from tests.fakes.trees import REPO
from tests.test_docs import FENCE

QUICK_START = "127.0.0.1:50051"


def _recipe() -> str:
    section = (REPO / "docs" / "jobs.md").read_text().split("## A simulated job\n", 1)[1].split("\n## ", 1)[0]
    (block,) = [body for lang, body in FENCE.findall(section) if lang == "sh"]
    return block


def test_the_simulated_job_recipe_names_the_straggler_and_its_cause(tmp_path: Path) -> None:
    recipe = _recipe()
    assert recipe.count("nodeagent run ") == 2 and "--time-scale-anchor $anchor" in recipe
    # The default serve (a front and a worker per core), as the recipe's reader runs it.
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        bin_dir = str(Path(sys.executable).parent)
        done = subprocess.run(
            ["bash", "-e", "-c", recipe.replace(QUICK_START, collector.address)], cwd=tmp_path,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        jobs = json.loads(cli("collector", "jobs", "--json", "--collector", collector.address))
        alerts = json.loads(cli("collector", "alerts", "--json", "--all", "--collector", collector.address))
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(s["node_id"] for s in summaries) == ["train-0", "train-1", "train-2", "train-3"]
    (table_row,) = [line.split() for line in done.stdout.splitlines() if line.startswith("torch/run-e")]
    assert table_row[1:6] == ["slowed", "4", "32", "train-3", "network"]
    # Every node said goodbye at its --deadline: the job ended at once, its alert resolved, and
    # its hours are the history's.
    assert not [j for j in jobs if j["live"]], jobs
    (job,) = [j for j in jobs if j["job"] == "torch/run-e"]
    assert job["history"]["gpu_hours"] > 0, job
    straggler = [a for a in alerts if a["name"] == "JobStraggler" and a["node_id"] == "train-3"]
    assert straggler and all(a["state"] == "resolved" for a in straggler), alerts
