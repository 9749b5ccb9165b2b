"""Several in-process collectors (``CollectorServer``) and in-process agents (``Sender`` + ``Spool``)
for the routing tests: collectors in one asyncio loop on a thread, each stopped and started again
on its port; each node's reports made by a small fake source that names a job from a given seq."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from nodeagent.agent.delivery.sender import Sender, SenderConfig
from nodeagent.agent.delivery.spool import Spool
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.v1 import nodeagent_pb2 as pb

T = TypeVar("T")

FAST = SenderConfig(backoff_initial_seconds=0.05, backoff_max_seconds=0.5, summary_seconds=0.0,
                    connect_timeout_seconds=2.0)  # fmt: skip


class Collectors:
    """``count`` collectors on 127.0.0.1, each with its own database under ``directory``."""

    def __init__(self, directory: Path, count: int, *, node_down_seconds: float = 60.0) -> None:
        self.directory = directory
        self.dbs = [directory / f"c{i}.db" for i in range(count)]
        self.ports = [0] * count
        self.servers: list[CollectorServer | None] = [None] * count
        settings = CollectorConfig(alerts=AlertConfig(node_down_seconds=node_down_seconds))
        # Report times are the fake source's (virtual, a second a report): no clock bounds.
        self._config = ServerConfig(listen="127.0.0.1:0", settings=settings, clock_bounds=None, flush_seconds=0.02)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="collectors", daemon=True)
        self._thread.start()
        for i in range(count):
            self.start(i)

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports]

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def on(self, i: int, read: Callable[[CollectorServer], T]) -> T:
        """``read(server)`` on the collectors' loop (their state is the loop's)."""

        async def call() -> T:
            server = self.servers[i]
            assert server is not None
            return read(server)

        return self.run(call())

    def start(self, i: int) -> None:
        listen = f"127.0.0.1:{self.ports[i]}"
        server = CollectorServer(replace(self._config, listen=listen, db_path=self.dbs[i]))
        self.ports[i] = self.run(server.start())
        self.servers[i] = server

    def stop(self, i: int) -> None:
        server = self.servers[i]
        if server is not None:
            self.servers[i] = None
            self.run(server.stop(0.0))

    def close(self) -> None:
        for i in range(len(self.servers)):
            self.stop(i)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def connected(self, i: int) -> set[str]:
        """The nodes with a stream on collector ``i`` now."""
        return self.on(i, lambda s: {n for n, node in s.ingest.nodes.items() if node.stream is not None})

    def stored(self) -> Counter[tuple[str, int, int]]:
        """Every (node, epoch, seq) stored over all collectors' databases, and how often."""
        out: Counter[tuple[str, int, int]] = Counter()
        for db in self.dbs:
            if db.exists():
                with sqlite3.connect(db) as conn:
                    out.update(conn.execute("SELECT node_id, epoch, seq FROM history_reports").fetchall())
        return out


@dataclass
class FakeNode:
    """One agent: a spool and a sender; ``tick`` makes and spools one report."""

    node_id: str
    spool: Spool
    targets: list[str]
    job: str = ""
    job_from_seq: int = 0  # the first seq that names ``job`` (0: never)
    gpus: int = 4
    config: SenderConfig = FAST
    seq: int = 0
    sender: Sender | None = None

    def start(self) -> FakeNode:
        info = pb.NodeInfo(node_id=self.node_id, hostname=self.node_id)
        self.sender = Sender(self.spool, self.targets, hello=lambda: info, config=self.config)
        self.sender.start()
        return self

    def tick(self, start: float = 1_800_000_000.0) -> None:
        self.seq += 1
        report = pb.NodeReport(node_id=self.node_id, epoch=self.spool.epoch, seq=self.seq,
                               time_unix_seconds=start + self.seq)  # fmt: skip
        for g in range(self.gpus):
            report.gpus.add(index=g, uuid=f"GPU-{self.node_id}-{g}", utilization_gpu_ratio=0.9)
        if self.job and self.job_from_seq and self.seq >= self.job_from_seq:
            report.jobs.add(job=self.job, source="slurm", gpus=range(self.gpus))
        self.spool.append(self.seq, report.SerializeToString(), time.time())

    def stop(self) -> None:
        if self.sender is not None:
            self.sender.stop()
        self.spool.close()


def drive(nodes: list[FakeNode], reports: int, interval: float) -> None:
    """Each node produces ``reports`` reports, one every ``interval`` seconds."""
    for _ in range(reports):
        for node in nodes:
            node.tick()
        time.sleep(interval)
