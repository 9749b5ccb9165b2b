"""One state per node, the same in `nodes`, on the fleet page, on /metrics and in the history;
the node page of a down node and of a forming verdict; charts with axes; long names.

A collector in this process holds four simulated nodes: one starved, one healthy, one that
stopped reporting minutes ago (its reports ran on a clock that far back) and one without a GPU.
The real command line asks it over gRPC; headless Chromium draws its pages at 1,400 x 900 and the
screenshots are kept (``build/screenshots/fleet/`` and the test's tmp_path), printed by name.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.alerts.node_down import NodeDownWatch
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.ingest.node_state import NodeState, StreamHandle
from nodeagent.collector.ingest.shown_state import node_shown_state
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.collector.views.fleet_page import FleetPage
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.chromium import Browser
from tests.fakes.trees import REPO

STARVED, HEALTHY, DOWN, NO_GPU = "fs-starved", "fs-healthy", "fs-down", "fs-no-gpu"
EXPECTED = {STARVED: "starved", HEALTHY: "busy", DOWN: "down", NO_GPU: "no-gpu"}
SECONDS = 240
DOWN_SINCE_SECONDS = 300.0  # the down node's last report, this long before now
LONG_NODE = "n" * 253  # the longest node id there is (core/wire/identity.py)
LONG_JOB = "j" * 256  # the longest string a report may carry (core/wire/validate.py)
SHOTS = REPO / "build" / "screenshots" / "fleet"
VIEWPORT = (1400, 900)


def _feed(
    server: CollectorServer, node_id: str, scenario: str, *, ago: float = 0.0, gpus: bool = True,
    seconds: int = SECONDS, edit: Callable[[pb.NodeReport, int], None] | None = None, **params: Any,
) -> None:  # fmt: skip
    """``seconds`` of reports a second of one simulated node, the last ``ago`` seconds before now,
    through the collector's own intake; ``ago`` moves its clock back that far meanwhile (the
    collector that heard them then), and the node's stream ends after them."""
    ingest = server.ingest
    clock = ingest.clock
    ingest.clock = lambda: time.time() - ago
    try:
        sim = Simulation(scenario, node_id=node_id, seed=1, start_time=time.time() - ago - seconds, **params)
        info = sim.info()
        if not gpus:
            del info.gpu.gpus[:]
        stream = StreamHandle(node_id, "test")
        ingest.attach(stream, info)
        for seq in range(1, seconds + 1):
            report = sim.step(0.0 if seq == 1 else 1.0)
            report.epoch, report.seq = 1, seq
            if not gpus:
                del report.gpus[:]
            if edit is not None:
                edit(report, seq)
            if seq == 1:
                report.info.CopyFrom(info)
            ingest.accept(stream, report, report.SerializeToString())
        if ago:
            ingest.detach(stream)
    finally:
        ingest.clock = clock


def _serve(tmp_path: Path, work: Callable[[CollectorServer, str], Any], **feeds: dict[str, Any]) -> Any:
    async def scenario() -> Any:
        server = CollectorServer(
            ServerConfig(
                listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0", history=HistoryConfig()
            )
        )
        await server.start()
        try:
            for node_id, feed in feeds.items():
                _feed(server, node_id, **feed)
            await server.ingest.flusher.flush()
            return await asyncio.to_thread(work, server, f"127.0.0.1:{server.port}")
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


FLEET: dict[str, dict[str, Any]] = {
    STARVED: {"scenario": "ordinary-cloud"},
    HEALTHY: {"scenario": "healthy"},
    DOWN: {"scenario": "ordinary-cloud", "ago": DOWN_SINCE_SECONDS},
    NO_GPU: {"scenario": "healthy", "gpus": False},
}


def _collector_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())


def _metric_states(text: str) -> dict[str, str]:
    return dict(re.findall(r'^nodeagent_node_state\{node="([^"]+)",state="([^"]*)"', text, re.MULTILINE))


