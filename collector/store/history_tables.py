"""The history tables: per-minute rows per GPU and per node (``history_minutes``, gpu -1 for the
node) and the recent reports themselves, zlib-compressed (``history_reports``).

``collector/history/`` builds what goes in; a flush writes it, and prunes what is past retention,
in the same transaction as the node rows (``HistoryTables.write``). Everything else here reads:
the start-up's seed of each node's open minute, the queries over minutes, and the stored reports
that ``replay --node`` runs over.

Damage to these tables (a malformed page, a report that no longer decompresses) is raised as
``HistoryDamagedError`` by the flush's write and the start-up reads, so the collector can stop
its history and go on with ingest (``collector/ingest/history_guard.py``); ``forget_tables``
takes them out for ``nodeagent-collector reset-history``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from collections.abc import Generator, Iterator, Sequence
from typing import Any, cast

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch, StoredReport
from nodeagent.collector.history.minutes import DAY_SECONDS, MINUTE_SECONDS, NODE_ROW, VALUES, MinuteRow
from nodeagent.collector.store import ledger_tables
from nodeagent.collector.store.job_lists import jobs_of, stored_jobs
from nodeagent.collector.store.ledger_tables import LedgerTables
from nodeagent.collector.store.nodes import INTEGER_MAX

SCHEMA = f"""
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
    held_seconds REAL,
    {", ".join(f"{name} REAL" for name in split.COLUMNS)},
    waiting_on TEXT,
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
SCHEMA += ledger_tables.SCHEMA
# Every column of a minute row, in the order of a new table (and of ``minute_values``).
MINUTE_COLUMNS = (
    "node_id", "gpu", "minute", "samples", *VALUES, "state", "cause", "jobs", "last_time", "held_seconds",
    *split.COLUMNS, "waiting_on",
)  # fmt: skip
_UPSERT_MINUTE = (
    f"INSERT OR REPLACE INTO history_minutes ({', '.join(MINUTE_COLUMNS)})"
    f" VALUES ({','.join('?' * len(MINUTE_COLUMNS))})"
)
_INSERT_REPORT = "INSERT OR IGNORE INTO history_reports VALUES (?,?,?,?,?)"
_SPLIT_SUMS = ", ".join(f"TOTAL({c})" for c in split.COLUMNS)
REPORT_COMPRESSION_LEVEL = 1


TABLES = ("history_minutes", "history_reports", "history_ledger", "history_job_owners")
# SQLite's primary result codes for a damaged file.
_DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


class HistoryDamagedError(Exception):
    """The history tables cannot be read or written: damaged pages or values."""


