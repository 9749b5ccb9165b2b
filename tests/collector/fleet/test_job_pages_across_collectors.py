"""A 4-node job over two collectors of one ``[fleet]``: a front with its workers (the default
``serve``) and a collector alone (``--workers 1``), its nodes on both. Each collector's fleet and
job pages show every member: a row that links the job for each node, a filled card for each,
whichever collector judges the job and whichever page is asked."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from nodeagent.core.transport.rendezvous import rendezvous_order
from tests.fakes.fleet import Agent, Collector, free_port, free_port_run, processes, wait_for

JOB = "torch/fleet-4node"


def _nodes(addresses: list[str]) -> list[str]:
    """Four node ids, two landing on each collector; the straggler (first) on the collector that
    does not judge the job, so that its card comes from there."""
    owner = rendezvous_order(JOB, addresses)[0]
    names = [f"fleet-node-{i}" for i in range(64)]
    away = [n for n in names if rendezvous_order(n, addresses)[0] != owner]
    home = [n for n in names if rendezvous_order(n, addresses)[0] == owner]
    return [away[0], away[1], home[0], home[1]]


def _page(collector: Collector, path: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://{collector.http_address}{path}", timeout=30) as reply:
            return dict(json.loads(reply.read()))
    except urllib.error.HTTPError as err:
        return {"status": err.code, **json.loads(err.read() or b"{}")}


def test_each_collectors_pages_show_every_member_of_a_job_spread_over_the_fleet(tmp_path: Path) -> None:
    front_port, alone_port = free_port_run(3), free_port()
    addresses = [f"127.0.0.1:{front_port}", f"127.0.0.1:{alone_port}"]
    fleet = tmp_path / "collector.toml"
    fleet.write_text("[fleet]\ncollectors = [" + ", ".join(f'"{a}"' for a in addresses) + "]\n")
    nodes = _nodes(addresses)
    anchor = str(int(time.time()) + 20)
    with processes() as started:
        front = Collector(tmp_path / "front.db", front_port, args=["--config", str(fleet)], workers=2).start()
        alone = Collector(tmp_path / "alone.db", alone_port, args=["--config", str(fleet)], workers=1).start()
        started += [front, alone]
        for rank, node in enumerate(nodes):
            args = [
                *[a for address in addresses for a in ("--collector", address)], "--node-id", node,
                "--simulate", "ordinary-cloud" if rank == 0 else "fast-cloud", "--spool-dir", str(tmp_path / node),
                "--interval", "0.1", "--time-scale", "30", "--time-scale-anchor", anchor,
                "--set", f"job_key={JOB}", "--set", "job_nodes=4", "--set", f"job_node_rank={rank}",
            ]  # fmt: skip
            started.append(Agent(args).start(tmp_path / f"{node}.log"))
        job_path = "/api/job/" + urllib.parse.quote(JOB, safe="")

        def filled(collector: Collector) -> bool:
            job = _page(collector, job_path)
            cards = {c["node_id"]: c for c in job.get("node_details", [])}
            straggler = cards.get(nodes[0], {})
            return sorted(cards) == sorted(nodes) and straggler.get("straggler") and straggler.get("state") == "starved"

        for collector in (front, alone):
            assert wait_for(lambda c=collector: filled(c), timeout=180, interval=1.0), json.dumps(
                _page(collector, job_path), indent=1
            )
            cards = {c["node_id"]: c for c in _page(collector, job_path)["node_details"]}
            assert all(c["known"] and c["gpu_count"] == 8 for c in cards.values()), cards
            # Each card from the collector that holds its node, wherever the page is asked.
            holders = {n: next(a for a in addresses if rendezvous_order(n, addresses)[0] == a) for n in nodes}
            assert all(cards[n]["shard"] in (holders[n], *(f"worker-{i}" for i in range(2))) for n in nodes)
            assert "receives" in cards[nodes[0]]["highway"] and "network" in cards[nodes[0]]["sentence"]
            assert [n for n, c in cards.items() if c["straggler"]] == [nodes[0]]
            rows = {r["node_id"]: r for r in _page(collector, "/api/fleet")["nodes"]}
            assert {n: rows[n]["jobs"] for n in nodes} == {n: [JOB] for n in nodes}