def test_one_state_per_node_in_nodes_the_page_metrics_and_history(tmp_path: Path) -> None:
    def work(server: CollectorServer, target: str) -> dict[str, Any]:
        assert server.http is not None
        base = f"http://{server.http.address}"
        history = {}
        for node_id in FLEET:
            rows = json.loads(_collector_cli("history", node_id, "--collector", target, "--json", "--since", "10m"))
            history[node_id] = [r["state"] for r in rows if r["gpu"] is None]
        return {
            "nodes": json.loads(_collector_cli("nodes", "--collector", target, "--json")),
            "table": _collector_cli("nodes", "--collector", target),
            "page": json.loads(_get(f"{base}/api/fleet"))["nodes"],
            "metrics": _metric_states(_get(f"{base}/metrics")),
            "history": history,
        }

    seen = _serve(tmp_path, work, **FLEET)
    cli = {row["node_id"]: row["state"] for row in seen["nodes"]}
    page = {row["node_id"]: row["state"] for row in seen["page"]}
    table = {line.split()[0]: line.split()[3] for line in seen["table"].splitlines()[1:] if line.split()[0] in FLEET}
    assert cli == table == page == seen["metrics"] == EXPECTED, seen
    # The down node's row no longer repeats its last verdict as if it were now.
    down = next(row for row in seen["nodes"] if row["node_id"] == DOWN)
    assert down["cause"] is None and down["starvation_ratio"] is None and not down["connected"]
    assert down["gpu_hours_lost_today"] > 0  # what it lost while it reported still counts
    # The history says of a node without a GPU what the views say; of the others, what they were.
    assert set(seen["history"][NO_GPU]) == {"no-gpu"}
    assert seen["history"][STARVED][-1] == "starved" and seen["history"][HEALTHY][-1] == "busy"


def test_a_down_node_says_when_it_was_last_heard_and_that_the_rest_is_its_last_known_state(tmp_path: Path) -> None:
    def work(server: CollectorServer, _target: str) -> dict[str, Any]:
        return FleetPage(server).node(DOWN) or {}

    node = _serve(tmp_path, work, **{DOWN: FLEET[DOWN]})
    assert node["state"] == "down"
    heard = time.strftime("%Y-%m-%d %H:%M", time.gmtime(node["last_seen"]))
    assert node["sentence"].startswith("down: no report for 5 min, last heard " + heard), node["sentence"]
    assert "starved" in node["last_known"]  # its last verdict, kept apart from the sentence about now


def test_a_verdict_still_forming_says_so_in_nodes_and_on_the_page(tmp_path: Path) -> None:
    """40 s into a starved run the detector's window (60 s) is not full: the node reads busy, with
    a ratio of 30-odd percent beside it; both views say that the verdict is still forming."""
    window = DetectorConfig().window_seconds

    def work(server: CollectorServer, target: str) -> tuple[dict[str, Any], str]:
        return FleetPage(server).node(STARVED) or {}, _collector_cli("nodes", "--collector", target)

    node, table = _serve(tmp_path, work, **{STARVED: {**FLEET[STARVED], "seconds": 40}})
    forming = f"verdict still forming: window 39 of {window:.0f} s"
    assert node["forming"] == forming
    assert node["sentence"].endswith(f"({forming})"), node["sentence"]
    assert f"{STARVED}: {forming}" in table.splitlines()


