"""Reads for queries, beside the writer: read-only connections on threads of their own.

The flush's commit gates every acknowledgement, so nothing a query does may queue in front of
it: ``StoreWriter``'s thread and connection are the ingest path's alone. In WAL mode readers
and the writer do not block each other (a reader sees the last commit before its read began),
so queries read through their own connections, one per thread of a small pool, each opened
read-only (``mode=ro``, and ``query_only`` besides).

Every read has a deadline: SQLite's progress handler, called every ``PROGRESS_STEPS`` virtual
machine steps, interrupts the statement once it has passed, and the call raises
``ReadDeadlineError``. The Python work of the call (merging rows, building answers) runs on the
same thread, so it stays off the event loop; it checks ``ReadContext.check`` where it loops.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from nodeagent.collector.store.history_tables import HistoryTables

T = TypeVar("T")
P = ParamSpec("P")

# Threads (each with its connection) that serve queries; more queries wait for one.
READ_THREADS = 2
# SQLite virtual machine steps between two looks at the deadline (about 0.1-1 ms of work).
PROGRESS_STEPS = 10_000


class ReadDeadlineError(Exception):
    """A read ran past its deadline and was interrupted."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran past its {seconds:g} s bound")
        self.seconds = seconds


class ReadContext:
    """What a read is given on its thread: the tables on that thread's connection, and its deadline."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.history = HistoryTables(conn)
        self._conn = conn
        self.deadline = float("inf")
        self.seconds = 0.0

    def node_infos(self) -> dict[str, bytes]:
        """Each stored node's hello (a serialized ``NodeInfo``), as its row keeps it."""
        rows = self._conn.execute("SELECT node_id, info FROM nodes WHERE info IS NOT NULL").fetchall()
        return {str(node_id): bytes(info) for node_id, info in rows}

    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def check(self) -> None:
        """Raise ``ReadDeadlineError`` once the deadline has passed (for loops in Python)."""
        if self.expired():
            raise ReadDeadlineError(self.seconds)


class StoreReader:
    """Runs query reads on ``threads`` threads, each with its own read-only connection."""

    def __init__(self, path: Path, threads: int = READ_THREADS) -> None:
        self.path = path
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="nodeagent-read")

    async def call(
        self, seconds: float, func: Callable[Concatenate[ReadContext, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``func(context, *args)`` on a reader thread, within ``seconds`` of when it starts there
        (time waiting for a thread does not count); ``ReadDeadlineError`` past them."""
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, lambda: self._run(seconds, func, *args, **kwargs)
        )

    def call_blocking(
        self, seconds: float, func: Callable[Concatenate[ReadContext, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``call`` from a thread that is not the event loop's (an HTTP page's), waiting for it."""
        return self._pool.submit(lambda: self._run(seconds, func, *args, **kwargs)).result()

    def _run(
        self, seconds: float, func: Callable[Concatenate[ReadContext, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        context = self._context()
        context.seconds = seconds
        context.deadline = time.monotonic() + seconds
        try:
            return func(context, *args, **kwargs)
        except sqlite3.OperationalError as err:
            if context.expired():  # the progress handler interrupted it
                raise ReadDeadlineError(seconds) from err
            raise
        finally:
            context.deadline = float("inf")

    def _context(self) -> ReadContext:
        context: ReadContext | None = getattr(self._local, "context", None)
        if context is None:
            # Used only on this thread; closed from the one that closes the reader.
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA query_only=ON")
            conn.execute("PRAGMA busy_timeout=5000")
            context = ReadContext(conn)
            conn.set_progress_handler(context.expired, PROGRESS_STEPS)
            self._local.context = context
            with self._lock:
                self._connections.append(conn)
        return context

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
