"""The whole path, live: a simulated node starved of network data streams to a collector, the
detector flags it, and ``GPUDataStarved`` shows up in a real Alertmanager with node, GPUs,
cause and severity; when the node turns healthy, the alert resolves there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.alertmanager import alerts, wait
from tests.fakes.fleet import Agent, Collector, free_port, processes

NODE = "starved-node"


def _agent(collector: Collector, scenario: str) -> Agent:
    return Agent(
        ["--collector", collector.address, "--node-id", NODE, "--simulate", scenario, "--time-scale", "20",
         "--interval", "0.05", "--deadline", "60"]
    )  # fmt: skip


def _starved(url: str) -> list[dict[str, Any]]:
    return [a for a in alerts(url) if a["labels"].get("alertname") == "GPUDataStarved"]


def test_starved_node_alerts_in_alertmanager_and_resolves(tmp_path: Path, alertmanager: str) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port(), args=["--alertmanager-url", alertmanager])
    with processes() as started:
        started.append(collector.start())
        starving = _agent(collector, "ordinary-cloud").start(tmp_path / "starving.log")
        started.append(starving)
        fired = wait(lambda: _starved(alertmanager), 40, f"no GPUDataStarved in Alertmanager; {starving.tail()}")
        starving.kill()
        healthy = _agent(collector, "fast-cloud").start(tmp_path / "healthy.log")
        started.append(healthy)
        wait(lambda: not _starved(alertmanager), 40, "GPUDataStarved did not resolve in Alertmanager")
        listed = collector.node(NODE)
    labels = fired[0]["labels"]
    assert (labels["node"], labels["cause"], labels["severity"], labels["gpus"]) == (
        NODE, "network", "critical", "0,1,2,3,4,5,6,7",
    )  # fmt: skip
    assert 0.25 < float(fired[0]["annotations"]["starvation_ratio"]) < 0.45
    assert listed["state"] != "starved"