def test_pages_in_chromium_with_axes_units_and_the_same_state_word(tmp_path: Path) -> None:
    """Screenshots of the fleet page and of a starved, a healthy, a down and a no-GPU node's page;
    each page's state word is the one `nodes` shows, and every chart has a y-axis from zero with
    the unit on its ticks."""
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def work(server: CollectorServer, target: str) -> dict[str, Any]:
        assert server.http is not None
        base = f"http://{server.http.address}"
        out: dict[str, Any] = {"nodes": json.loads(_collector_cli("nodes", "--collector", target, "--json"))}
        with Browser(tmp_path / "profile") as browser:
            fleet = browser.open(base + "/", *VIEWPORT)
            fleet.wait_for("document.querySelectorAll('#nodes tr.node').length === 4")
            out["fleet"] = fleet.evaluate(
                "Object.fromEntries([...document.querySelectorAll('#nodes tr.node')].map("
                "(r) => [r.dataset.node, r.querySelector('.badge').textContent]))"
            )
            fleet.screenshot(shots / "fleet.png")
            for node_id in FLEET:
                page = browser.open(f"{base}/node/{node_id}", *VIEWPORT)
                page.wait_for("document.getElementById('sentence')")
                out[node_id] = page.evaluate(
                    "({state: document.querySelector('h1 .badge').textContent,"
                    " why: document.getElementById('why')?.textContent ?? '',"
                    " sentence: document.getElementById('sentence').textContent,"
                    " charts: [...document.querySelectorAll('.series')].map((s) => ({key: s.dataset.key,"
                    "   ticks: [...s.querySelectorAll('text.tick')].map((t) => t.textContent),"
                    "   axes: s.querySelectorAll('line.axis').length}))})"
                )
                page.screenshot(shots / f"node-{node_id}.png")
        return out

    seen = _serve(tmp_path, work, **FLEET)
    _keep(shots)
    cli = {row["node_id"]: row["state"] for row in seen["nodes"]}
    assert seen["fleet"] == cli == EXPECTED
    units = {
        "starvation_ratio": "%", "gpu_busy_ratio": "%", "cpu_busy_ratio": "%",
        "network_rx_bytes_per_second": " Gb/s", "disk_read_bytes_per_second": " MB/s",
    }  # fmt: skip
    for node_id, state in EXPECTED.items():
        page = seen[node_id]
        assert page["state"] == state
        assert page["why"].startswith("Last known state, at ") == (state == "down"), page["why"]
        assert (page["sentence"] == "no GPU here to wait for data") == (state == "no-gpu"), page["sentence"]
        charts = {c["key"]: c for c in page["charts"]}
        assert {"network_rx_bytes_per_second", "cpu_busy_ratio"} <= set(charts), page
        for key, chart in charts.items():
            values, times = chart["ticks"][:3], chart["ticks"][3:]
            assert chart["axes"] == 2, chart
            assert re.fullmatch(r"0(\.0)?" + re.escape(units[key]), values[0]), chart  # the scale starts at zero
            assert all(v.endswith(units[key]) for v in values), chart
            assert len(times) == 2 and all(t.endswith(" UTC") for t in times), chart


def test_a_series_of_zeros_draws_flat_along_the_bottom(tmp_path: Path) -> None:
    """A disk that reads nothing for three minutes and 1.2 kB/s in the fourth (a quiet disk)
    stays on the zero line: the scale has a floor (10 MB/s for disk reads) instead of stretching
    a speck of noise to the top of the chart."""

    def quiet_disk(report: pb.NodeReport, seq: int) -> None:
        for disk in report.disks:
            disk.read_bytes_total = max(0, seq - 180) * 1200

    def work(server: CollectorServer, _target: str) -> Any:
        assert server.http is not None
        with Browser(tmp_path / "profile") as browser:
            page = browser.open(f"http://{server.http.address}/node/{HEALTHY}", *VIEWPORT)
            page.wait_for("document.querySelector('.series[data-key=disk_read_bytes_per_second] polyline')")
            return page.evaluate(
                "document.querySelector('.series[data-key=disk_read_bytes_per_second] polyline').getAttribute('points')"
            )

    points = _serve(tmp_path, work, **{HEALTHY: {**FLEET[HEALTHY], "edit": quiet_disk}})
    ys = [float(xy.split(",")[1]) for xy in points.split()]
    assert len(ys) >= 4, points
    assert max(ys) - min(ys) < 1.0, ys  # flat: 1.2 kB/s on a 10 MB/s scale is under a pixel