class HistoryTables:
    """``history_minutes`` and ``history_reports`` on one connection (the store's, or a read-only one)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._select: str | None = None
        self.ledger = LedgerTables(conn)

    @property
    def _minute_columns(self) -> str:
        """The columns ``minute_from`` reads, by name in its order: a table altered by an older
        version may hold them in another order, and one opened read-only before it gained a
        column has none (NULL in its place)."""
        if self._select is None:
            present = {row[1] for row in self._conn.execute("PRAGMA table_info(history_minutes)")}
            self._select = ", ".join(name if name in present else "NULL" for name in MINUTE_COLUMNS)
        return self._select

    def write(self, batch: HistoryBatch) -> None:
        """Inside the flush transaction (``Store.write``'s ``before_commit``): minutes, reports, pruning.

        ``HistoryDamagedError`` when a history page is damaged: SQLite then fails the whole
        transaction, which the caller writes again without its history."""
        with _damage("writing the history"):
            self._write(batch)

    def _write(self, batch: HistoryBatch) -> None:
        conn = self._conn
        conn.executemany(_UPSERT_MINUTE, [minute_values(row) for row in batch.minutes])
        conn.executemany(
            _INSERT_REPORT,
            [
                (r.node_id, r.time_unix_seconds, r.epoch, r.seq, zlib.compress(r.raw, REPORT_COMPRESSION_LEVEL))
                for r in batch.reports
            ],
        )
        for node_id, hour in batch.compact:
            self.ledger.compact(node_id, hour)
        if batch.owners:
            self.ledger.note_owners(batch.owners)
        for node_id, (reports_before, minutes_before) in batch.prune.items():
            conn.execute("DELETE FROM history_reports WHERE node_id=? AND time<?", (node_id, reports_before))
            conn.execute("DELETE FROM history_minutes WHERE node_id=? AND minute<?", (node_id, minutes_before))
            self.ledger.prune(node_id, minutes_before)
        if batch.sweep is not None:
            reports_before, minutes_before = batch.sweep
            conn.execute("DELETE FROM history_reports WHERE time<?", (reports_before,))
            conn.execute("DELETE FROM history_minutes WHERE minute<?", (minutes_before,))
            self.ledger.prune(None, minutes_before)

    def delete_reports(self, node_id: str) -> int:
        """A retired node's full-resolution reports go (its minutes stay for their retention);
        inside the flush transaction. Returns how many were deleted."""
        return int(self._conn.execute("DELETE FROM history_reports WHERE node_id=?", (node_id,)).rowcount)

    def seed(self) -> dict[str, tuple[list[MinuteRow], list[StoredReport]]]:
        """Per node: its newest stored minute (every GPU's row and the node's) and the stored
        reports newer than that minute's last write, from which its open minute is rebuilt.
        ``HistoryDamagedError`` when what it reads is damaged."""
        out: dict[str, tuple[list[MinuteRow], list[StoredReport]]] = {}
        with _damage("rebuilding the open minutes", values=True):
            for node_id, rows in self.last_minutes().items():
                last = max(row.last_time for row in rows)
                later = [r for r in self.reports(node_id, last, None) if r.time_unix_seconds > last]
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
        for node_id, minute in self._conn.execute(newest).fetchall():
            if minute is None:
                continue
            rows = self._conn.execute(
                f"SELECT {self._minute_columns} FROM history_minutes WHERE node_id=? AND minute=? ORDER BY gpu",
                (node_id, minute),
            )
            out[node_id] = [minute_from(values) for values in rows]
        return out

    def lost_on_last_day(self) -> dict[str, tuple[int, float]]:
        """Per node with stored minutes: the UTC day of its newest one (the day's start, unix
        seconds) and the GPU-seconds lost that day by the ledger's split (its node rows' lost
        columns, not computing nor unmeasured; a row stored before the split, the detector's
        count), what the fleet page's and ``nodes``' day count starts from after a restart. One
        query; each node's part is a range of the primary key (its newest minute, then that day's
        minutes), never a scan of older days."""
        lost = " + ".join(f"COALESCE(h.{c}_seconds, 0)" for c in split.LOST_CATEGORIES)
        sql = (
            "WITH newest AS MATERIALIZED (SELECT n.node_id AS node_id,"
            "   (SELECT MAX(m.minute) FROM history_minutes m WHERE m.node_id = n.node_id) AS minute FROM nodes n)"
            f" SELECT node_id, minute / ? * ? AS day, (SELECT TOTAL(CASE WHEN h.{split.COLUMNS[0]} IS NULL"
            f"   THEN h.gpu_seconds_lost ELSE {lost} END) FROM history_minutes h"
            "   WHERE h.node_id = newest.node_id AND h.minute >= newest.minute / ? * ? AND h.gpu = ?)"
            " FROM newest WHERE minute IS NOT NULL"
        )
        with _damage("reading the GPU time lost on each node's last day", values=True):
            rows = self._conn.execute(sql, (DAY_SECONDS, DAY_SECONDS, DAY_SECONDS, DAY_SECONDS, NODE_ROW))
            return {str(node_id): (int(day), float(lost)) for node_id, day, lost in rows}

    def minutes(self, node_id: str, gpu: int | None, since: float, until: float | None) -> list[MinuteRow]:
        """The node's minute rows in [since, until), by gpu (-1, the node, first) then minute;
        ``gpu`` None: every GPU's and the node's."""
        sql = f"SELECT {self._minute_columns} FROM history_minutes WHERE node_id=? AND minute>=? AND minute<?"
        args: list[object] = [node_id, since, INTEGER_MAX if until is None else until]
        if gpu is not None:
            sql += " AND gpu=?"
            args.append(gpu)
        return [minute_from(values) for values in self._conn.execute(sql + " ORDER BY gpu, minute", args)]

    def gpus(self, node_id: str, since: float, until: float | None) -> list[int]:
        """The GPUs (-1: the node) with minute rows of the node in [since, until), in order."""
        rows = self._conn.execute(
            "SELECT DISTINCT gpu FROM history_minutes WHERE node_id=? AND minute>=? AND minute<? ORDER BY gpu",
            (node_id, since, INTEGER_MAX if until is None else until),
        ).fetchall()
        return [int(gpu) for (gpu,) in rows]

    def minutes_page(self, node_id: str, gpu: int, since: float, until: float | None, limit: int) -> list[MinuteRow]:
        """The first ``limit`` of one GPU's (or the node's) minute rows in [since, until), by
        minute: ``minutes`` a page at a time (the next page starts past the last minute given)."""
        rows = self._conn.execute(
            f"SELECT {self._minute_columns} FROM history_minutes WHERE node_id=? AND minute>=? AND minute<? AND gpu=?"
            " ORDER BY minute LIMIT ?",
            (node_id, since, INTEGER_MAX if until is None else until, gpu, limit),
        ).fetchall()
        return [minute_from(values) for values in rows]

    def newest_minute(self, node_id: str) -> int | None:
        row = self._conn.execute("SELECT MAX(minute) FROM history_minutes WHERE node_id=?", (node_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def reports(self, node_id: str, since: float, until: float | None) -> list[StoredReport]:
        """The node's stored full-resolution reports in [since, until), oldest first."""
        rows = self._conn.execute(
            "SELECT node_id, time, epoch, seq, report FROM history_reports WHERE node_id=? AND time>=? AND time<?"
            " ORDER BY time, epoch, seq",
            (node_id, since, float("inf") if until is None else until),
        )
        return [StoredReport(n, t, e, s, zlib.decompress(blob)) for n, t, e, s, blob in rows]

    def last_reports(self, node_id: str, since_seconds: float) -> list[bytes]:
        """The node's stored reports of the last ``since_seconds`` before its newest, oldest
        first, serialized (what ``replay --node`` runs over)."""
        conn = self._conn
        newest = conn.execute("SELECT MAX(time) FROM history_reports WHERE node_id=?", (node_id,)).fetchone()[0]
        if newest is None:
            return []
        rows = conn.execute(
            "SELECT report FROM history_reports WHERE node_id=? AND time>=? ORDER BY time, epoch, seq",
            (node_id, newest - since_seconds),
        ).fetchall()
        return [zlib.decompress(blob) for (blob,) in rows]

    def job_minutes(self, last_seconds: float) -> Generator[tuple[Any, ...], None, None]:
        """GPU minutes that name a job, grouped: (jobs, cause, node, GPU-seconds held, the
        detector's GPU-seconds lost of the rows stored before the split, first minute, last minute,
        then the split's seconds per ``split.COLUMNS``), over ``last_seconds`` before the newest
        stored minute; as SQLite yields them, so a caller need not hold them all. A row stored
        before the seconds held were counted counts its whole minute."""
        newest = self._conn.execute("SELECT MAX(minute) FROM history_minutes").fetchone()[0]
        if newest is None:
            return
        with contextlib.closing(
            self._conn.execute(
                "SELECT jobs, cause, node_id, TOTAL(COALESCE(held_seconds, ?)),"
                f" TOTAL(CASE WHEN {split.COLUMNS[0]} IS NULL THEN gpu_seconds_lost END), MIN(minute), MAX(minute),"
                f" {_SPLIT_SUMS} FROM history_minutes WHERE gpu>=0 AND jobs!='' AND minute>=?"
                " GROUP BY jobs, cause, node_id",
                (MINUTE_SECONDS, newest + MINUTE_SECONDS - last_seconds),
            )
        ) as groups:
            yield from groups


