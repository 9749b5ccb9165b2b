"""The store's generation: its count of commits, kept in the database and beside it, so that a
database which lost commits it had made says so at start instead of starting over silently.

The case it is for: a collector crashes (or is killed) with its latest commits in the ``-wal``
file, and the ``-wal`` is deleted before the next start (a cleanup script, a copy of the
database file alone). SQLite opens what is left without a word: every node, watermark and
report committed since the last checkpoint is gone, acknowledged ones included. A database
restored from an older copy is the same case.

Every flush that commits sets ``store_generation.generation`` one higher in its own transaction
(``bump``); once COMMIT has returned, and so is on the device (``synchronous=FULL``), the store
writes the new number into ``<db>.generation`` (``committed``). The sidecar is never ahead of
what the database holds durably: a crash or a power cut can leave it behind, never ahead, so it
raises no false alarm. It is written in place on every commit (the page cache keeps it across
a crash) and synced every ``SYNC_EVERY_SECONDS`` and at close, so after a power cut it may lag
that long: a deleted ``-wal`` after a power cut goes unnoticed only if every lost commit fell
in that window.

At start, a database whose generation is below the sidecar's lost commits. The store logs an
error naming both numbers and what may be missing, counts the lost commits
(``nodeagent_store_lost_commits_total``) and goes on with what the database holds: the
loss has happened whatever the collector does, and refusing to start would stop ingest for the
whole fleet (agents' spools would fill and drop) without bringing anything back. The sidecar is
then set to the database's generation, so the same loss is reported once. Replacing the
database on purpose: remove ``<db>.generation`` with it (docs/delivery.md).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Final

import structlog

log = structlog.get_logger("nodeagent.collector")

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS store_generation (
    only INTEGER PRIMARY KEY CHECK (only = 0),
    generation INTEGER NOT NULL
);
INSERT OR IGNORE INTO store_generation VALUES (0, 0);
"""
# The sidecar is synced at most this often (and at close); it is written after every commit.
SYNC_EVERY_SECONDS: Final = 10.0
_WIDTH: Final = 20  # digits: the sidecar is rewritten in place, always the same size


def sidecar_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".generation")


class Generation:
    """The database's generation and its sidecar; used on the store's thread only."""

    def __init__(self, conn: sqlite3.Connection, db_path: Path) -> None:
        conn.executescript(SCHEMA)
        self.value = int(conn.execute("SELECT generation FROM store_generation").fetchone()[0])
        self.path = sidecar_path(db_path)
        # Commits the sidecar says were made and the database no longer holds (0: none).
        self.lost_commits = 0
        recorded = _read(self.path)
        if recorded is not None and recorded > self.value:
            self.lost_commits = recorded - self.value
            log.error(
                "database lost commits it had made: acknowledged reports may be missing",
                db=str(db_path), generation=self.value, recorded=recorded, lost_commits=self.lost_commits,
                detail=(
                    f"{self.path.name} says {recorded} commits were made, the database holds {self.value}: "
                    "nodes, watermarks, history and alerts of the missing ones are gone (was its -wal file "
                    "deleted after a crash, or an older copy restored?); going on with what it holds"
                ),
            )  # fmt: skip
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._synced_at = 0.0
        self._failed = False
        self._record(sync=True)

    def bump(self, conn: sqlite3.Connection) -> None:
        """Inside the transaction about to commit: the database's generation one higher."""
        conn.execute("UPDATE store_generation SET generation = ?", (self.value + 1,))

    def committed(self) -> None:
        """That transaction committed: the sidecar says so (synced now and then)."""
        self.value += 1
        self._record(sync=time.monotonic() - self._synced_at >= SYNC_EVERY_SECONDS)

    def close(self) -> None:
        if self._fd is not None:
            self._record(sync=True)
            os.close(self._fd)
            self._fd = None

    def _record(self, sync: bool) -> None:
        if self._fd is None:
            return
        try:
            os.pwrite(self._fd, f"{self.value:0{_WIDTH}d}\n".encode(), 0)
            if sync:
                os.fsync(self._fd)
                self._synced_at = time.monotonic()
        except OSError as err:
            # A detector, not the data: ingest goes on; the next start may miss a loss.
            if not self._failed:
                log.warning("cannot write the database's generation file", path=str(self.path), error=str(err))
                self._failed = True


def _read(path: Path) -> int | None:
    """The sidecar's number; None when there is none or it cannot be read (a warning then)."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        log.warning("database generation file unreadable; not checked this time", path=str(path), error=str(err))
        return None
    if text.isdigit():
        return int(text)
    log.warning("database generation file malformed; not checked this time", path=str(path))
    return None