def test_long_node_and_job_ids_leave_every_column_on_a_1400_px_page(tmp_path: Path) -> None:
    def work(server: CollectorServer, _target: str) -> dict[str, Any]:
        assert server.http is not None
        base = f"http://{server.http.address}"
        out: dict[str, Any] = {}
        with Browser(tmp_path / "profile") as browser:
            fleet = browser.open(base + "/", *VIEWPORT)
            fleet.wait_for("document.querySelectorAll('#nodes tr.node').length === 2")
            out["fleet"] = fleet.evaluate(
                "[...document.querySelectorAll('#nodes tr.node')].map((r) => ({node: r.dataset.node,"
                " right: Math.max(...[...r.children].map((c) => c.getBoundingClientRect().right)),"
                " titles: [...r.querySelectorAll('[title]')].map((e) => e.title)}))"
            )
            fleet.screenshot(tmp_path / "long-fleet.png")
            page = browser.open(f"{base}/node/{LONG_NODE}", *VIEWPORT)
            page.wait_for("document.querySelectorAll('#node table tr').length > 8")
            out["node"] = page.evaluate(
                "({right: Math.max(...[...document.querySelectorAll('table')].map("
                "   (t) => t.getBoundingClientRect().right)),"
                " width: document.documentElement.scrollWidth,"
                " titles: [...document.querySelectorAll('#node [title]')].map((e) => e.title)})"
            )
            page.screenshot(tmp_path / "long-node.png")
        return out

    seen = _serve(
        tmp_path, work, **{LONG_NODE: {"scenario": "ordinary-cloud", "job_id": LONG_JOB}, HEALTHY: FLEET[HEALTHY]}
    )
    rows = {row["node"]: row for row in seen["fleet"]}
    assert all(row["right"] <= VIEWPORT[0] for row in rows.values()), seen["fleet"]
    assert LONG_NODE in rows[LONG_NODE]["titles"]  # the whole name, on hover
    assert seen["node"]["right"] <= VIEWPORT[0] and seen["node"]["width"] <= VIEWPORT[0], seen["node"]
    assert LONG_JOB in seen["node"]["titles"]


def _keep(shots: Path) -> None:
    """The screenshots where a person finds them after the run (build/ is not tracked)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for shot in sorted(shots.glob("*.png")):
        assert shot.stat().st_size > 10_000, shot
        shutil.copy(shot, SHOTS / shot.name)
        print(f"screenshot: {SHOTS / shot.name}")


def test_a_state_the_detector_adds_passes_through_unchanged() -> None:
    """`waiting` (issue 25) and any later state are the detector's word, in every view; only
    silence (down), no GPU (no-gpu) and no report yet (new) override it."""
    from nodeagent.collector.states.words import shown_state

    assert shown_state("waiting", gpu_count=8) == "waiting"
    assert shown_state("some-later-state", gpu_count=8) == "some-later-state"
    assert shown_state("waiting", gpu_count=8, silent=True) == "down"
    assert shown_state("idle", gpu_count=0) == "no-gpu"
    assert shown_state(None, gpu_count=8, heard=False) == "new"


def test_a_node_without_a_gpu_says_so_not_that_its_verdict_is_forming(tmp_path: Path) -> None:
    """40 s into its run the window is not full, but a node without a GPU has no verdict to form."""

    def work(server: CollectorServer, target: str) -> tuple[dict[str, Any], str]:
        return FleetPage(server).node(NO_GPU) or {}, _collector_cli("nodes", "--collector", target)

    node, table = _serve(tmp_path, work, **{NO_GPU: {**FLEET[NO_GPU], "seconds": 40}})
    assert (node["state"], node["forming"], node["sentence"]) == ("no-gpu", "", "no GPU here to wait for data")
    assert "forming" not in table, table


def test_down_is_one_threshold_node_down_seconds_not_the_detector_window() -> None:
    """`nodes` and the page say `down` exactly when NodeDown fires: after `[alerts]
    node_down_seconds`, whether it is shorter or longer than the detector's 60 s window."""
    node = NodeState(row=NodeRow(node_id="n", last_seen=1000.0, gpu_count=8))
    assert node_shown_state(node, 1000.0 + 100, 300.0) != "down"  # past the window, not the threshold
    assert node_shown_state(node, 1000.0 + 300, 300.0) == "down"
    assert node_shown_state(node, 1000.0 + 10, 10.0) == "down"  # well within the window
    watch = NodeDownWatch(AlertConfig(node_down_seconds=300.0))
    assert not [s for s in watch.check({"n": 1000.0}, 1000.0 + 100) if s.firing]
    assert [s.name for s in watch.check({"n": 1000.0}, 1000.0 + 300) if s.firing] == ["NodeDown"]