def forget_tables(conn: sqlite3.Connection) -> None:
    """Take the history tables out of the schema without reading them: DROP TABLE walks a table
    to free its pages and fails on a damaged one. Their pages are left unused, for the VACUUM
    that must follow (``reset_history``) to leave out of the file."""
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute("BEGIN IMMEDIATE")
        marks = ",".join("?" * len(TABLES))
        conn.execute(f"DELETE FROM sqlite_schema WHERE tbl_name IN ({marks})", TABLES)
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.execute("PRAGMA writable_schema=OFF")


@contextlib.contextmanager
def _damage(doing: str, values: bool = False) -> Iterator[None]:
    """SQLite's word for a damaged file, and with ``values`` a stored value that cannot be read
    back (a report that does not decompress, a number that is not one), as ``HistoryDamagedError``."""
    try:
        yield
    except sqlite3.DatabaseError as err:
        code = getattr(err, "sqlite_errorcode", None)
        # An extended result code keeps its primary code in the low byte.
        if code is None or code & 0xFF not in _DAMAGE_CODES:
            raise
        raise HistoryDamagedError(f"{doing}: {err}") from err
    except (zlib.error, ValueError, TypeError) as err:
        if not values:
            raise
        raise HistoryDamagedError(f"{doing}: a stored value cannot be read back ({type(err).__name__}: {err})") from err


