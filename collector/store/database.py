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

One collector owns the file: ``Store`` takes an exclusive lock on ``<db>.lock`` before it opens
the database for writing and drops it on close (``core/program/lock_file.py``; a dead owner's
lock goes with it). A second collector on the same ``--db`` is refused with the holder's pid:
both would otherwise believe their own watermarks. ``replay --node`` opens the file read-only
and takes no lock.

What the store loads is checked as it opens: each commit counts one generation, kept beside the
file too (``generation``: a database that lost commits it had made, its ``-wal`` deleted after a
crash, is reported), and the watermarks against their checksums and the node rows
(``watermark_check``).

All SQLite work happens on one dedicated thread (``StoreWriter``): the event loop never waits on
the disk, and the connection is never shared between threads. The tables are the store's
attributes, one object per kind (``nodes``, ``history``, ``alerts``), on its one connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from nodeagent.collector.store import history_tables, nodes, watermark_check
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.collector.store.generation import Generation
from nodeagent.collector.store.history_tables import HistoryTables
from nodeagent.collector.store.nodes import NodeRow, NodeTables
from nodeagent.core.program.lock_file import LockFile
from nodeagent.v1 import nodeagent_pb2 as pb

T = TypeVar("T")

# What binding or storing one row can raise; anything else (a full disk, a lock) fails the batch.
_ROW_ERRORS = (OverflowError, ValueError, TypeError, sqlite3.DataError, sqlite3.IntegrityError, sqlite3.InterfaceError)
# Checkpoint early when the filesystem has less than the WAL may grow to, plus this.
FREE_SPACE_MARGIN_BYTES = 1024 * 1024
# ... and only once the WAL holds this much: a checkpoint costs a few device flushes.
EARLY_CHECKPOINT_WAL_BYTES = 64 * 1024


class Store:
    """The SQLite file and its tables; used only from the writer thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # ``LockedError`` when another process holds the database.
        self.lock = LockFile(lock_path(path), f"database {path}")
        try:
            self._open(path)
        except sqlite3.DatabaseError as err:  # not a database, damaged, its files unusable ("disk I/O error")
            self.lock.release()
            raise StoreUnreadableError(str(err)) from err
        except BaseException:
            self.lock.release()
            raise

    def _open(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA busy_timeout=5000")
        self.conn.executescript(nodes.SCHEMA)
        watermark_check.add_checksums(self.conn)
        self.conn.executescript(history_tables.SCHEMA)
        history_tables.add_missing_columns(self.conn)
        # Before anything commits: whether the database lost commits it had made (``generation``).
        self.generation = Generation(self.conn, path)
        self.wal_path = path.with_name(path.name + "-wal")
        page_bytes = self.conn.execute("PRAGMA page_size").fetchone()[0]
        auto_pages = self.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.wal_limit_bytes = int(page_bytes) * int(auto_pages)
        self.nodes = NodeTables(self.conn)
        self.history = HistoryTables(self.conn)
        # The alert book creates its own tables (``AlertTables.create``) when the collector opens it.
        self.alerts = AlertTables(self.conn)

    def write(self, batch: Sequence[NodeRow], before_commit: Callable[[], None] | None = None) -> dict[str, str]:
        """One transaction: the rows, their watermarks, and what ``before_commit`` writes (history, alerts).

        Returns the rows left out because they cannot be written (node id -> error); everything
        else is committed. Raises when the transaction as a whole fails (and then nothing is)."""
        conn = self.conn
        refused: dict[str, str] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("SAVEPOINT batch")
            try:
                self.nodes.write(batch)
            except _ROW_ERRORS:
                conn.execute("ROLLBACK TO batch")
                refused = self._rows_one_by_one(batch)
            conn.execute("RELEASE batch")
            if before_commit is not None:
                before_commit()
            self.generation.bump(conn)
            conn.execute("COMMIT")
            self.generation.committed()
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

    def _rows_one_by_one(self, batch: Sequence[NodeRow]) -> dict[str, str]:
        refused: dict[str, str] = {}
        for row in batch:
            self.conn.execute("SAVEPOINT one")
            try:
                self.nodes.write((row,))
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

    def repairs(self) -> dict[str, int]:
        """What the store found damaged and repaired since it opened, by kind."""
        return {"watermark": self.nodes.watermarks_repaired}

    def close(self) -> None:
        try:
            self.conn.close()
            self.generation.close()
        finally:
            self.lock.release()


def lock_path(db_path: Path) -> Path:
    """The lock file beside the database, held by the collector that writes it."""
    return db_path.with_name(db_path.name + ".lock")


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
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            raws = HistoryTables(conn).last_reports(node_id, since_seconds)
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise StoreUnreadableError(str(err)) from err
    return [pb.NodeReport.FromString(raw) for raw in raws]


def reset_history(path: Path) -> tuple[int, int, str]:
    """Delete the history tables of the database at ``path`` and start them empty, keeping node
    state, watermarks, alerts and the generation (``nodeagent-collector reset-history``, after
    damage stopped the history). With the collector stopped: ``LockedError`` while one holds the
    file; ``StoreUnreadableError`` for a file that is not a collector's database. Returns the
    file's size before and after, and ``PRAGMA quick_check``'s verdict on what is left."""
    lock = LockFile(lock_path(path), f"database {path}")
    try:
        before = path.stat().st_size
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None)
        try:
            if conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'nodes'").fetchone() is None:
                raise StoreUnreadableError("not a collector database (no nodes table)")
            history_tables.forget_tables(conn)
        finally:
            conn.close()
        # A new connection reads the schema afresh; VACUUM writes only the tables it names, so
        # the history's pages, damaged or not, are left out of the file.
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("VACUUM")
            conn.executescript(history_tables.SCHEMA)
            check = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        finally:
            conn.close()
        return before, path.stat().st_size, check
    except sqlite3.DatabaseError as err:
        raise StoreUnreadableError(str(err)) from err
    finally:
        lock.release()


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
        try:
            self.store: Store = self._pool.submit(Store, path).result()
        except BaseException:
            self._pool.shutdown()
            raise

    async def call(self, func: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, func, *args)

    def call_sync(self, func: Callable[..., T], *args: object, timeout: float | None = None) -> T:
        """From a thread other than the event loop's; ``TimeoutError`` after ``timeout`` seconds."""
        return self._pool.submit(func, *args).result(timeout)

    def close(self) -> None:
        self._pool.submit(self.store.close).result()
        self._pool.shutdown()
