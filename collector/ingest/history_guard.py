"""Whether the collector can keep its history; when it cannot, the history stops and ingest goes on.

The history is secondary: a damaged history table ("database disk image is malformed" in a page
of ``history_minutes``, a stored report that no longer decompresses) must not stop every node's
reports from being stored and acknowledged, nor the collector from starting. So the history's
reads at start-up and its writes in a flush go through this guard. The first failure stops the
history for the rest of the run: an error log saying what failed and how to rebuild it, and the
``HistoryUnavailable`` alert through the alert book like any other (node ``""``: the collector
itself). Ingest, dedup, the detector, the other alerts and remote write go on; the per-minute
rows and stored reports of this run are not kept.

SQLite ends the whole transaction at the first sign of damage (later writes in it, and its
COMMIT, fail), so a savepoint cannot keep the rest of a flush: the flusher writes the same
flush again at once without its history (``Flusher._write``).

The operator rebuilds it with the collector stopped: ``nodeagent-collector reset-history --db
PATH`` deletes the history tables, keeping node state, watermarks and alerts
(docs/history.md). The first flush that writes history again resolves the alert.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

import structlog

from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.history_tables import HistoryDamagedError
from nodeagent.core.detector.alert_signals import AlertSignal

log = structlog.get_logger("nodeagent.collector")

T = TypeVar("T")

HISTORY_UNAVAILABLE: Final = "HistoryUnavailable"
REBUILD: Final = "stop the collector, run `nodeagent-collector reset-history --db PATH`, start it again"


class HistoryGuard:
    """The history's state for one run: kept, or stopped for damage (and why)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        # Why the history stopped this run (None while it is kept).
        self.error: str | None = None
        self._signals: list[AlertSignal] = []
        # A HistoryUnavailable of an earlier run is resolved by this run's first history written
        # (or at the first commit when the history is off: there is nothing to be unavailable).
        self._resolve_pending = True

    @property
    def available(self) -> bool:
        return self.enabled and self.error is None

    def at_start(self, writer: StoreWriter, read: Callable[[], T]) -> T | None:
        """A start-up read of the history, on the store's thread; None when it is damaged (or
        already stopped, or off)."""
        if not self.available:
            return None
        try:
            return writer.call_sync(read)
        except HistoryDamagedError as err:
            self.failed(err, "reading it at start-up")
            return None

    def failed(self, err: HistoryDamagedError, during: str) -> None:
        """Stop the history for this run: log it once, raise the alert."""
        if self.error is not None:
            return
        self.error = str(err)
        self._resolve_pending = False
        log.error(
            "history unavailable: stopped for this run; ingest and alerts go on",
            during=during, error=self.error, rebuild=REBUILD,
        )  # fmt: skip
        self._signals.append(_signal(firing=True, error=self.error))

    def committed(self, wrote_history: bool, firing: Callable[[], bool]) -> None:
        """A flush committed (``wrote_history``: with history): an earlier run's alert, when
        ``firing()`` says the book holds one, goes with the next flush."""
        if self._resolve_pending and (wrote_history or not self.enabled):
            self._resolve_pending = False
            if firing():
                self._signals.append(_signal(firing=False))

    def take_signals(self) -> list[AlertSignal]:
        """Signals for the alert book since the last call."""
        signals, self._signals = self._signals, []
        return signals


def _signal(firing: bool, error: str = "") -> AlertSignal:
    annotations = {}
    if firing:
        annotations = {
            "summary": "the collector's history cannot be read or written; history is stopped, ingest goes on",
            "error": error[:500],
            "rebuild": REBUILD,
        }
    return AlertSignal(HISTORY_UNAVAILABLE, "", "", firing, "warning", annotations=annotations)
