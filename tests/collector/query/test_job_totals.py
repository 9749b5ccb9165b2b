"""`nodeagent-collector jobs` counts the seconds a job held its GPUs, not the minutes it touched:
a 5-minute job on 8 GPUs that straddles six minutes is 0.67 GPU-hours, not 0.80, and what it
lost is the ledger's split of that time: the ledger's own hours lost, by category, near the
simulation's truth. A history stored before the seconds were counted still answers (its minutes
count whole, as they did)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.tools.simulator import Simulation
from tests.fakes.fleet import cli

JOB = "job-5min"
GPUS = 8
HELD_SECONDS = 300  # five minutes of reports a second: 301 reports, each standing for the second before it


def _job_run(tmp_path: Path, *, feed: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The job's totals as `jobs --json` prints them, and beside them the job's ledger row and
    the simulation's truth, the mean share its GPUs waited (the job's reports fed first unless
    ``feed`` is false)."""

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        server = CollectorServer(ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db"))
        await server.start()
        try:
            if not feed:
                target = f"127.0.0.1:{server.port}"
                out = await asyncio.to_thread(cli, "collector", "jobs", "--collector", target, "--json")
                return json.loads(out), {}
            # Half a minute into a minute, so that the five minutes touch six minute rows.
            start = (time.time() - 3600) // 60 * 60 + 30
            sim = Simulation("ordinary-cloud", node_id="job-node", seed=1, start_time=start, job_id=JOB)
            stream = StreamHandle("job-node", "test")
            server.ingest.attach(stream, sim.info())
            truth = []
            for seq in range(1, HELD_SECONDS + 2):
                report = sim.step(0.0 if seq == 1 else 1.0)
                report.epoch, report.seq = 1, seq
                if seq == 1:
                    report.info.CopyFrom(sim.info())
                server.ingest.accept(stream, report, report.SerializeToString())
                truth.append(sim.truth().starvation_ratio + sim.truth().interconnect_ratio)
            await server.ingest.flusher.flush(final=True)
            target = f"127.0.0.1:{server.port}"
            out = await asyncio.to_thread(cli, "collector", "jobs", "--collector", target, "--json", "--since", "2h")
            ledger = await asyncio.to_thread(
                cli, "collector", "ledger", "--collector", target, "--json", "--since", "2h"
            )
            [row] = [r for r in json.loads(ledger) if r["job"] == JOB]
            return json.loads(out), {"ledger": row, "truth": sum(truth) / len(truth)}
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def test_a_five_minute_eight_gpu_job_is_two_thirds_of_a_gpu_hour(tmp_path: Path) -> None:
    jobs, beside = _job_run(tmp_path)
    [job] = [j["history"] for j in jobs if j["job"] == JOB]
    assert job["gpu_hours"] == pytest.approx(GPUS * HELD_SECONDS / 3600, rel=0.01)  # 0.667, not 0.800
    # What it lost is the ledger's split: the same hours, the same categories.
    ledger = beside["ledger"]
    assert job["gpu_hours"] == pytest.approx(ledger["gpu_hours_held"])
    assert job["gpu_hours_lost_by_cause"] == pytest.approx({c: h for c, h in ledger["gpu_hours_lost"].items() if h})
    assert job["gpu_hours_lost"] == pytest.approx(sum(ledger["gpu_hours_lost"].values()))
    # ... and the share lost is the time its GPUs waited (for data, for the all-reduce), within 0.05.
    assert job["gpu_hours_lost"] / job["gpu_hours"] == pytest.approx(beside["truth"], abs=0.05)


def test_a_history_from_before_the_seconds_were_counted_still_answers(tmp_path: Path) -> None:
    """Its minute rows lack held_seconds: the column is added at start, and they count whole."""
    _job_run(tmp_path)
    with sqlite3.connect(tmp_path / "c.db") as conn:  # the rows as an older collector wrote them
        conn.execute("ALTER TABLE history_minutes DROP COLUMN held_seconds")
    jobs, _ = _job_run(tmp_path, feed=False)
    [job] = [j["history"] for j in jobs if j["job"] == JOB]
    assert job["gpu_hours"] == pytest.approx(GPUS * 6 / 60)  # six whole minutes per GPU, as it was
