"""One job whose nodes live on three collectors (each the default ``serve``, a front and its
workers, with the same ``[fleet] collectors``): the job is judged by its owner as on one collector,
and when that owner is SIGKILLed the next collector its key ranks judges it, until it is back."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import grpc
import pytest

from nodeagent.core.transport.rendezvous import rendezvous_order
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import Agent, Collector, cli, free_port, processes, wait_for

JOB = "torch/run-x"
# The simulated job at 30 times the wall clock (a window of 60 s takes 2 s), every node's clock
# on one anchor so that their steps meet.
PACE = ["--interval", "0.1", "--time-scale", "30"]
# The anchor (where the simulated clock meets the wall clock and slows to it) past the whole test,
# so that the kill and the restart are met at 30x too: at 1x each took 35 s, the detector's window.
ANCHOR_SECONDS = 150


def _spread(collectors: list[str]) -> list[str]:
    """Three node ids, each ranking another collector first (their reports land on all three)."""
    out: list[str] = []
    for i in range(200):
        node = f"node-{i}"
        first = rendezvous_order(node, collectors)[0]
        if first not in {rendezvous_order(n, collectors)[0] for n in out}:
            out.append(node)
        if len(out) == 3:
            return out
    raise AssertionError("no spread of node ids")


# Nine collector processes and three sped-up agents: on a machine shared with other tests their
# steps fall behind the sped-up clocks; run alone, as the labs are.
@pytest.mark.alone
def test_a_job_spread_over_three_collectors_is_named_and_survives_its_owner(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    addresses = [f"127.0.0.1:{p}" for p in ports]
    fleet = tmp_path / "collector.toml"
    fleet.write_text("[fleet]\ncollectors = [" + ", ".join(f'"{a}"' for a in addresses) + "]\n")
    nodes = _spread(addresses)
    owner = rendezvous_order(JOB, addresses)[0]
    anchor = str(int(time.time()) + ANCHOR_SECONDS)
    with processes() as started:
        collectors = {}
        for i, port in enumerate(ports):
            collector = Collector(tmp_path / f"c{i}.db", port, args=["--config", str(fleet)]).start()
            collectors[collector.address] = collector
            started.append(collector)
        for rank, node in enumerate(nodes):
            scenario = "ordinary-cloud" if rank == 0 else "fast-cloud"
            args = [
                *[a for address in addresses for a in ("--collector", address)], "--node-id", node,
                "--simulate", scenario, "--spool-dir", str(tmp_path / f"spool-{node}"),
                *PACE, "--time-scale-anchor", anchor,
                "--set", f"job_key={JOB}", "--set", "job_nodes=3", "--set", f"job_node_rank={rank}",
            ]  # fmt: skip
            started.append(Agent(args).start(tmp_path / f"{node}.log"))
        where = {n: next(a for a in addresses if collectors[a].reports(n) > 0) for n in nodes if wait_for(
            lambda n=n: any(c.reports(n) > 0 for c in collectors.values()), timeout=30)}  # fmt: skip
        assert sorted(where.values()) == sorted(addresses), where  # one node on each collector

        def named_by(collector: str) -> bool:
            # Asked in process, as `nodeagent-collector jobs` asks (StreamJobs): a command started
            # every half second would take half a core from the sped-up agents.
            with grpc.insecure_channel(collector) as channel:
                jobs = [j for page in pb_grpc.QueryStub(channel).StreamJobs(pb.ListJobsRequest(), timeout=10)
                        for j in page.jobs]  # fmt: skip
            job = next((j for j in jobs if j.job == JOB), None)
            return bool(job and list(job.straggler_nodes) == [nodes[0]] and job.cause == "network")

        assert wait_for(lambda: named_by(owner), timeout=120, interval=0.5), cli(
            "collector", "jobs", *[a for address in addresses for a in ("--collector", address)]
        )
        shown = json.loads(cli("collector", "jobs", "--json", "--collector", owner))  # and the command says it
        assert any(j["job"] == JOB and j["straggler_nodes"] == [nodes[0]] and j["cause"] == "network" for j in shown)
        # The owner dies: the next collector the job's key ranks judges it.
        collectors[owner].kill(signal.SIGKILL)
        killed = time.monotonic()
        successor = rendezvous_order(JOB, addresses)[1]
        alive = [a for a in addresses if a != owner]
        assert wait_for(lambda: named_by(successor), timeout=120, interval=0.5), cli(
            "collector", "jobs", *[a for address in alive for a in ("--collector", address)]
        ) + cli("collector", "nodes", *[a for address in alive for a in ("--collector", address)])
        back_elsewhere = time.monotonic() - killed
        collectors[owner].start()
        restarted = time.monotonic()
        assert wait_for(lambda: named_by(owner), timeout=120, interval=0.5)
        back_home = time.monotonic() - restarted
        print(f"named by its successor {back_elsewhere:.1f} s after the kill, by its owner {back_home:.1f} s after")
