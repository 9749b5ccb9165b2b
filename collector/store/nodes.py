"""The node tables: each node's row (``nodes``: its counters, hello and latest report) and, per
epoch, the highest seq stored (``watermarks``, each row with its checksum), from which dedup
resumes after a restart; ``load`` checks them first (``watermark_check``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from nodeagent.collector.store import watermark_check
from nodeagent.collector.store.watermark_check import watermark_crc

# SQLite's INTEGER is a signed 64-bit number; Python's int is not, and binding a bigger one raises.
INTEGER_MAX = (1 << 63) - 1

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
    crc INTEGER,
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
_UPSERT_MARK = (
    "INSERT INTO watermarks (node_id, epoch, seq, crc) VALUES (?,?,?,?)"
    " ON CONFLICT(node_id, epoch) DO UPDATE SET seq=excluded.seq, crc=excluded.crc"
)


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


class NodeTables:
    """The ``nodes`` and ``watermarks`` tables on the store's connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        # Watermark rows found damaged and repaired by ``load`` (``watermark_check``).
        self.watermarks_repaired = 0

    def load(self) -> list[NodeRow]:
        """Every stored node with its watermarks, checked (and repaired, loudly) first."""
        rows: dict[str, NodeRow] = {}
        for values in self._conn.execute("SELECT * FROM nodes"):
            row = NodeRow(*values)
            rows[row.node_id] = row
        marks = self._conn.execute("SELECT node_id, epoch, seq, crc FROM watermarks").fetchall()
        kept, repairs = watermark_check.verify({n: (row.epoch, row.last_seq) for n, row in rows.items()}, marks)
        if repairs:
            watermark_check.write_repairs(self._conn, repairs)
            self.watermarks_repaired += len(repairs)
        for node_id, row in rows.items():
            row.watermarks = kept[node_id]
            row.last_seq = min(row.last_seq, kept[node_id].get(row.epoch, row.last_seq))
        return list(rows.values())

    def write(self, rows: Sequence[NodeRow]) -> None:
        """Upsert the rows and their watermarks, inside the transaction the store has open."""
        self._conn.executemany(_UPSERT_NODE, [row.values() for row in rows])
        self._conn.executemany(
            _UPSERT_MARK,
            [
                (row.node_id, epoch, seq, watermark_crc(row.node_id, epoch, seq))
                for row in rows
                for epoch, seq in row.watermarks.items()
            ],
        )

    def delete(self, node_id: str) -> None:
        """The node's row and watermarks go (a retired node), inside the transaction the store has open."""
        self._conn.execute("DELETE FROM nodes WHERE node_id=?", (node_id,))
        self._conn.execute("DELETE FROM watermarks WHERE node_id=?", (node_id,))
