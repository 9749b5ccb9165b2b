"""A 4-node job on the default ``serve`` (a front and its workers) with its nodes on both workers,
the job judged on one of them: the fleet and job pages show every member (each row links the
job, each card is filled, the HTML page too), and when every agent stops cleanly the job ends at
once and its ``JobStraggler`` resolves, the goodbyes on the other worker reaching the job's owner."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.transport.rendezvous import owner_index
from tests.fakes.fleet import Agent, Collector, cli, free_port_run, processes, wait_for

JOB = "torch/clip-4node"
# At least two workers, however few cores: the job's nodes must land on both.
WORKERS = max(2, len(os.sched_getaffinity(0)))


def _nodes() -> list[str]:
    """Four node ids, the straggler (first) and one other on a worker that does not own the job,
    and one on the job's owner: cards and waits cross between workers both ways."""
    owner = owner_index(JOB, WORKERS)
    names = [f"clip-node-{i}" for i in range(64)]
    away = [n for n in names if owner_index(n, WORKERS) != owner]
    home = [n for n in names if owner_index(n, WORKERS) == owner]
    return [away[0], away[1], home[0], home[1]]


@dataclass
class Fleet:
    collector: Collector
    agents: list[Agent]
    nodes: list[str]

    def page(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.collector.http_address}{path}", timeout=30) as reply:
            return dict(json.loads(reply.read()))

    def job_page(self) -> dict[str, Any]:
        return self.page("/api/job/" + urllib.parse.quote(JOB, safe=""))

    def straggler_alerts(self) -> list[dict[str, Any]]:
        alerts = json.loads(cli("collector", "alerts", "--all", "--json", "--collector", self.collector.address))
        return [a for a in alerts if a["name"] == "JobStraggler" and a["key"] == JOB]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The job running, its straggler named (network) and its JobStraggler firing."""
    nodes = _nodes()
    anchor = str(int(time.time()) + 20)  # every node's sped-up clock on one anchor (docs/jobs.md)
    with processes() as started:
        collector = Collector(tmp_path / "c.db", free_port_run(WORKERS + 1), workers=WORKERS).start()
        started.append(collector)
        agents = []
        for rank, node in enumerate(nodes):
            args = [
                "--collector", collector.address, "--node-id", node,
                "--simulate", "ordinary-cloud" if rank == 0 else "fast-cloud", "--spool-dir", str(tmp_path / node),
                "--interval", "0.1", "--time-scale", "30", "--time-scale-anchor", anchor,
                "--set", f"job_key={JOB}", "--set", "job_nodes=4", "--set", f"job_node_rank={rank}",
            ]  # fmt: skip
            agents.append(Agent(args).start(tmp_path / f"{node}.log"))
        started.extend(agents)
        it = Fleet(collector, agents, nodes)

        def named() -> bool:
            job = it.page("/api/jobs")["jobs"]
            slowed = any(j["job"] == JOB and j["straggler_nodes"] == [nodes[0]] for j in job)
            return slowed and any(a["state"] == "firing" for a in it.straggler_alerts())

        log = collector.log.read_text()[-3000:] if collector.log else ""
        assert wait_for(named, timeout=180, interval=1.0), json.dumps(it.page("/api/jobs")) + log
        yield it


def test_every_member_on_both_workers_has_its_row_and_its_card(fleet: Fleet, tmp_path: Path) -> None:
    nodes, straggler = fleet.nodes, fleet.nodes[0]

    def filled() -> dict[str, Any] | None:
        job = fleet.job_page()
        cards = {c["node_id"]: c for c in job["node_details"]}
        waiting = all(cards[n].get("state") == "waiting" for n in nodes[1:])
        return job if sorted(cards) == sorted(nodes) and waiting and cards[straggler]["state"] == "starved" else None

    assert wait_for(filled, timeout=60, interval=1.0), json.dumps(fleet.job_page(), indent=1)
    job = filled()
    assert job is not None
    cards = {c["node_id"]: c for c in job["node_details"]}
    # Every card is its node's own, from the worker that holds it: both workers among them.
    assert all(c["known"] and c["gpu_count"] == 8 and len(c["gpus"]) == 8 for c in cards.values()), cards
    assert {c["shard"] for c in cards.values()} == {f"worker-{i}" for i in {owner_index(n, WORKERS) for n in nodes}}
    assert [n for n, c in cards.items() if c["straggler"]] == [straggler]
    held_back = cards[straggler]
    assert held_back["cause"] == "network" and held_back["busy_ratio"] < 0.9
    assert "network" in held_back["sentence"] and "receives" in held_back["highway"], held_back
    for node in nodes[1:]:
        assert cards[node]["waiting_on"] == [straggler] and cards[node]["busy_ratio"] > 0.8, cards[node]
        assert "sentence" not in cards[node] and "highways" not in cards[node]
    # The fleet's rows: every member links its job, wherever the job is judged.
    rows = {r["node_id"]: r for r in fleet.page("/api/fleet")["nodes"]}
    assert {n: rows[n]["jobs"] for n in nodes} == {n: [JOB] for n in nodes}
    assert {n: fleet.page(f"/api/node/{n}")["jobs"] for n in nodes} == {n: [JOB] for n in nodes}
    # The pages as drawn: four cards, none unknown; every row of / links the job.
    from tests.fakes.chromium import Browser  # skips without chromium

    base = f"http://{fleet.collector.http_address}"
    with Browser(tmp_path / "profile") as browser:
        page = browser.open(f"{base}/job/{urllib.parse.quote(JOB, safe='')}", 1200, 900)
        page.wait_for("document.querySelectorAll('#job-nodes .card').length === 4")
        drawn = page.evaluate(
            "[...document.querySelectorAll('#job-nodes .card')].map((c) => ({node: c.dataset.node, "
            "straggler: c.classList.contains('straggler'), text: c.innerText}))"
        )
        fleet_page = browser.open(f"{base}/", 1200, 900)
        fleet_page.wait_for("document.querySelectorAll('tr.node').length >= 4")
        links = fleet_page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('tr.node')].map((r) => [r.dataset.node, "
            "[...r.querySelectorAll('a[href^=\"/job/\"]')].map((a) => decodeURIComponent(a.getAttribute('href')))]))"
        )
    assert sorted(c["node"] for c in drawn) == sorted(nodes)
    for card in drawn:
        assert "unknown" not in card["text"] and re.search(r"busy\s+\d+%", card["text"]), card
        assert card["straggler"] == (card["node"] == straggler)
        assert ("waits on" in card["text"]) == (card["node"] != straggler), card
    assert {n: links[n] for n in nodes} == {n: [f"/job/{JOB}"] for n in nodes}


def test_a_job_whose_agents_all_stop_ends_at_once_and_its_alert_resolves(fleet: Fleet) -> None:
    window = DetectorConfig().window_seconds
    for agent in fleet.agents:
        agent.kill(signal.SIGTERM)  # a clean stop: each says a stopping goodbye
    stopped = time.monotonic()

    def ended() -> bool:
        gone = all(j["job"] != JOB for j in fleet.page("/api/jobs")["jobs"])
        alerts = fleet.straggler_alerts()
        return gone and bool(alerts) and all(a["state"] == "resolved" for a in alerts)

    # Time alone would end it a window after the last report: the goodbyes end it well before.
    assert wait_for(ended, timeout=window / 2, interval=0.5), (fleet.page("/api/jobs"), fleet.straggler_alerts())
    print(f"the job ended and its JobStraggler resolved {time.monotonic() - stopped:.1f} s after the agents stopped")
    rows = {r["node_id"]: r for r in fleet.page("/api/fleet")["nodes"]}
    assert {n: (rows[n]["state"], rows[n]["jobs"]) for n in fleet.nodes} == {n: ("stopped", []) for n in fleet.nodes}
