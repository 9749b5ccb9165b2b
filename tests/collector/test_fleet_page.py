"""The fleet page: its JSON, and the pages themselves in headless Chromium (loopback only)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from nodeagent.collector.fleet_page import FleetPage
from nodeagent.collector.ingest.history import HistoryConfig
from nodeagent.collector.ingest.server import CollectorServer, ServerConfig
from tests.conftest import require
from tests.fakes.fleet import feed_simulated

FLEET = {"web-starved": "ordinary-cloud", "web-healthy": "healthy", "web-idle": "idle"}
SECONDS = 240  # simulated, ending now: the ordinary cloud is starved within the first window


def _chromium(*args: str, profile: Path) -> str:
    # Every name resolves to nothing but 127.0.0.1, and whatever is not loopback goes to a proxy
    # that does not exist: no request leaves the machine (Chromium bypasses proxies for loopback).
    command = [
        "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
        "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
        f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--proxy-server=http://127.0.0.1:9", "--virtual-time-budget=8000", *args,
    ]  # fmt: skip
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout


def _serve(tmp_path: Path, work: Any, history: bool = True) -> Any:
    async def scenario() -> Any:
        server = CollectorServer(
            ServerConfig(
                listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0",
                history=HistoryConfig(enabled=history),
            )
        )  # fmt: skip
        await server.start()
        try:
            feed_simulated(server.ingest, FLEET, SECONDS)
            await server.ingest.flush()
            assert server.http is not None
            return await asyncio.to_thread(work, server, f"http://{server.http.address}")
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def test_fleet_json_sorts_worst_first_and_filters(tmp_path: Path) -> None:
    def work(server: CollectorServer, base: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{base}/api/fleet", timeout=10) as reply:
            everything = json.loads(reply.read())
        with urllib.request.urlopen(f"{base}/api/fleet?state=starved&cause=network", timeout=10) as reply:
            starved = json.loads(reply.read())
        node = FleetPage(server).node("web-starved")
        return {"all": everything, "starved": starved, "node": node}

    seen = _serve(tmp_path, work)
    nodes = seen["all"]["nodes"]
    assert nodes[0]["node_id"] == "web-starved"
    assert nodes[0]["state"] == "starved" and nodes[0]["cause"] == "network"
    assert nodes[0]["gpu_hours_lost_today"] > 0
    assert {n["node_id"]: n["state"] for n in nodes}["web-idle"] == "idle"
    assert [n["node_id"] for n in seen["starved"]["nodes"]] == ["web-starved"]
    assert "cause network: eth0 receives" in seen["node"]["sentence"]
    # The timeline is the history's minutes of the node (four minutes of reports, and the open one).
    assert seen["node"]["timeline_source"] == "history"
    timeline = seen["node"]["timeline"]
    assert len(timeline) >= 3
    assert timeline[-1]["state"] == "starved" and 0.25 < timeline[-1]["starvation_ratio"] < 0.45
    assert timeline[-1]["network_rx_bytes_per_second"] > 1e9


def test_without_a_history_the_timeline_is_the_collectors_memory(tmp_path: Path) -> None:
    node = _serve(tmp_path, lambda server, _base: FleetPage(server).node("web-starved"), history=False)
    assert node["timeline_source"] == "memory"
    assert len(node["timeline"]) >= 3  # one point a minute of reports
    assert node["timeline"][-1]["state"] == "starved"


def test_pages_in_headless_chromium(tmp_path: Path) -> None:
    require(shutil.which("chromium") is not None, "needs chromium (Debian package; `make system-deps`)")
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def work(_server: CollectorServer, base: str) -> dict[str, str]:
        out = {}
        for name, path in (("fleet", "/"), ("node", "/node/web-starved"), ("alerts", "/alerts")):
            out[name] = _chromium("--dump-dom", base + path, profile=tmp_path / f"profile-{name}")
            _chromium(
                f"--screenshot={shots / f'{name}.png'}", "--window-size=1100,900", base + path,
                profile=tmp_path / f"profile-{name}",
            )  # fmt: skip
        return out

    # What the scripts drew, without the scripts' own text.
    dom = {k: re.sub(r"<script>.*?</script>", "", v, flags=re.DOTALL) for k, v in _serve(tmp_path, work).items()}
    for name in ("fleet", "node", "alerts"):
        print(f"screenshot: {shots / f'{name}.png'}")
        assert (shots / f"{name}.png").stat().st_size > 1000
    rows = re.findall(r'<tr class="node ([a-z]+)" data-node="([^"]+)">(.*?)</tr>', dom["fleet"], re.DOTALL)
    assert rows[0][1] == "web-starved", dom["fleet"][:2000]
    assert rows[0][0] == "starved"
    assert '<td class="cause">network</td>' in rows[0][2]
    assert 'class="gpu starved"' in rows[0][2]  # its GPUs marked in the heatmap
    assert {r[1] for r in rows} == set(FLEET)
    timeline = dom["node"].split('id="timeline"', 1)[1].split("</div></div>", 1)[0]
    assert timeline.count("<circle") >= 3, dom["node"][:3000]
    assert "cause network: eth0 receives" in dom["node"]
    assert "GPUDataStarved" in dom["alerts"]
