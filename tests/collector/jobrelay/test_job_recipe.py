"""The 3-node recipe of docs/jobs.md on the default ``serve`` (a front and a worker per core): one
node starved by its network, two fast; the job names that node with cause ``network`` and the two
others wait on it, wherever their node ids and the job key land among the workers.

Sped up 30x on one anchor, as the recipe runs (15 s here; at the wall clock's pace the same job took
55 s to name). Real agents at the wall clock's pace on the default serve are the multi-node lab's
(tests/tools/test_lab_cluster.py: its straggler named with its cause within 60 s)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from nodeagent.core.transport.rendezvous import owner_index
from tests.fakes.fleet import Agent, Collector, cli, free_port_run, processes, wait_for

JOB = "torch/run-e"


def _node_ids(workers: int) -> list[str]:
    """Three node ids; the starved one (first) owned by another worker than the job's key, so its
    steps and its waits cross between workers (with one worker: any)."""
    job_owner = owner_index(JOB, workers)
    names = [f"node-{i}" for i in range(40)]
    starved = next(n for n in names if workers == 1 or owner_index(n, workers) != job_owner)
    others = [n for n in names if n != starved][:2]
    return [starved, *others]


def test_the_recipe_names_the_starved_node_with_its_cause_on_the_default_serve(tmp_path: Path) -> None:
    workers = len(os.sched_getaffinity(0))
    nodes = _node_ids(workers)
    # A sped-up job: every node's clock on one anchor, as docs/jobs.md's recipe gives it.
    anchor = str(int(time.time()) + 20)
    pace = ["--interval", "0.1", "--time-scale", "30", "--time-scale-anchor", anchor]
    with processes() as started:
        collector = Collector(tmp_path / "c.db", free_port_run(workers + 1)).start()
        started.append(collector)
        for rank, node in enumerate(nodes):
            scenario = "ordinary-cloud" if rank == 0 else "fast-cloud"
            args = [
                "--collector", collector.address, "--node-id", node, "--simulate", scenario,
                "--spool-dir", str(tmp_path / f"spool-{node}"), *pace,
                "--set", f"job_key={JOB}", "--set", "job_nodes=3", "--set", f"job_node_rank={rank}",
            ]  # fmt: skip
            started.append(Agent(args).start(tmp_path / f"{node}.log"))

        def named() -> dict[str, object] | None:
            jobs = json.loads(cli("collector", "jobs", "--json", "--collector", collector.address))
            job = next((j for j in jobs if j["job"] == JOB), None)
            if job and job.get("straggler_nodes") == [nodes[0]] and job.get("cause") == "network":
                return job
            return None

        agents_started = time.monotonic()
        assert wait_for(named, timeout=120, interval=1.0), (
            cli("collector", "jobs", "--collector", collector.address) + collector.log.read_text()[-3000:]
        )
        print(f"named {nodes[0]} (network) {time.monotonic() - agents_started:.1f} s after the agents started")
        job = named()
        assert job is not None and job["nodes"] == sorted(nodes)
        # Its waiting nodes say whom they wait on (their waits came back from the job's worker).
        shown = {n["node_id"]: n for n in collector.nodes()}
        assert wait_for(
            lambda: all(collector.node(n)["state"] == "waiting" for n in nodes[1:]), timeout=30, interval=1.0
        ), shown
