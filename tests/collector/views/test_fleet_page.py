"""The fleet page: its JSON, and the pages themselves in headless Chromium (loopback only)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from nodeagent.collector.config import config_from_mapping
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.views.fleet_page import FleetPage
from nodeagent.core.wire.framing import frame_report
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.conftest import require
from tests.fakes.fleet import Collector, feed_simulated, free_port, processes
from tests.fakes.gpu_reports import ingest_gpu_reports
from tests.fakes.ingest_client import send_messages
from tests.fakes.jobs import FakeRollup, job_verdict

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

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
            await server.ingest.flusher.flush()
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
    # Rates are taken every RATE_EVERY_SECONDS (5 s): an open minute the feed ended a few seconds
    # into has none yet, and the minute before it has its rate.
    rated = [p for p in timeline if p["network_rx_bytes_per_second"] is not None]
    assert rated[-1] in timeline[-2:] and rated[-1]["network_rx_bytes_per_second"] > 1e9


def test_without_a_history_the_timeline_is_the_collectors_memory(tmp_path: Path) -> None:
    def work(server: CollectorServer, _base: str) -> tuple[dict[str, Any], dict[str, Any], float]:
        page = FleetPage(server)
        return page.node("web-starved") or {}, page.fleet(), server.ingest.counting_since

    node, fleet, started = _serve(tmp_path, work, history=False)
    assert node["timeline_source"] == "memory"
    assert len(node["timeline"]) >= 3  # one point a minute of reports
    assert node["timeline"][-1]["state"] == "starved"
    # GPU-hours lost today are what this collector counted since it started, and say so.
    since = time.strftime("%H:%M", time.gmtime(max(started, fleet["time_unix_seconds"] // 86400 * 86400)))
    assert fleet["gpu_hours_lost_today_source"] == node["gpu_hours_lost_today_source"] == f"memory since {since} UTC"


def _starved_reports(node_id: str, count: int) -> list[pb.NodeReport]:
    """``count`` reports a second of a starved 8-GPU node, ending now but never before today's
    midnight UTC (the day's figure is what is under test)."""
    now = time.time()
    start = max(now - count, now // 86400 * 86400)
    sim = Simulation("ordinary-cloud", node_id=node_id, seed=1, start_time=start)
    out = []
    for seq in range(1, count + 1):
        report = sim.step(0.0 if seq == 1 else 1.0)
        report.epoch, report.seq = 1, seq
        out.append(report)
    return out


def _stream(collector: Collector, reports: list[pb.NodeReport]) -> None:
    """One agent stream of ``reports`` (NodeInfo on its first, as an agent's first report after
    it connects): it ends once the collector acknowledged every one, so all are durable."""
    node_id = reports[0].node_id
    info = Simulation("ordinary-cloud", node_id=node_id).info()
    first = pb.NodeReport()
    first.CopyFrom(reports[0])
    first.info.CopyFrom(info)
    hello = pb.AgentMessage(hello=info).SerializeToString()
    frames = [frame_report(r.SerializeToString()) for r in [first, *reports[1:]]]
    with grpc.insecure_channel(collector.address) as channel:
        assert send_messages(channel, [hello, *frames]) == grpc.StatusCode.OK


def _fleet_row(collector: Collector, node_id: str) -> dict[str, Any]:
    """The node's row of ``/api/fleet``, with the figure's source (the fleet's) beside it."""
    with urllib.request.urlopen(f"http://{collector.http_address}/api/fleet", timeout=10) as reply:
        fleet = json.loads(reply.read())
    row = next(n for n in fleet["nodes"] if n["node_id"] == node_id)
    return {**row, "gpu_hours_lost_today_source": fleet["gpu_hours_lost_today_source"]}


def _ledger_hours_lost(base: str, by: str, key: str, since: float) -> float:
    """The ledger's GPU-hours lost (every category) of one row since ``since``, over HTTP."""
    with urllib.request.urlopen(f"{base}/api/ledger?by={by}&since={since:.0f}", timeout=10) as reply:
        rows = json.loads(reply.read())["rows"]
    return sum(sum(r["gpu_hours_lost"].values()) for r in rows if r[by] == key)


def _settled_day_row(collector: Collector, node_id: str) -> tuple[dict[str, Any], float]:
    """The node's fleet row beside the ledger's hours lost of its day, once the store holds what the
    collector counts (its open minute is written when the node goes quiet)."""
    midnight = time.time() // 86400 * 86400
    base = f"http://{collector.http_address}"
    end = time.monotonic() + 30
    while True:
        row = _fleet_row(collector, node_id)
        stored = _ledger_hours_lost(base, "node", node_id, midnight)
        if abs(row["gpu_hours_lost_today"] - stored) < 0.001 or time.monotonic() > end:
            return row, stored
        time.sleep(0.2)


def test_gpu_hours_lost_today_survive_a_collector_restart(tmp_path: Path) -> None:
    """Restarted on the same database, the collector starts each node's day from its history:
    the day's figure is the ledger's split of the day's stored minutes, before the restart, just
    after it, and once more reports came (nothing counted twice, nothing dropped)."""
    node_id = "restart-starved"
    day = time.time() // 86400
    reports = _starved_reports(node_id, 300)
    before_part, after_part = reports[:180], reports[180:]
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        _stream(collector, before_part)
        before, before_stored = _settled_day_row(collector, node_id)
        collector.kill(signal.SIGTERM)  # a restart, an upgrade: the collector stops, then starts again
        collector.start()
        restarted = _fleet_row(collector, node_id)
        _stream(collector, after_part)
        after, after_stored = _settled_day_row(collector, node_id)
    if time.time() // 86400 != day:
        pytest.skip("the UTC day changed while the test ran: the day's figure started again at midnight")
    rounding = 0.001  # the JSON's 3 decimals
    assert before["gpu_hours_lost_today"] > 0.05
    assert before["gpu_hours_lost_today"] == pytest.approx(before_stored, abs=rounding)
    # A stop writes the open minute whole: the restarted figure is what the store holds.
    assert restarted["gpu_hours_lost_today"] == pytest.approx(before_stored, abs=rounding)
    assert after["gpu_hours_lost_today"] == pytest.approx(after_stored, abs=rounding)
    assert after["gpu_hours_lost_today"] > before["gpu_hours_lost_today"] + 0.05  # 120 s more of 8 starved GPUs
    assert before["gpu_hours_lost_today_source"] == after["gpu_hours_lost_today_source"] == "history"


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
    # Each GPU's square is coloured by its verdict, as the legend says: the starved node's all
    # starved, the healthy one's busy, whatever NVML's busy share.
    assert 'class="gpu starved"' in rows[0][2]  # its GPUs marked in the heatmap
    legend = dict(re.findall(r'<span class="legend" data-state="([a-z-]+)"><svg[^>]*><rect[^>]*fill="(#[0-9a-f]+)"',
                             dom["fleet"]))  # fmt: skip
    assert {"busy", "starved", "waiting", "idle"} <= set(legend) and len(set(legend.values())) == len(legend)
    for state, node in (("starved", "web-starved"), ("busy", "web-healthy")):
        squares = re.findall(r'<rect class="gpu ([a-z]+)" data-state="[a-z]+"[^>]*fill="(#[0-9a-f]+)"',
                             {r[1]: r[2] for r in rows}[node])  # fmt: skip
        assert squares and set(squares) == {(state, legend[state])}, squares
    assert {r[1] for r in rows} == set(FLEET)
    # The line at the top: the fleet's GPUs, the share of held GPU time lost today, the job that
    # loses most; no money without [prices].
    top = dom["fleet"].split('<p id="today" class="today">', 1)[1].split("</p>", 1)[0]
    assert top.startswith('Fleet: 24 GPUs on 3 nodes · lost today: <b id="lost-share">'), top
    assert "of the GPU time jobs held" in top and 'loses most: <a class="job"' in top
    assert 'id="lost-cost"' not in top
    timeline = dom["node"].split('id="timeline"', 1)[1].split("</div></div>", 1)[0]
    assert timeline.count("<circle") >= 3, dom["node"][:3000]
    assert "cause network: eth0 receives" in dom["node"]
    assert "GPUDataStarved" in dom["alerts"]


# A 3-node job: web-starved holds it back (network), the two others wait on it.
JOB_FLEET = {"job-a": "healthy", "job-straggler": "ordinary-cloud", "job-c": "healthy", "lonely": "healthy"}
JOB = "torch/10.0.0.1:29500"


def _serve_job(tmp_path: Path, work: Any) -> Any:
    """A collector with the 3-node job and a node outside it; the roll-up's verdict given (the
    fake's), the waiting nodes' own verdicts saying whom they wait on, its JobStraggler firing."""

    async def scenario() -> Any:
        # Priced: the line at the top of / says what the day's loss cost.
        settings = config_from_mapping({"prices": {"currency": "USD", "default_per_gpu_hour": 2.0}}, "test.toml")
        server = CollectorServer(
            ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0", settings=settings)
        )
        await server.start()
        try:
            feed_simulated(server.ingest, JOB_FLEET, 120)
            verdict = job_verdict(JOB, nodes=("job-a", "job-straggler", "job-c"), straggler_nodes=("job-straggler",))
            rollup = FakeRollup((verdict,))
            server.ingest.jobs = rollup
            for node_id in ("job-a", "job-c"):
                detector = server.ingest.nodes[node_id].detector
                assert detector is not None
                # As the roll-up's wait makes them (core/detector/waiting.py): each GPU waiting, though
                # NVML reads it busy (it spins in the collective).
                gpus = tuple(replace(g, state="waiting", cause=None) for g in detector.verdict.gpus)
                detector._verdict = replace(
                    detector.verdict, state="waiting", waiting_on=("job-straggler",), waiting_job=JOB, gpus=gpus
                )
            # job-c's report says the job uses its GPUs 0-3 only (the other four are another job's).
            node_c = server.ingest.nodes["job-c"]
            assert node_c.latest is not None
            latest = pb.NodeReport.FromString(node_c.latest)
            latest.jobs.add(job=JOB, source="torch", world_size=24, ranks=[16, 17, 18, 19], gpus=[0, 1, 2, 3])
            node_c.latest = latest.SerializeToString()
            server.alerting.add(rollup.signals())
            await server.ingest.flusher.flush()
            assert server.http is not None
            return await asyncio.to_thread(work, server, f"http://{server.http.address}")
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def test_job_json_puts_its_nodes_side_by_side_and_marks_the_straggler(tmp_path: Path) -> None:
    def work(_server: CollectorServer, base: str) -> dict[str, Any]:
        out = {}
        for name, path in (
            ("jobs", "/api/jobs"), ("job", "/api/job/" + urllib.parse.quote(JOB, safe="")), ("raw", f"/api/job/{JOB}"),
            ("fleet", "/api/fleet"), ("node", "/api/node/job-a"), ("straggler", "/api/node/job-straggler"),
        ):  # fmt: skip
            with urllib.request.urlopen(base + path, timeout=10) as reply:
                out[name] = json.loads(reply.read())
        with urllib.request.urlopen(base + "/metrics", timeout=10) as reply:
            out["metrics"] = reply.read().decode()
        try:
            urllib.request.urlopen(base + "/api/job/nosuch", timeout=10)
        except urllib.error.HTTPError as err:
            out["missing"] = err.code
        return out

    seen = _serve_job(tmp_path, work)
    (listed,) = seen["jobs"]["jobs"]
    assert listed["job"] == JOB and listed["state"] == "slowed" and listed["straggler_nodes"] == ["job-straggler"]
    job = seen["job"]
    assert seen["raw"] == job  # the name's "/" need not be escaped in the path
    assert job["wait_ratio"] == 0.53 and job["cause"] == "network" and job["evidence"]["network_link"] == "eth0"
    assert "wait 53% of their time for job-straggler — cause network" in job["sentence"]
    details = {n["node_id"]: n for n in job["node_details"]}
    assert list(details) == ["job-a", "job-straggler", "job-c"]
    assert [n for n, d in details.items() if d["straggler"]] == ["job-straggler"]
    straggler, waiting = details["job-straggler"], details["job-a"]
    assert straggler["state"] == "starved" and straggler["cause"] == "network"
    assert 0.25 < straggler["starvation_ratio"] < 0.45 and straggler["busy_ratio"] < 0.75
    assert "eth0 receives" in straggler["highway"] and "cause network" in straggler["sentence"]
    assert waiting["state"] == "waiting" and waiting["waiting_on"] == ["job-straggler"]
    assert waiting["busy_ratio"] > 0.8 and waiting["gpu_count"] == 8
    # On job-c only the job's own GPUs, as its report says.
    assert details["job-c"]["gpu_count"] == 4 and [g["index"] for g in details["job-c"]["gpus"]] == [0, 1, 2, 3]
    assert [a["name"] for a in job["alerts"]] == ["JobStraggler"]
    assert seen["missing"] == 404
    # The fleet links each node to its job; a waiting node says whom it waits on.
    rows = {n["node_id"]: n for n in seen["fleet"]["nodes"]}
    assert rows["job-a"]["jobs"] == [JOB] and rows["lonely"]["jobs"] == []
    assert rows["job-a"]["state"] == "waiting" and rows["job-a"]["waiting_on"] == ["job-straggler"]
    assert [n["node_id"] for n in seen["fleet"]["nodes"]][:3] == ["job-straggler", "job-a", "job-c"]  # worst first
    assert seen["node"]["waiting_job"] == JOB and seen["node"]["jobs"] == [JOB]
    # The job's alert is the straggler's too: on its page and on /metrics under its name.
    assert "JobStraggler" in {a["name"] for a in seen["straggler"]["alerts"]}
    assert "JobStraggler" not in {a["name"] for a in seen["node"]["alerts"]}
    firing = 'nodeagent_alerts_firing{alertname="JobStraggler",node="job-straggler",severity="warning",subject="'
    assert firing + JOB + '"} 1.0' in seen["metrics"]
    assert f'nodeagent_job_straggler{{job_name="{JOB}",node="job-straggler",cause="network"}} 1.0' in seen["metrics"]


def test_job_pages_in_headless_chromium(tmp_path: Path) -> None:
    require(shutil.which("chromium") is not None, "needs chromium (Debian package; `make system-deps`)")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    pages = (("jobs", "/jobs"), ("job", "/job/" + urllib.parse.quote(JOB, safe="")), ("fleet", "/"),
             ("alerts", "/alerts"))  # fmt: skip

    def work(_server: CollectorServer, base: str) -> dict[str, str]:
        out = {}
        for name, path in pages:
            out[name] = _chromium("--dump-dom", base + path, profile=tmp_path / f"profile-{name}")
        _chromium(f"--screenshot={shots / 'job.png'}", "--window-size=1100,900", base + pages[1][1],
                  profile=tmp_path / "profile-job")  # fmt: skip
        return out

    dom = {k: re.sub(r"<script>.*?</script>", "", v, flags=re.DOTALL) for k, v in _serve_job(tmp_path, work).items()}
    print(f"screenshot: {shots / 'job.png'}")
    assert (shots / "job.png").stat().st_size > 1000
    link = f'href="/job/{urllib.parse.quote(JOB, safe="")}"'
    (row,) = re.findall(r'<tr class="job ([a-z]+)" data-job="([^"]+)">(.*?)</tr>', dom["jobs"], re.DOTALL)
    assert row[:2] == ("slowed", JOB) and link in row[2], dom["jobs"][:2000]
    assert '<td class="straggler"><a href="/node/job-straggler">job-straggler</a></td>' in row[2]
    assert '<td class="cause">network</td>' in row[2] and "53%" in row[2]
    # The job's page: the sentence, its three nodes side by side, the straggler's card marked.
    job = dom["job"]
    assert "wait 53% of their time for job-straggler" in job
    cards = re.findall(r'<div class="card( straggler)?" data-node="([^"]+)">', job)
    assert cards == [("", "job-a"), (" straggler", "job-straggler"), ("", "job-c")], job[:3000]
    each_card = r'<div class="card(?: straggler)?" data-node="([^"]+)">(.*?)(?=<div class="card[ "]|</div><h2>)'
    card = dict(re.findall(each_card, job, re.DOTALL))
    straggler_card = card["job-straggler"]
    assert '<span class="badge straggler">straggler</span>' in straggler_card and "eth0 receives" in straggler_card
    waiting_card = card["job-a"]
    assert 'badge waiting">waiting' in waiting_card and "waits on" in waiting_card
    # The waiting nodes' GPUs are drawn waiting (the legend's colour), not busy green.
    assert 'class="gpu waiting"' in waiting_card and 'class="gpu busy"' not in waiting_card
    # The evidence in words with units, each raw key on hover.
    evidence = job.split('id="evidence"', 1)[1].split("</ul>", 1)[0]
    said = dict(re.findall(r'<li title="([a-z_]+)">([^<]*)</li>', evidence))
    assert said == {
        "network_link": "network link eth0",
        "network_rx_link_ratio": "network receive, of its link's speed 97%",
        "network_rx_link_ratio_score": "network receive, of its link's speed: modified z-score 6.1",
    }, evidence
    assert "JobStraggler" in job
    # Its own ledger under it (the script reads /api/ledger?job=...): what the history holds of it.
    ledger = job.split('<div id="job-ledger">', 1)[1]
    assert f'href="/ledger?job={urllib.parse.quote(JOB, safe="")}"' in ledger
    # The fleet table links the job's nodes to it, and only those.
    fleet_rows = dict(re.findall(r'<tr class="node [a-z]+" data-node="([^"]+)">(.*?)</tr>', dom["fleet"], re.DOTALL))
    assert all(link in fleet_rows[n] for n in ("job-a", "job-straggler", "job-c")) and link not in fleet_rows["lonely"]
    assert "waits on" in fleet_rows["job-a"]
    top = dom["fleet"].split('<p id="today" class="today">', 1)[1].split("</p>", 1)[0]
    assert re.search(r'<span id="lost-cost">\d+\.\d\d USD lost</span>', top), top
    # The alerts page: the job's alert names its straggler and links its job.
    alert = next(
        r for r in re.findall(r"<tr class=\"firing\">(.*?)</tr>", dom["alerts"], re.DOTALL) if "JobStraggler" in r
    )
    assert '<a href="/node/job-straggler">job-straggler</a>' in alert and link in alert


def test_a_mig_split_gpu_shows_its_instances_under_it(tmp_path: Path, fake_nvml: Any, make_gpu_source: Any) -> None:
    """A node's reports from the agent over the fake NVML, GPU 0 split into three instances held
    by three pods: the fleet row and the node page carry each instance under its GPU."""
    from tests.agent.gpu.test_gpu_mig import pod_tree, split
    from tests.fakes.nvml.state import h100_sxm5

    state = fake_nvml.load(h100_sxm5(2))
    for i, g in enumerate(state.gpus):
        g.util_gpu, g.gpm_sm_active, g.mem_used, g.procs = 100, 85.0, 60 << 30, {9000 + i: 60 << 30}
    split(state)
    state.gpus[0].mig[1].gpm_sm_active = 20.0
    fake_nvml.write()
    gpu_source = make_gpu_source(pod_tree(tmp_path / "proc"))
    info = pb.NodeInfo(node_id="mig-node", hostname="mig-node")
    gpu_source.scan(info)

    async def scenario() -> Any:
        server = CollectorServer(
            ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0")
        )
        await server.start()
        try:
            await ingest_gpu_reports(server, info, gpu_source, fake_nvml, state, 150)
            page = FleetPage(server)
            dom = ""
            if shutil.which("chromium") is not None and server.http is not None:
                url = f"http://{server.http.address}/node/mig-node"
                dom = await asyncio.to_thread(_chromium, "--dump-dom", url, profile=tmp_path / "profile-mig")
            return page.fleet(), page.node("mig-node"), dom
        finally:
            await server.stop(0.0)

    fleet, node, dom = asyncio.run(scenario())
    require(bool(dom), "needs chromium (Debian package; `make system-deps`) for the page itself")
    if dom:  # the node page draws each instance as a row under its GPU
        rows = re.findall(r'<tr class="mig"><td>(.*?)</td><td><span class="badge ([a-z]+)"', dom)
        assert rows == [("└ 3g.40gb gi1", "busy"), ("└ 2g.20gb gi2", "starved"), ("└ 1g.10gb gi5", "busy")], dom[:3000]
    (row,) = [n for n in fleet["nodes"] if n["node_id"] == "mig-node"]
    assert [(i["gpu_instance_id"], i["mig_profile"], i["state"]) for i in row["gpus"][0]["instances"]] == [
        (1, "3g.40gb", "busy"), (2, "2g.20gb", "starved"), (5, "1g.10gb", "busy"),
    ]  # fmt: skip
    assert "instances" not in row["gpus"][1]
    gpus = node["verdict"]["gpus"]
    assert [i["state"] for i in gpus[0]["instances"]] == ["busy", "starved", "busy"]
    assert gpus[0]["state"] == "starved" and gpus[1]["state"] == "busy"


def test_each_page_is_served_under_a_policy_that_allows_its_own_script_and_style_only(tmp_path: Path) -> None:
    """The policy's hashes are those of the page's one inline script and one inline style (a
    browser runs nothing else), no element carries a style attribute (refused under it), and the
    JSON and /metrics are served with the default that runs nothing; no page may be framed."""

    def work(_server: CollectorServer, base: str) -> dict[str, tuple[dict[str, str], str]]:
        out = {}
        for path in ("/", "/node/web-starved", "/jobs", "/alerts", "/api/fleet", "/metrics"):
            with urllib.request.urlopen(base + path, timeout=30) as reply:
                out[path] = (dict(reply.headers.items()), reply.read().decode())
        return out

    for path, (headers, body) in _serve(tmp_path, work).items():
        assert headers["X-Content-Type-Options"] == "nosniff", path
        policy = headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy, path
        if not headers["Content-Type"].startswith("text/html"):
            assert "script-src" not in policy, path
            continue
        script = re.search(r"<script>(.*?)</script>", body, re.DOTALL)
        style = re.search(r"<style>(.*?)</style>", body, re.DOTALL)
        assert script is not None and style is not None
        for directive, text in (("script-src", script.group(1)), ("style-src", style.group(1))):
            digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
            assert f"{directive} 'sha256-{digest}'" in policy, path
        assert " style=" not in body and "style='" not in body, path
