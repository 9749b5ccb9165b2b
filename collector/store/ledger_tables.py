"""``history_ledger``: the history's split summed per node and hour, so that a month's ledger of a
thousand nodes reads thousands of rows, not a hundred million minutes.

A node's hour is summed from its GPU minute rows (by the jobs they name and the nodes they waited
on) once the node's reports moved past it (``HistoryBatch.compact``), in the same flush
transaction that writes its last minutes: delete and insert, so summing an hour again (a flush
written twice, an hour revisited) gives the same rows. The rows of an hour are what its minutes
said then; they are pruned with the minutes (``prune``, ``sweep``).

``groups`` answers the ledger's read per node: the summed hours inside the span up to the node's
last summed hour, its minutes for the rest (the span's ragged ends, and the hour it is in now or
stopped in), so every held minute is counted once; every node with minutes, retired or not.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Callable, Generator, Iterable
from typing import Any, Final

from nodeagent.collector.history import split

HOUR_SECONDS: Final = 3600
_SUMS: Final = ", ".join(f"TOTAL({c})" for c in split.COLUMNS)
SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS history_ledger (
    node_id TEXT NOT NULL,
    hour INTEGER NOT NULL,
    jobs TEXT NOT NULL,
    waiting_on TEXT NOT NULL,
    {", ".join(f"{c} REAL NOT NULL" for c in split.COLUMNS)},
    first_minute INTEGER NOT NULL,
    last_minute INTEGER NOT NULL,
    PRIMARY KEY (node_id, hour, jobs, waiting_on)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_job_owners (
    job TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    namespace TEXT NOT NULL,
    last_minute INTEGER NOT NULL
) WITHOUT ROWID;
"""
# A job's owner as its nodes name it: an empty name never replaces one a node gave.
_UPSERT_OWNER: Final = (
    "INSERT INTO history_job_owners VALUES (?,?,?,?) ON CONFLICT(job) DO UPDATE SET"
    " account=CASE WHEN excluded.account!='' THEN excluded.account ELSE account END,"
    " namespace=CASE WHEN excluded.namespace!='' THEN excluded.namespace ELSE namespace END,"
    " last_minute=MAX(last_minute, excluded.last_minute)"
)
# A node's held GPU minutes in [since, until), grouped as the ledger groups them.
_MINUTE_GROUPS: Final = (
    f"SELECT jobs, node_id, COALESCE(waiting_on, ''), {_SUMS}, MIN(minute), MAX(minute) FROM history_minutes"
    f" WHERE node_id=? AND minute>=? AND minute<? AND gpu>=0 AND jobs!='' AND {split.COLUMNS[0]} IS NOT NULL"
    " GROUP BY jobs, COALESCE(waiting_on, '')"
)
# Every node with minutes, one seek of the primary key each (DISTINCT would read every row).
_NODES: Final = (
    "WITH RECURSIVE n(id) AS (SELECT MIN(node_id) FROM history_minutes UNION ALL"
    " SELECT (SELECT MIN(node_id) FROM history_minutes WHERE node_id > n.id) FROM n WHERE n.id IS NOT NULL)"
    " SELECT id FROM n WHERE id IS NOT NULL"
)
_HOUR_GROUPS: Final = (
    f"SELECT jobs, node_id, waiting_on, {', '.join(split.COLUMNS)}, first_minute, last_minute FROM history_ledger"
    " WHERE node_id=? AND hour>=? AND hour<?"
)


_OWNER: Final = "SELECT account, namespace FROM history_job_owners WHERE job=?"
# By name: a table of an older version gained its later columns at its end (``add_missing_columns``).
_LEDGER_COLUMNS: Final = ", ".join(
    ("node_id", "hour", "jobs", "waiting_on", *split.COLUMNS, "first_minute", "last_minute")
)


