"""The README's first command: the demo names the starved rental and why, the 4-node job's
straggler and its cause (in the jobs table, the alerts and the fleet page's ``/jobs``), and cleans up."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import psutil
import pytest

from nodeagent.tools.demo import CAUGHT_UP_SECONDS
from tests.fakes.trees import REPO

JOB = "torch/clip-4node"
# One test process for both: the first looks for any simulated rental left running, which the
# second's demo, while it runs, would be.
pytestmark = pytest.mark.xdist_group("demo")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def test_demo_names_the_starved_node_the_jobs_straggler_and_the_cause() -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.collector", "demo", "--seconds", "15"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert demo.stdout is not None and demo.stdin is not None
    lines: list[str] = []
    try:
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("It stays up"):
                break
        page = re.search(r"The fleet page: (http://127\.0\.0\.1:\d+/)", "".join(lines))
        assert page, "".join(lines)
        # The page, while it stays up: /jobs lists the job that `jobs` lists live, and its straggler.
        jobs = _get(page[1] + "api/jobs")["jobs"]
        alerts = _get(page[1] + "api/alerts")["alerts"]
        demo.stdin.write("\n")
        demo.stdin.flush()
        rest, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    out = "".join(lines) + rest
    assert demo.returncode == 0, err[-2000:]
    # The table's rows (a note under it names its node with a colon: "clip-node-0: wait share unknown: ...").
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.startswith(("rental-", "clip-")) and not line.split()[0].endswith(":")
    }
    assert rows["rental-10g-pcie"][3:5] == ["starved", "network"]
    assert rows["rental-50g-nvlink"][3] == "busy"
    assert rows["clip-node-3"][3:5] == ["starved", "network"]
    assert all(rows[f"clip-node-{rank}"][3] == "waiting" for rank in range(3)), rows
    # Sped up 30x and yet never ahead of the wall clock: nothing refused, the skew at most zero.
    for node, row in rows.items():
        if node.startswith(("rental-", "clip-node-")):
            assert row[-1] == "0" and row[-2].startswith("-"), row
            # Caught up when the table is printed (docs/collector.md says within 2 s).
            assert -CAUGHT_UP_SECONDS <= float(row[-2].removesuffix("s")) <= 0, row
    assert "GPUDataStarved [critical] rental-10g-pcie" in out
    assert f"JobStraggler [critical] clip-node-3: job {JOB}: clip-node-3 holds back 3 other nodes (network)" in out
    assert "the network into the node is the bottleneck" in out
    # The jobs table: the 4-node job live, slowed by clip-node-3 (network); the rentals' own
    # Slurm jobs only in the history, never one job shared by the two.
    (job,) = [line.split() for line in out.splitlines() if line.startswith(JOB)]
    assert job[1:6] == ["slowed", "4", "32", "clip-node-3", "network"] and job[6].endswith("%")
    history_only = out.split("-- in the history only")[1].split("(WAIT %")[0].splitlines()[1:]
    assert [line.split()[2] for line in history_only] == ["1", "1"]
    assert [(j["job"], j["state"], j["straggler_nodes"], j["cause"]) for j in jobs] == [
        (JOB, "slowed", ["clip-node-3"], "network")
    ]
    assert {(a["name"], a["node_id"]) for a in alerts} >= {("JobStraggler", "clip-node-3")}
    # Every process the demo started is gone (they would be orphans now, not our children).
    assert not [p for p in psutil.process_iter(["cmdline"]) if "rental-10g-pcie" in (p.info["cmdline"] or [])]
    assert not [p for p in psutil.process_iter(["cmdline"]) if "clip-node-3" in (p.info["cmdline"] or [])]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_demo_ended_by_a_signal_stops_its_collector_and_agents(sig: signal.Signals) -> None:
    """A ``kill`` or a closed terminal ends the demo as Enter does: with its fleet (before, the demo
    died at once and left its collector and seven agents running)."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.collector", "demo", "--seconds", "15"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert demo.stdout is not None
    try:
        for line in demo.stdout:
            if line.startswith("collector "):
                break
        # Every agent started: the collector, its workers and the demo's seven agents.
        deadline = time.monotonic() + 30
        fleet: list[psutil.Process] = []
        while time.monotonic() < deadline:
            fleet = psutil.Process(demo.pid).children(recursive=True)
            if sum(1 for p in fleet if "nodeagent.agent" in " ".join(p.cmdline())) >= 7:
                break
            time.sleep(0.2)
        assert sum(1 for p in fleet if "nodeagent.agent" in " ".join(p.cmdline())) >= 7, fleet
        demo.send_signal(sig)
        demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 128 + sig
    _, alive = psutil.wait_procs(fleet, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
