"""The alert book's tables: ``alerts`` (each alert's lifecycle) and ``alert_outbox`` (transitions
not yet delivered to the sinks).

``collector/alerts/book.py`` owns their meaning and calls these with plain values; labels,
annotations and transitions arrive as JSON text. Every statement runs inside the transaction the
store has open; nothing here commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

SCHEMA = """
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
        for statement in SCHEMA.split(";"):
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
