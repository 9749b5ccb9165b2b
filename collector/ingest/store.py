"""Durable state of the collector: SQLite in WAL mode, an embedded file that needs no server.

The ingest path keeps every node's state in memory and hands the store a batch of changed rows
every flush; one transaction writes them, and only after it commits does the collector
acknowledge the reports behind them. ``synchronous=FULL``: a commit is on the device before the
ack goes out, so neither a killed collector nor a power cut loses an acknowledged report's effect.

All SQLite work happens on one dedicated thread (``StoreWriter``): the event loop never waits on
the disk, and the connection is never shared between threads.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    agent_version TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    reports_total INTEGER NOT NULL,
    duplicates_total INTEGER NOT NULL,
    gap_reports_total INTEGER NOT NULL,
    spool_dropped_total INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    gpu_count INTEGER NOT NULL,
    info BLOB,
    latest BLOB
);
CREATE TABLE IF NOT EXISTS watermarks (
    node_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (node_id, epoch)
) WITHOUT ROWID;
"""

_UPSERT_NODE = """
INSERT INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(node_id) DO UPDATE SET
    hostname=excluded.hostname, agent_version=excluded.agent_version, last_seen=excluded.last_seen,
    reports_total=excluded.reports_total, duplicates_total=excluded.duplicates_total,
    gap_reports_total=excluded.gap_reports_total, spool_dropped_total=excluded.spool_dropped_total,
    epoch=excluded.epoch, last_seq=excluded.last_seq, gpu_count=excluded.gpu_count,
    info=COALESCE(excluded.info, nodes.info), latest=COALESCE(excluded.latest, nodes.latest)
"""
_UPSERT_MARK = "INSERT INTO watermarks VALUES (?,?,?) ON CONFLICT(node_id, epoch) DO UPDATE SET seq=excluded.seq"


@dataclass(slots=True)
class NodeRow:
    node_id: str
    hostname: str = ""
    agent_version: str = ""
    first_seen: float = 0.0
    last_seen: float = 0.0
    reports_total: int = 0
    duplicates_total: int = 0
    gap_reports_total: int = 0
    spool_dropped_total: int = 0
    epoch: int = 0
    last_seq: int = 0
    gpu_count: int = 0
    # Serialized NodeInfo / latest NodeReport; None in a batch means "unchanged".
    info: bytes | None = None
    latest: bytes | None = None
    watermarks: dict[int, int] = field(default_factory=dict)

    def values(self) -> tuple[object, ...]:
        return (
            self.node_id, self.hostname, self.agent_version, self.first_seen, self.last_seen,
            self.reports_total, self.duplicates_total, self.gap_reports_total, self.spool_dropped_total,
            self.epoch, self.last_seq, self.gpu_count, self.info, self.latest,
        )  # fmt: skip


class Store:
    """The SQLite file; used only from the writer thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA busy_timeout=5000")
        self.conn.executescript(SCHEMA)

    def load(self) -> list[NodeRow]:
        rows: dict[str, NodeRow] = {}
        for values in self.conn.execute("SELECT * FROM nodes"):
            row = NodeRow(*values)
            rows[row.node_id] = row
        for node_id, epoch, seq in self.conn.execute("SELECT node_id, epoch, seq FROM watermarks"):
            if node_id in rows:
                rows[node_id].watermarks[epoch] = seq
        return list(rows.values())

    def write(self, batch: Sequence[NodeRow], before_commit: Callable[[], None] | None = None) -> None:
        """One transaction: the rows, their watermarks, and what ``before_commit`` writes (alerts)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_UPSERT_NODE, [row.values() for row in batch])
            conn.executemany(
                _UPSERT_MARK,
                [(row.node_id, epoch, seq) for row in batch for epoch, seq in row.watermarks.items()],
            )
            if before_commit is not None:
                before_commit()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()


class StoreWriter:
    """Runs every store call on one thread, awaitable from the event loop."""

    def __init__(self, path: Path) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nodeagent-store")
        self.store: Store = self._pool.submit(Store, path).result()

    async def call(self, func: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, func, *args)

    def call_sync(self, func: Callable[..., T], *args: object, timeout: float | None = None) -> T:
        """From a thread other than the event loop's; ``TimeoutError`` after ``timeout`` seconds."""
        return self._pool.submit(func, *args).result(timeout)

    def close(self) -> None:
        self._pool.submit(self.store.close).result()
        self._pool.shutdown()
