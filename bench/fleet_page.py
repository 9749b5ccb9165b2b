"""What the fleet page costs to serve with a large fleet: ``/`` and the JSON it fetches.

Starts a real collector server (gRPC off to one side, the HTTP listener on loopback), fills its
memory with N 8-GPU nodes (detectors that saw five simulated minutes of a starved, a healthy, an
idle and a storage-bound node, shared round-robin, each node with a full two-hour in-memory
timeline, the history store off), then
times over HTTP, best of ``--repeat``:

- ``/`` (the page's HTML), ``/api/fleet`` (the rows the page draws, worst first), and
  ``/api/node/NAME`` (a node's detail, timeline and alerts).

With ``--history-minutes M`` it first times what a restart costs before the collector serves:
a database holding N nodes' last M minutes of a UTC day (9 rows a minute each, as 8-GPU nodes
write; at most 1440), read by the one query that starts each node's GPU-hours lost today
(``Store.history.lost_on_last_day``), beside the start-up's existing read of each node's open minute
(``Store.history.seed``) and the whole ``Ingest`` start-up.

    python bench/fleet_page.py [--nodes 1000] [--repeat 5] [--history-minutes 0]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import tempfile
import time
import urllib.request
from pathlib import Path

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.minutes import DAY_SECONDS, MINUTE_SECONDS, NODE_ROW, MinuteRow
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.ingest.node_timeline import MAX_POINTS, POINT_SECONDS
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.database import Store, StoreWriter
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.tools.simulator import Simulation

SCENARIOS = ("ordinary-cloud", "healthy", "idle", "storage-bound")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--history-minutes", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.history_minutes > 0:
            _bench_start_up(Path(tmp) / "history.db", args.nodes, args.history_minutes)
        asyncio.run(_bench(Path(tmp), args.nodes, args.repeat))


def _bench_start_up(path: Path, count: int, minutes: int) -> None:
    # The last minutes of yesterday (UTC), so that they can be a whole day: a collector restarted
    # just before midnight reads that much.
    newest = int(time.time() // DAY_SECONDS) * DAY_SECONDS - MINUTE_SECONDS
    first = max(newest - (min(minutes, 1440) - 1) * MINUTE_SECONDS, newest + MINUTE_SECONDS - DAY_SECONDS)
    store = Store(path)
    values = {"utilization_mean": 0.6, "starvation_ratio": 0.3, "gpu_seconds_lost": 18.0}
    for index in range(count):
        node_id = f"node-{index:05d}"
        batch = HistoryBatch(
            minutes=[
                MinuteRow(node_id, gpu, minute, 60, dict(values), "starved", "network", (), minute + 59.0)
                for minute in range(first, newest + 1, MINUTE_SECONDS)
                for gpu in (NODE_ROW, *range(8))
            ]
        )
        row = NodeRow(node_id=node_id, first_seen=newest, last_seen=newest, gpu_count=8)
        store.write([row], functools.partial(store.history.write, batch))
    store.close()
    label = f"{count} nodes, {count * ((newest - first) // MINUTE_SECONDS + 1) * 9} minute rows of the day"
    writer = StoreWriter(path)
    for name, query in (
        ("lost_on_last_day", writer.store.history.lost_on_last_day),
        ("history_seed", writer.store.history.seed),
    ):
        started = time.perf_counter()
        writer.call_sync(query)
        print(f"{label}  start-up {name:<18} {(time.perf_counter() - started) * 1000:8.1f} ms")
    started = time.perf_counter()
    build_ingest(writer, Alerting(AlertConfig(), []))
    print(f"{label}  start-up Ingest() whole   {(time.perf_counter() - started) * 1000:8.1f} ms")
    writer.close()


async def _bench(tmp: Path, count: int, repeat: int) -> None:
    # Without the history store: the node's timeline is the in-memory one, filled here (the
    # history's own costs are bench/ingest_throughput.py's).
    config = ServerConfig(
        listen="127.0.0.1:0", db_path=tmp / "c.db", http_listen="127.0.0.1:0", history=HistoryConfig(enabled=False)
    )
    server = CollectorServer(config)
    await server.start()
    try:
        now = time.time()
        detectors = [_detector(scenario, now) for scenario in SCENARIOS]
        for index in range(count):
            node_id = f"node-{index:05d}"
            node = NodeState(row=NodeRow(node_id=node_id, first_seen=now, last_seen=now, gpu_count=8))
            node.detector = detectors[index % len(detectors)]
            node.timeline.record(node.detector)
            point = node.timeline.points[-1]
            # A full two hours, one point a minute, as a node that reported all along has.
            node.timeline.points.extend(
                dataclasses.replace(point, time_unix_seconds=now - (MAX_POINTS - step) * POINT_SECONDS)
                for step in range(MAX_POINTS)
            )
            server.ingest.nodes[node_id] = node
        assert server.http is not None
        base = f"http://{server.http.address}"
        for path in ("/", "/api/fleet", "/api/node/node-00000"):
            size, seconds = await asyncio.to_thread(_best, base + path, repeat)
            print(f"{count} nodes  GET {path:<22} {size / 1024:8.1f} KiB  {seconds * 1000:7.1f} ms (best of {repeat})")
    finally:
        await server.stop(0.0)


def _detector(scenario: str, now: float) -> NodeDetector:
    sim = Simulation(scenario, node_id=f"bench-{scenario}", seed=1, start_time=now - 300)
    detector = NodeDetector(sim.node_id, DetectorConfig())
    report = sim.step(0.0)
    report.info.CopyFrom(sim.info())
    detector.observe(report)
    for _ in range(300):
        detector.observe(sim.step(1.0))
    return detector


def _best(url: str, repeat: int) -> tuple[int, float]:
    best, size = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as reply:
            size = len(reply.read())
        best = min(best, time.perf_counter() - started)
    return size, best


if __name__ == "__main__":
    main()
