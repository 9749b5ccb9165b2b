"""One figure for GPU-hours lost (issue 48, item 4): the ledger's split. Over one store, a node
reads the same GPU-hours lost today in `nodes` (table and JSON), on the fleet page and in
`ledger --by node`, and a job the same GPU-hours lost in `jobs` (table and JSON), on `/jobs`
and in `ledger --by job`; `/metrics`' split counters and the job roll-up's live count are that
split too, behind it by at most the seconds a later verdict may still judge."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.tools.simulator import Simulation
from tests.conftest import require
from tests.fakes.fleet import cli

JOB = "torch/figures-3node"
# Two nodes keep up; the third, on the slow cloud, holds the job back (the others wait on it).
NODES = {"fig-0": "fast-cloud", "fig-1": "fast-cloud", "fig-2": "ordinary-cloud"}
SECONDS = 240
GPUS = 8


def _feed(server: CollectorServer) -> None:
    """``SECONDS`` of reports a second of the job's three nodes, ending now (never before midnight UTC)."""
    now = time.time()
    start = max(now - SECONDS, now // 86400 * 86400 + 1)
    sims = [
        Simulation(scenario, node_id=node, seed=1, start_time=start, job_key=JOB, job_nodes=len(NODES), job_node_rank=r)
        for r, (node, scenario) in enumerate(NODES.items())
    ]
    streams = [StreamHandle(sim.node_id, "test") for sim in sims]
    for sim, stream in zip(sims, streams, strict=True):
        server.ingest.attach(stream, sim.info())
    for seq in range(1, int(now - start) + 1):
        for sim, stream in zip(sims, streams, strict=True):
            report = sim.step(0.0 if seq == 1 else 1.0)
            report.epoch, report.seq = 1, seq
            if seq == 1:
                report.info.CopyFrom(sim.info())
            server.ingest.accept(stream, report, report.SerializeToString())


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = reply.read().decode()
    return json.loads(body) if "/api/" in url else body


def _lost(row: dict[str, Any]) -> float:
    return float(sum(row["gpu_hours_lost"].values()))


def _surfaces(server: CollectorServer, base: str, tmp_path: Path) -> dict[str, Any]:
    target = f"127.0.0.1:{server.port}"
    midnight = time.time() // 86400 * 86400
    out: dict[str, Any] = {
        "page": {n["node_id"]: n["gpu_hours_lost_today"] for n in _get(f"{base}/api/fleet")["nodes"]},
        "nodes_json": {
            r["node_id"]: r["gpu_hours_lost_today"]
            for r in json.loads(cli("collector", "nodes", "--collector", target, "--json"))
        },
        "nodes_table": cli("collector", "nodes", "--collector", target),
        "ledger_nodes": {
            r["node"]: _lost(r)
            for r in json.loads(
                cli(
                    "collector", "ledger", "--collector", target, "--json", "--by", "node", "--since", f"{midnight:.0f}"
                )
            )
        },
        "page_ledger_nodes": {
            r["node"]: _lost(r) for r in _get(f"{base}/api/ledger?by=node&since={midnight:.0f}")["rows"]
        },
        "jobs_json": {r["job"]: r for r in json.loads(cli("collector", "jobs", "--collector", target, "--json"))},
        "jobs_table": cli("collector", "jobs", "--collector", target),
        "ledger_jobs": {
            r["job"]: _lost(r)
            for r in json.loads(cli("collector", "ledger", "--collector", target, "--json", "--since", "24h"))
        },
        "metrics": _get(f"{base}/metrics"),
    }
    if shutil.which("chromium") is not None:
        from tests.collector.views.test_fleet_page import _chromium

        out["jobs_page"] = _chromium("--dump-dom", f"{base}/jobs", profile=tmp_path / "profile-jobs")
    return out


def _run(tmp_path: Path) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        server = CollectorServer(
            ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0")
        )
        await server.start()
        try:
            _feed(server)
            await server.ingest.flusher.flush(final=True)  # the open minutes written: the store holds what is counted
            assert server.http is not None
            return await asyncio.to_thread(_surfaces, server, f"http://{server.http.address}", tmp_path)
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def _metric_lost(metrics: str, label: str, value: str) -> float:
    """The split's GPU-hours lost in ``nodeagent_gpu_seconds_total`` of the series with ``label=value``."""
    total = 0.0
    for line in metrics.splitlines():
        series = line.startswith("nodeagent_gpu_seconds_total{") and f'{label}="{value}"' in line
        if series and 'category="computing"' not in line:
            total += float(line.rsplit(" ", 1)[1])
    return total / 3600


def test_a_node_and_a_job_read_the_same_gpu_hours_lost_on_every_surface(tmp_path: Path) -> None:
    day = time.time() // 86400
    seen = _run(tmp_path)
    if time.time() // 86400 != day:
        pytest.skip("midnight UTC passed while the test ran: the day's figure started again")
    # What a later verdict may still judge (the detector's window on each GPU): what the
    # counters and the roll-up hold back until it is judged.
    forming = DetectorConfig().window_seconds * GPUS / 3600
    for node in NODES:
        stored = seen["ledger_nodes"][node]
        assert stored > 0.01, (node, stored)
        assert seen["page_ledger_nodes"][node] == pytest.approx(stored, abs=1e-9)
        assert seen["page"][node] == pytest.approx(stored, abs=0.0005)  # the page's 3 decimals
        assert seen["nodes_json"][node] == pytest.approx(stored, abs=1e-6)
        header, *rows = seen["nodes_table"].splitlines()
        row = next(line for line in rows if line.startswith(node + " "))
        end = header.index("LOST TODAY") + len("LOST TODAY")
        assert row[end - 10 : end].strip() == f"{stored:.2f}", row
        counted = _metric_lost(seen["metrics"], "node", node)
        assert stored - forming <= counted <= stored + 1e-6, (node, counted, stored)
    # The job: `jobs` (its history's total, table and JSON), `ledger --by job`, /jobs.
    stored = seen["ledger_jobs"][JOB]
    assert stored == pytest.approx(sum(seen["ledger_nodes"].values()), abs=1e-6)  # the job is all of its nodes
    job = seen["jobs_json"][JOB]
    assert job["history"]["gpu_hours_lost"] == pytest.approx(stored, abs=1e-6)
    row = next(line for line in seen["jobs_table"].splitlines() if line.startswith(JOB))
    assert f" {stored:.2f} " in row, row
    # The roll-up's live count (the JobStraggler alert's, nodeagent_job_gpu_seconds_lost_total's)
    # is the same split of the job's GPUs since it followed the job: behind, never ahead.
    assert stored - 2 * forming * len(NODES) <= job["gpu_hours_lost"] <= stored + 1e-6, (job["gpu_hours_lost"], stored)
    require("jobs_page" in seen, "needs chromium (Debian package; `make system-deps`) for /jobs itself")
    (cell,) = re.findall(
        rf'<tr class="job [a-z]+" data-job="{re.escape(JOB)}">.*?<td class="lost">([^<]*)</td>', seen["jobs_page"]
    )
    assert cell == f"{stored:.2f}", cell
