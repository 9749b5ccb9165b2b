"""What one view across collectors costs: the fleet page's ``/api/fleet`` and ``StreamNodes``
merged over K collectors, beside one collector's own, and with a peer that never answers.

Starts K real collector servers in this process (gRPC and HTTP on loopback), each holding
N/K 8-GPU nodes (the detectors of ``bench/fleet_page.py``: five simulated minutes of a
starved, a healthy, an idle and a storage-bound node, round-robin; no history store), the first
one with ``[fleet] collectors`` listing them all. Then, best of ``--repeat``:

- ``GET /api/fleet`` of one collector alone (its N/K nodes), and of the first, merged (N nodes);
- ``StreamNodes`` of one collector, and of all K at once merged page by page (``merged_pages``,
  as ``nodeagent-collector nodes --collector ... --collector ...`` does);
- the merged ``/api/fleet`` again with one more peer in ``[fleet]`` that accepts connections and
  never answers: bounded by ``[fleet] timeout_seconds``.

    python bench/fleet_merge.py [--nodes 3000] [--collectors 3] [--repeat 5] [--timeout 2]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import tempfile
import time
import urllib.request
from pathlib import Path

from fleet_page import SCENARIOS, _detector  # type: ignore[import-not-found]  # bench/ sibling

from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.fleet.answer_pages import KINDS, PAGE_BYTES
from nodeagent.collector.fleet.config import FleetConfig
from nodeagent.collector.fleet.fanout import Shard, ShardClients
from nodeagent.collector.fleet.stream_merge import merged_pages
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.v1 import nodeagent_pb2 as pb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--collectors", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_bench(Path(tmp), args.nodes, args.collectors, args.repeat, args.timeout))


async def _bench(tmp: Path, count: int, k: int, repeat: int, timeout: float) -> None:
    ports = [_free_port() for _ in range(k)]
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    dead = f"127.0.0.1:{silent.getsockname()[1]}"
    servers = []
    for i, address in enumerate(addresses):
        listed = addresses if i == 0 else []
        servers.append(_server(tmp, f"c{i}", address, listed, timeout))
    # No nodes of its own: the K collectors' view plus a silent peer.
    servers.append(_server(tmp, "with-dead", f"127.0.0.1:{_free_port()}", [*addresses, dead], timeout))
    try:
        for server in servers:
            await server.start()
        now = time.time()
        detectors = [_detector(scenario, now) for scenario in SCENARIOS]
        for index in range(count):
            node_id = f"node-{index:05d}"
            node = NodeState(row=NodeRow(node_id=node_id, first_seen=now, last_seen=now, gpu_count=8))
            node.detector = detectors[index % len(detectors)]
            servers[index % k].ingest.nodes[node_id] = node
        per = count // k
        for label, server in ((f"one collector, {per} nodes", servers[1]), (f"{k} merged, {count} nodes", servers[0])):
            size, seconds = await asyncio.to_thread(_best_get, _url(server, "/api/fleet"), repeat)
            print(f"GET /api/fleet  {label:<32} {size / 1024:8.1f} KiB  {seconds * 1000:7.1f} ms (best of {repeat})")
        label = f"{k} merged + 1 silent peer"
        size, seconds = await asyncio.to_thread(_best_get, _url(servers[-1], "/api/fleet"), 2)
        print(f"GET /api/fleet  {label:<32} {size / 1024:8.1f} KiB  {seconds * 1000:7.1f} ms (timeout {timeout:g} s)")
        for label, shards in (
            (f"one collector, {per} nodes", addresses[1:2]),
            (f"{k} merged, {count} nodes", addresses),
        ):
            seconds = await asyncio.to_thread(_best_list, [Shard(a, a) for a in shards], repeat)
            print(f"StreamNodes     {label:<32} {'':>8}      {seconds * 1000:7.1f} ms (best of {repeat})")
    finally:
        for server in servers:
            await server.stop(0.0)
        silent.close()


def _server(tmp: Path, name: str, address: str, fleet: list[str], timeout: float) -> CollectorServer:
    settings = CollectorConfig(fleet=FleetConfig(collectors=tuple(fleet), timeout_seconds=timeout))
    return CollectorServer(ServerConfig(
        listen=address, db_path=tmp / f"{name}.db", http_listen="127.0.0.1:0", settings=settings,
        history=HistoryConfig(enabled=False),
    ))  # fmt: skip


def _url(server: CollectorServer, path: str) -> str:
    assert server.http is not None
    return f"http://{server.http.address}{path}"


def _best_get(url: str, repeat: int) -> tuple[int, float]:
    best, size = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as reply:
            size = len(reply.read())
        best = min(best, time.perf_counter() - started)
    return size, best


def _best_list(shards: list[Shard], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        asyncio.run(_merged_nodes(shards))
        best = min(best, time.perf_counter() - started)
    return best


async def _merged_nodes(shards: list[Shard]) -> int:
    clients = ShardClients(shards)
    try:
        kind = KINDS["StreamNodes"]
        pages = [page async for page in merged_pages(clients, kind, pb.ListNodesRequest(), 30.0, PAGE_BYTES)]
    finally:
        await clients.close()
    assert all(shard.answered for shard in pages[-1].shards)
    return sum(len(page.nodes) for page in pages)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main()