def minute_values(row: MinuteRow) -> tuple[object, ...]:
    """The row as the table's columns."""
    return (
        row.node_id, row.gpu, row.minute, row.samples, *(row.values.get(name) for name in VALUES),
        row.state, row.cause, stored_jobs(row.jobs), row.last_time, row.held_seconds,
        *(row.split if row.split is not None else (None,) * len(split.COLUMNS)), row.waiting_on or None,
    )  # fmt: skip


def minute_from(values: Sequence[object]) -> MinuteRow:
    """A row of the table as a ``MinuteRow``."""
    node_id, gpu, minute, samples = values[:4]
    numbers = values[4 : 4 + len(VALUES)]
    state, cause, jobs, last_time, *held = values[4 + len(VALUES) : 9 + len(VALUES)]
    parts = values[9 + len(VALUES) : 9 + len(VALUES) + len(split.COLUMNS)]
    row = MinuteRow(str(node_id), int(str(gpu)), int(str(minute)), int(str(samples)))
    # REAL columns: SQLite gives floats (or NULL) back; a query of days reads 100,000s of them.
    row.values = cast(dict[str, float], {name: v for name, v in zip(VALUES, numbers, strict=True) if v is not None})
    row.state, row.cause, row.last_time = str(state), str(cause), float(str(last_time))
    row.jobs = jobs_of(str(jobs))
    row.held_seconds = float(str(held[0])) if held and held[0] is not None else None
    if parts[0] is not None:
        # A column the split gained later (``unmeasured_seconds``) is NULL in rows stored before it: 0.
        row.split = [0.0 if p is None else float(cast(float, p)) for p in parts]
        waiting_on = values[9 + len(VALUES) + len(split.COLUMNS)]
        row.waiting_on = str(waiting_on) if waiting_on else ""
    return row


def add_missing_columns(conn: sqlite3.Connection) -> None:
    """A database of an older version: its minute rows gain ``held_seconds`` (NULL in the rows it
    holds: a GPU minute of a job stored before counts whole, as it did), then the split's columns
    and ``waiting_on`` (NULL: the ledger leaves those rows out, ``query/ledger.py``), in the
    order a new table has them. A category the split gained later (``unmeasured``) is added NULL
    too, which the rows with a split read as 0 (``minute_from``; ``TOTAL`` sums it so); the summed
    hours gain it as 0 (``ledger_tables.add_missing_columns``)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(history_minutes)")}
    for name, kind in [("held_seconds", "REAL"), *((c, "REAL") for c in split.COLUMNS), ("waiting_on", "TEXT")]:
        if name not in columns:
            conn.execute(f"ALTER TABLE history_minutes ADD COLUMN {name} {kind}")
    ledger_tables.add_missing_columns(conn)