def add_missing_columns(conn: sqlite3.Connection) -> None:
    """A database of an older version: ``history_ledger`` gains the split's later categories
    (``unmeasured_seconds``), 0 in the hours it holds (summed before anything was unmeasured)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(history_ledger)")}
    for name in split.COLUMNS:
        if columns and name not in columns:
            conn.execute(f"ALTER TABLE history_ledger ADD COLUMN {name} REAL NOT NULL DEFAULT 0")


class LedgerTables:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def compact(self, node_id: str, hour: int) -> None:
        """Sum the node's hour from its minutes (inside the flush transaction)."""
        conn = self._conn
        conn.execute("DELETE FROM history_ledger WHERE node_id=? AND hour=?", (node_id, hour))
        conn.execute(
            f"INSERT INTO history_ledger ({_LEDGER_COLUMNS})"
            f" SELECT node_id, ?, jobs, COALESCE(waiting_on, ''), {_SUMS}, MIN(minute),"
            f" MAX(minute) FROM history_minutes WHERE node_id=? AND minute>=? AND minute<? AND gpu>=0 AND jobs!=''"
            f" AND {split.COLUMNS[0]} IS NOT NULL GROUP BY jobs, COALESCE(waiting_on, '')",
            (hour, node_id, hour, hour + HOUR_SECONDS),
        )

    def note_owners(self, owners: Iterable[tuple[str, str, str, str, int]]) -> None:
        """Whom each job is billed to, (node id, job, account, namespace, minute) (inside the flush transaction)."""
        self._conn.executemany(_UPSERT_OWNER, [owner[1:] for owner in owners])

    def owners(self) -> Callable[[str], tuple[str, str]]:
        """A job's (account, namespace), ("", "") for one without; each job asked once, by its
        key (a month of a busy cluster's jobs is never read whole). None are known in a file
        written before the table was, opened read-only."""
        conn = self._conn
        known: dict[str, tuple[str, str]] = {}

        def owner(job: str) -> tuple[str, str]:
            found = known.get(job)
            if found is None:
                try:
                    row = conn.execute(_OWNER, (job,)).fetchone()
                except sqlite3.OperationalError as err:
                    if "no such table" not in str(err):
                        raise
                    row = None
                found = known[job] = (str(row[0]), str(row[1])) if row else ("", "")
            return found

        return owner

    def prune(self, node_id: str | None, minutes_before: float) -> None:
        """Hours whose minutes are all past retention go with them (``node_id`` None: every node's,
        and the owners of jobs no minute kept names)."""
        if node_id is None:
            self._conn.execute("DELETE FROM history_ledger WHERE hour + ? <= ?", (HOUR_SECONDS, minutes_before))
            # An owner goes with the last hour that counts its job (its minutes', summed or not).
            self._conn.execute(
                "DELETE FROM history_job_owners WHERE last_minute - last_minute % ? + ? <= ?",
                (HOUR_SECONDS, HOUR_SECONDS, minutes_before),
            )
        else:
            self._conn.execute(
                "DELETE FROM history_ledger WHERE node_id=? AND hour + ? <= ?", (node_id, HOUR_SECONDS, minutes_before)
            )

    def groups(self, since: float, until: float | None, check: Any = None) -> Generator[tuple[Any, ...], None, None]:
        """(jobs, node, waiting_on, seconds per ``split.COLUMNS``..., first minute, last minute)
        of every node's held GPU time in [since, until); ``check``: called between nodes (the
        read's deadline)."""
        end = math.inf if until is None else until
        first_hour = math.ceil(since / HOUR_SECONDS) * HOUR_SECONDS
        last_hour = math.floor(end / HOUR_SECONDS) * HOUR_SECONDS if end < math.inf else math.inf
        conn = self._conn
        nodes = [str(n) for (n,) in conn.execute(_NODES)]
        for node_id in nodes:
            if check is not None:
                check()
            (summed,) = conn.execute("SELECT MAX(hour) FROM history_ledger WHERE node_id=?", (node_id,)).fetchone()
            boundary = -math.inf if summed is None else int(summed) + HOUR_SECONDS
            if first_hour < last_hour:
                hours_end = min(max(boundary, first_hour), last_hour)
                spans = [(since, first_hour), (hours_end, end)]
                if hours_end > first_hour:
                    yield from conn.execute(_HOUR_GROUPS, (node_id, first_hour, hours_end))
            else:
                spans = [(since, end)]
            for start, stop in spans:
                if stop > start:
                    args = (node_id, start, _bound(stop))
                    with contextlib.closing(conn.execute(_MINUTE_GROUPS, args)) as rows:
                        yield from rows


def _bound(value: float) -> float:
    return 2.0**62 if value == math.inf else value
