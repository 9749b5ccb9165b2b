"""Durable state of the collector: SQLite in WAL mode, an embedded file that needs no server.

The ingest path keeps every node's state in memory and hands the store a batch of changed rows
every flush; one transaction writes them, and only after it commits does the collector
acknowledge the reports behind them. ``synchronous=FULL``: a commit is on the device before the
ack goes out, so neither a killed collector nor a power cut loses an acknowledged report's effect.

A row that cannot be written (a value SQLite refuses) fails only its own node: the batch is then
written row by row, each in a savepoint, and the rows refused are named to the caller.

The WAL grows until SQLite's automatic checkpoint (1,000 pages, 4 MB); on a filesystem with less
room than that left, it would fill the disk first, and then no commit (and no checkpoint, which
needs the database file to grow a little) could ever succeed again. So when the free space is
below what the WAL may still take, each commit is followed by a checkpoint that truncates the
WAL, and a commit that fails for space tries one too (it succeeds once space returns).

All SQLite work happens on one dedicated thread (``StoreWriter``): the event loop never waits on
the disk, and the connection is never shared between threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nodeagent.collector.history.rollup import (
    DAY_SECONDS,
    NODE_ROW,
    VALUES,
    HistoryBatch,
    MinuteRow,
    StoredReport,
    minute_from,
    minute_values,
)
from nodeagent.v1 import nodeagent_pb2 as pb

T = TypeVar("T")

# SQLite's INTEGER is a signed 64-bit number; Python's int is not, and binding a bigger one raises.
INTEGER_MAX = (1 << 63) - 1
# What binding or storing one row can raise; anything else (a full disk, a lock) fails the batch.
_ROW_ERRORS = (OverflowError, ValueError, TypeError, sqlite3.DataError, sqlite3.IntegrityError, sqlite3.InterfaceError)
# Checkpoint early when the filesystem has less than the WAL may grow to, plus this.
FREE_SPACE_MARGIN_BYTES = 1024 * 1024
# ... and only once the WAL holds this much: a checkpoint costs a few device flushes.
EARLY_CHECKPOINT_WAL_BYTES = 64 * 1024

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

# History (collector/history/rollup.py): per-minute rows per GPU and per node (gpu -1), and the
# recent reports themselves, zlib-compressed. Written in the flush transaction, pruned there.
HISTORY_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS history_minutes (
    node_id TEXT NOT NULL,
    gpu INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    {", ".join(f"{name} REAL" for name in VALUES)},
    state TEXT NOT NULL,
    cause TEXT NOT NULL,
    jobs TEXT NOT NULL,
    last_time REAL NOT NULL,
    PRIMARY KEY (node_id, minute, gpu)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_reports (
    node_id TEXT NOT NULL,
    time REAL NOT NULL,
    epoch INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    report BLOB NOT NULL,
    UNIQUE (node_id, time, epoch, seq)
);
"""
_UPSERT_MINUTE = f"INSERT OR REPLACE INTO history_minutes VALUES ({','.join('?' * (8 + len(VALUES)))})"
_INSERT_REPORT = "INSERT OR IGNORE INTO history_reports VALUES (?,?,?,?,?)"
REPORT_COMPRESSION_LEVEL = 1

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
        self.conn.executescript(HISTORY_SCHEMA)
        self.wal_path = path.with_name(path.name + "-wal")
        page_bytes = self.conn.execute("PRAGMA page_size").fetchone()[0]
        auto_pages = self.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.wal_limit_bytes = int(page_bytes) * int(auto_pages)

    def load(self) -> list[NodeRow]:
        rows: dict[str, NodeRow] = {}
        for values in self.conn.execute("SELECT * FROM nodes"):
            row = NodeRow(*values)
            rows[row.node_id] = row
        for node_id, epoch, seq in self.conn.execute("SELECT node_id, epoch, seq FROM watermarks"):
            if node_id in rows:
                rows[node_id].watermarks[epoch] = seq
        return list(rows.values())

    def write(self, batch: Sequence[NodeRow], before_commit: Callable[[], None] | None = None) -> dict[str, str]:
        """One transaction: the rows, their watermarks, and what ``before_commit`` writes (alerts).

        Returns the rows left out because they cannot be written (node id -> error); everything
        else is committed. Raises when the transaction as a whole fails (and then nothing is)."""
        conn = self.conn
        refused: dict[str, str] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("SAVEPOINT batch")
            try:
                self._rows(batch)
            except _ROW_ERRORS:
                conn.execute("ROLLBACK TO batch")
                refused = self._rows_one_by_one(batch)
            conn.execute("RELEASE batch")
            if before_commit is not None:
                before_commit()
            conn.execute("COMMIT")
            self._checkpoint_if_short_of_space()
        except BaseException as err:
            # SQLite may have rolled back already (a full disk at COMMIT does): rolling back again
            # would raise "no transaction is active" and hide the real error.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if _out_of_space(err):
                self._give_back_wal_space()
            raise
        return refused

    def _rows(self, rows: Sequence[NodeRow]) -> None:
        self.conn.executemany(_UPSERT_NODE, [row.values() for row in rows])
        self.conn.executemany(
            _UPSERT_MARK, [(row.node_id, epoch, seq) for row in rows for epoch, seq in row.watermarks.items()]
        )

    def _rows_one_by_one(self, batch: Sequence[NodeRow]) -> dict[str, str]:
        refused: dict[str, str] = {}
        for row in batch:
            self.conn.execute("SAVEPOINT one")
            try:
                self._rows((row,))
            except _ROW_ERRORS as err:
                self.conn.execute("ROLLBACK TO one")
                refused[row.node_id] = f"{type(err).__name__}: {err}"
            self.conn.execute("RELEASE one")
        return refused

    def _checkpoint_if_short_of_space(self) -> None:
        try:
            wal_bytes = self.wal_path.stat().st_size
            if wal_bytes < EARLY_CHECKPOINT_WAL_BYTES:
                return
            fs = os.statvfs(self.wal_path.parent)
        except OSError:
            return
        if fs.f_bavail * fs.f_frsize < self.wal_limit_bytes - wal_bytes + FREE_SPACE_MARGIN_BYTES:
            self._give_back_wal_space()

    def _give_back_wal_space(self) -> None:
        """Copy the WAL into the database and truncate it: on a filesystem the WAL filled, that
        is the space the next commit needs. Best effort: it can fail for space too."""
        with contextlib.suppress(sqlite3.Error):
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def alert_tables(self) -> AlertTables:
        """The alert book's tables on this store's connection (their SQL is at the end of this module)."""
        return AlertTables(self.conn)

    def close(self) -> None:
        self.conn.close()

    # ---- history ----

    def write_history(self, batch: HistoryBatch) -> None:
        """Inside the flush transaction (``write``'s ``before_commit``): minutes, reports, pruning."""
        conn = self.conn
        conn.executemany(_UPSERT_MINUTE, [minute_values(row) for row in batch.minutes])
        conn.executemany(
            _INSERT_REPORT,
            [
                (r.node_id, r.time_unix_seconds, r.epoch, r.seq, zlib.compress(r.raw, REPORT_COMPRESSION_LEVEL))
                for r in batch.reports
            ],
        )
        for node_id, (reports_before, minutes_before) in batch.prune.items():
            conn.execute("DELETE FROM history_reports WHERE node_id=? AND time<?", (node_id, reports_before))
            conn.execute("DELETE FROM history_minutes WHERE node_id=? AND minute<?", (node_id, minutes_before))
        if batch.sweep is not None:
            reports_before, minutes_before = batch.sweep
            conn.execute("DELETE FROM history_reports WHERE time<?", (reports_before,))
            conn.execute("DELETE FROM history_minutes WHERE minute<?", (minutes_before,))

    def history_seed(self) -> dict[str, tuple[list[MinuteRow], list[StoredReport]]]:
        """Per node: its newest stored minute (every GPU's row and the node's) and the stored
        reports newer than that minute's last write, from which its open minute is rebuilt."""
        out: dict[str, tuple[list[MinuteRow], list[StoredReport]]] = {}
        for node_id, rows in self.last_minutes().items():
            last = max(row.last_time for row in rows)
            later = [r for r in self.history_reports(node_id, last, None) if r.time_unix_seconds > last]
            out[node_id] = (rows, later)
        return out

    def last_minutes(self) -> dict[str, list[MinuteRow]]:
        """Each node's newest stored minute (every GPU's row and the node's)."""
        out: dict[str, list[MinuteRow]] = {}
        # Per node a seek to the end of its part of the primary key (node_id, minute, gpu), not a
        # GROUP BY, which reads every retained minute of every node at each start-up.
        newest = (
            "SELECT n.node_id, (SELECT MAX(m.minute) FROM history_minutes m WHERE m.node_id = n.node_id) FROM nodes n"
        )
        for node_id, minute in self.conn.execute(newest).fetchall():
            if minute is None:
                continue
            rows = self.conn.execute(
                "SELECT * FROM history_minutes WHERE node_id=? AND minute=? ORDER BY gpu", (node_id, minute)
            )
            out[node_id] = [minute_from(values) for values in rows]
        return out

    def lost_on_last_day(self) -> dict[str, tuple[int, float]]:
        """Per node with stored minutes: the UTC day of its newest one (the day's start, unix
        seconds) and the GPU-seconds lost that day (its node rows' sum), what the fleet page's
        day count starts from after a restart. One query; each node's part is a range of the
        primary key (its newest minute, then that day's minutes), never a scan of older days."""
        sql = (
            "WITH newest AS MATERIALIZED (SELECT n.node_id AS node_id,"
            "   (SELECT MAX(m.minute) FROM history_minutes m WHERE m.node_id = n.node_id) AS minute FROM nodes n)"
            " SELECT node_id, minute / ? * ? AS day, (SELECT TOTAL(h.gpu_seconds_lost) FROM history_minutes h"
            "   WHERE h.node_id = newest.node_id AND h.minute >= newest.minute / ? * ? AND h.gpu = ?)"
            " FROM newest WHERE minute IS NOT NULL"
        )
        rows = self.conn.execute(sql, (DAY_SECONDS, DAY_SECONDS, DAY_SECONDS, DAY_SECONDS, NODE_ROW))
        return {str(node_id): (int(day), float(lost)) for node_id, day, lost in rows}

    def history_minutes(self, node_id: str, gpu: int | None, since: float, until: float | None) -> list[MinuteRow]:
        """The node's minute rows in [since, until), by gpu (-1, the node, first) then minute;
        ``gpu`` None: every GPU's and the node's."""
        sql = "SELECT * FROM history_minutes WHERE node_id=? AND minute>=? AND minute<?"
        args: list[object] = [node_id, since, INTEGER_MAX if until is None else until]
        if gpu is not None:
            sql += " AND gpu=?"
            args.append(gpu)
        return [minute_from(values) for values in self.conn.execute(sql + " ORDER BY gpu, minute", args)]

    def newest_minute(self, node_id: str) -> int | None:
        row = self.conn.execute("SELECT MAX(minute) FROM history_minutes WHERE node_id=?", (node_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def history_reports(self, node_id: str, since: float, until: float | None) -> list[StoredReport]:
        """The node's stored full-resolution reports in [since, until), oldest first."""
        rows = self.conn.execute(
            "SELECT node_id, time, epoch, seq, report FROM history_reports WHERE node_id=? AND time>=? AND time<?"
            " ORDER BY time, epoch, seq",
            (node_id, since, float("inf") if until is None else until),
        )
        return [StoredReport(n, t, e, s, zlib.decompress(blob)) for n, t, e, s, blob in rows]

    def job_minutes(self, last_seconds: float) -> list[tuple[str, str, str, int, float, int, int]]:
        """GPU minutes that name a job, grouped: (jobs, cause, node, minutes, GPU-seconds lost,
        first minute, last minute), over ``last_seconds`` before the newest stored minute."""
        newest = self.conn.execute("SELECT MAX(minute) FROM history_minutes").fetchone()[0]
        if newest is None:
            return []
        return list(
            self.conn.execute(
                "SELECT jobs, cause, node_id, COUNT(*), TOTAL(gpu_seconds_lost), MIN(minute), MAX(minute)"
                " FROM history_minutes WHERE gpu>=0 AND jobs!='' AND minute>=? GROUP BY jobs, cause, node_id",
                (newest + 60 - last_seconds,),
            )
        )

    def history_nodes(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT node_id FROM history_minutes")]


def _out_of_space(err: BaseException) -> bool:
    if isinstance(err, sqlite3.Error):
        code = getattr(err, "sqlite_errorcode", None)
        # An extended result code keeps its primary code in the low byte.
        return code is not None and code & 0xFF == sqlite3.SQLITE_FULL
    return isinstance(err, OSError) and err.errno == errno.ENOSPC


class StoreUnreadableError(Exception):
    """The database file cannot be read (missing, not a database, no history tables)."""


def read_stored_reports(path: Path, node_id: str, since_seconds: float) -> list[pb.NodeReport]:
    """A node's stored reports of the last ``since_seconds`` before its newest, oldest first, from
    the file read-only (``replay --node``: a running collector may hold it).
    ``StoreUnreadableError`` when the file cannot be read."""
    try:
        return _read_stored_reports(path, node_id, since_seconds)
    except sqlite3.Error as err:
        raise StoreUnreadableError(str(err)) from err


def _read_stored_reports(path: Path, node_id: str, since_seconds: float) -> list[pb.NodeReport]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        newest = conn.execute("SELECT MAX(time) FROM history_reports WHERE node_id=?", (node_id,)).fetchone()[0]
        if newest is None:
            return []
        rows = conn.execute(
            "SELECT report FROM history_reports WHERE node_id=? AND time>=? ORDER BY time, epoch, seq",
            (node_id, newest - since_seconds),
        ).fetchall()
    finally:
        conn.close()
    return [pb.NodeReport.FromString(zlib.decompress(blob)) for (blob,) in rows]


def default_db_path(euid: int | None = None) -> Path:
    """Where ``serve`` keeps its database without ``--db``: the state directory, never the
    current one (systemd's StateDirectory=, /var/lib/nodeagent as root, the XDG one otherwise)."""
    state = os.environ.get("STATE_DIRECTORY")
    if state:
        return Path(state.split(":")[0]) / "collector.db"
    if (os.geteuid() if euid is None else euid) == 0:
        return Path("/var/lib/nodeagent/collector.db")
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "nodeagent" / "collector.db"


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


# ---------------------------------------------------------------------------------------------
# Alert tables: the alert book's rows (``collector/alerts/book.py`` owns their meaning and calls
# these with plain values; labels, annotations and transitions arrive as JSON text). Every
# statement runs inside the transaction the store has open; nothing here commits.
# ---------------------------------------------------------------------------------------------

ALERT_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL,
    name TEXT NOT NULL,
    node_id TEXT NOT NULL,
    key TEXT NOT NULL,
    severity TEXT NOT NULL,
    labels TEXT NOT NULL,
    annotations TEXT NOT NULL,
    starts_at REAL NOT NULL,
    ends_at REAL,
    revision INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_by_end ON alerts (ends_at);
CREATE TABLE IF NOT EXISTS alert_outbox (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    transition TEXT NOT NULL
);
"""
# What an alert row reads back as: name, node_id, key, severity, labels, annotations, starts_at,
# ends_at, fingerprint (and, for firing ones, id and revision after them).
_ALERT_COLUMNS = "name, node_id, key, severity, labels, annotations, starts_at, ends_at, fingerprint"


class AlertTables:
    """The ``alerts`` and ``alert_outbox`` tables on one connection (the store's, or a test's)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def create(self) -> None:
        for statement in ALERT_SCHEMA.split(";"):
            if statement.strip():
                # One by one: executescript would commit the store's open transaction first.
                self._conn.execute(statement)

    def insert_alert(
        self,
        fingerprint: str,
        name: str,
        node_id: str,
        key: str,
        severity: str,
        labels_json: str,
        annotations_json: str,
        starts_at: float,
    ) -> int:
        """A new firing alert at revision 0; returns its row id."""
        cursor = self._conn.execute(
            "INSERT INTO alerts (fingerprint, name, node_id, key, severity, labels, annotations, starts_at, revision)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
            (fingerprint, name, node_id, key, severity, labels_json, annotations_json, starts_at),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def set_annotations(self, row_id: int, annotations_json: str) -> None:
        self._conn.execute("UPDATE alerts SET annotations = ? WHERE id = ?", (annotations_json, row_id))

    def update_alert(self, row_id: int, severity: str, labels_json: str, annotations_json: str, revision: int) -> None:
        self._conn.execute(
            "UPDATE alerts SET severity = ?, labels = ?, annotations = ?, revision = ? WHERE id = ?",
            (severity, labels_json, annotations_json, revision, row_id),
        )

    def end_alert(self, row_id: int, ends_at: float | None, revision: int) -> None:
        self._conn.execute("UPDATE alerts SET ends_at = ?, revision = ? WHERE id = ?", (ends_at, revision, row_id))

    def recent_alerts(self, limit: int) -> list[tuple[Any, ...]]:
        """Firing rows, then resolved ones, most recently ended first."""
        return self._conn.execute(
            f"SELECT {_ALERT_COLUMNS} FROM alerts ORDER BY ends_at IS NOT NULL, ends_at DESC, starts_at DESC LIMIT ?",
            (limit,),
        ).fetchall()

    def firing_alerts(self) -> list[tuple[Any, ...]]:
        """Rows still firing, each with its row id and revision after the alert's columns."""
        return self._conn.execute(f"SELECT {_ALERT_COLUMNS}, id, revision FROM alerts WHERE ends_at IS NULL").fetchall()

    def put_outbox(self, transition_id: str, created_at: float, transition_json: str) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO alert_outbox (id, created_at, transition) VALUES (?, ?, ?)",
            (transition_id, created_at, transition_json),
        )

    def delete_outbox(self, transition_ids: Sequence[str]) -> None:
        self._conn.executemany("DELETE FROM alert_outbox WHERE id = ?", [(tid,) for tid in transition_ids])

    def outbox(self) -> list[str]:
        """The undelivered transitions' JSON, oldest first."""
        rows = self._conn.execute("SELECT transition FROM alert_outbox ORDER BY created_at, rowid")
        return [text for (text,) in rows]

    def prune(self, cutoff: float) -> None:
        """Forget resolved alerts that ended, and outbox rows made, before ``cutoff``."""
        self._conn.execute("DELETE FROM alerts WHERE ends_at IS NOT NULL AND ends_at < ?", (cutoff,))
        self._conn.execute("DELETE FROM alert_outbox WHERE created_at < ?", (cutoff,))
