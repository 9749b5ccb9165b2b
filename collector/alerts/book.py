"""The alert book: turns rules' signals into alert lifecycles (firing -> resolved), persists them
in SQLite and hands every transition to the sinks once it is durable.

Durability contract with the ingest store, which owns the connection and its transactions:

1. ``observe`` (and ``resolve_node``) write alert rows and an outbox row per transition through
   the store's ``AlertTables`` (``collector/store/alert_tables.py`` holds their SQL), inside the store's
   open transaction. The book never commits.
2. After the store has committed, it calls ``committed()``: the transitions of that transaction go
   to the sinks. (After a rollback it calls ``rolled_back()``: they are forgotten.)
3. Sinks report transitions done (at once for synchronous sinks, later for a ``SinkDispatcher``);
   the book deletes their outbox rows in the next transaction (``record_deliveries``).

A restart therefore loses nothing and repeats nothing: firing alerts are loaded back from the
table, and only transitions whose delivery was never recorded go out again, with the same id, so
a receiver that saw one already can drop it (webhooks carry the id; Alertmanager is idempotent).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import structlog

from nodeagent.collector.alerts.alert import Alert, fingerprint, plain_alert
from nodeagent.collector.alerts.lifecycle import FIRING, RESOLVED, UPDATED, alert_labels, next_transition
from nodeagent.collector.alerts.sinks.base import DeferredSink, Sink, rfc3339
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal

DEFAULT_RETENTION_SECONDS: Final = 7 * 86400.0
_PRUNE_EVERY_SECONDS: Final = 3600.0

_log = structlog.get_logger("collector.alerts")


@dataclass(frozen=True, slots=True)
class Transition:
    # Stable and unique: the same on every delivery attempt and after a restart (receivers dedupe on it).
    id: str
    # "firing" (a new alert), "updated" (severity or labels changed while firing), "resolved".
    kind: str
    alert: Alert
    # For "updated": the alert as it was before (a receiver keyed on labels retires that one).
    previous: Alert | None
    at: float

    def to_plain(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "at_unix_seconds": self.at,
            "at": rfc3339(self.at),
            "alert": self.alert.to_plain(),
            "previous": None if self.previous is None else self.previous.to_plain(),
        }

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any]) -> Transition:
        previous = plain.get("previous")
        return cls(
            id=plain["id"],
            kind=plain["kind"],
            alert=plain_alert(plain["alert"]),
            previous=None if previous is None else plain_alert(previous),
            at=float(plain["at_unix_seconds"]),
        )


class AlertBook:
    """Alert state of the collector. Not thread-safe: one thread (the ingest store's) calls
    everything except ``acknowledge``, which sinks may call from theirs.

    Make it before the store opens its first batch: its tables are created then, outside any
    transaction (SQLite applies DDL at once there), so no rollback can take them away."""

    def __init__(
        self,
        tables: AlertTables,
        *,
        sinks: Sequence[Sink] = (),
        clock: Callable[[], float] = time.time,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
    ) -> None:
        self._tables = tables
        self._sinks = tuple(sinks)
        self._clock = clock
        self._retention_seconds = retention_seconds
        self._firing: dict[tuple[str, str, str], _Entry] = {}
        self._pending: list[Transition] = []
        # Ids of delivered transitions, appended by sinks' threads, written by the owner's thread.
        self._acked: deque[str] = deque()
        # Transition id -> deferred sinks still to report it done.
        self._outstanding: dict[str, int] = {}
        # Deliveries recorded in the open transaction: recorded again if it is rolled back.
        self._recorded: list[str] = []
        self._deferred = sum(1 for sink in self._sinks if isinstance(sink, DeferredSink))
        self._next_prune = 0.0
        tables.create()
        for sink in self._sinks:
            if isinstance(sink, DeferredSink):
                sink.add_done_listener(self.acknowledge)
        self._load()
        # What a previous run committed but never saw delivered goes out again, under the same ids.
        self._pending = self._undelivered()
        if self._pending:
            self.committed()

    # -- the ingest path --

    def observe(self, signals: Iterable[AlertSignal], now: float) -> list[Transition]:
        """Apply one evaluation's signals: firing starts or continues an alert, not firing resolves
        it, no signal changes nothing. Writes into the open transaction; returns the transitions."""
        if self._acked:
            self.record_deliveries()
        out: list[Transition] = []
        for signal in signals:
            entry = self._firing.get((signal.name, signal.node_id, signal.key))
            kind = next_transition(None if entry is None else entry.alert, signal)
            if kind == FIRING:
                out.append(self._start(signal, now))
            elif entry is None:
                continue
            elif kind == UPDATED:
                out.append(self._update(entry, signal, now))
            elif kind == RESOLVED:
                out.append(self._resolve(entry, now))
            elif signal.annotations != entry.alert.annotations:
                # Evidence moves every evaluation: kept current (sinks see it on the next re-send), no transition.
                entry.alert = replace(entry.alert, annotations=dict(signal.annotations))
                self._tables.set_annotations(entry.row_id, _dumps(signal.annotations))
        if now >= self._next_prune:
            self._prune(now)
        return out

    def resolve_node(self, node_id: str, names: Iterable[str] | None, now: float) -> list[Transition]:
        """Resolve the node's firing alerts with these names (all of them when ``names`` is None):
        a node taken out of the fleet, or rules that lost their state."""
        wanted = None if names is None else set(names)
        doomed = [
            entry
            for (name, node, _key), entry in self._firing.items()
            if node == node_id and (wanted is None or name in wanted)
        ]
        return [self._resolve(entry, now) for entry in doomed]

    def committed(self) -> None:
        """The store committed: hand the transitions of that transaction to the sinks."""
        self._recorded = []
        batch, self._pending = self._pending, []
        if not batch:
            return
        if self._deferred:
            for transition in batch:
                self._outstanding[transition.id] = self._deferred
        for sink in self._sinks:
            try:
                sink.deliver(batch)
            except Exception as err:  # a broken sink must not break ingest
                _log.error("alert sink failed", sink=sink.name, error=str(err), transitions=len(batch))
        if not self._deferred:
            self._acked.extend(t.id for t in batch)

    def rolled_back(self) -> None:
        """The store rolled back: forget the transitions of that transaction and reload the state."""
        self._pending = []
        self._acked.extend(self._recorded)
        self._recorded = []
        self._firing.clear()
        self._load()

    def acknowledge(self, transition_ids: Sequence[str]) -> None:
        """A deferred sink finished these transitions (sent or gave up). Thread-safe."""
        self._acked.extend(transition_ids)

    def record_deliveries(self) -> None:
        """Write finished deliveries into the open transaction (``observe`` does it too); call it
        before the store's last commit on shutdown so a restart does not send them again."""
        done: list[str] = []
        while self._acked:
            transition_id = self._acked.popleft()
            left = self._outstanding.get(transition_id)
            if left is not None and left > 1:
                self._outstanding[transition_id] = left - 1
                continue
            self._outstanding.pop(transition_id, None)
            done.append(transition_id)
        if done:
            self._tables.delete_outbox(done)
            self._recorded.extend(done)

    # -- queries --

    def active(self) -> list[Alert]:
        """Firing alerts, oldest first."""
        return sorted((entry.alert for entry in self._firing.values()), key=lambda a: (a.starts_at, a.fingerprint))

    def recent(self, limit: int = 100) -> list[Alert]:
        """Firing alerts, then resolved ones, most recently ended first."""
        return [_alert_from_row(row) for row in self._tables.recent_alerts(limit)]

    # -- transitions --

    def _start(self, signal: AlertSignal, now: float) -> Transition:
        alert = Alert(
            name=signal.name,
            node_id=signal.node_id,
            key=signal.key,
            severity=signal.severity,
            labels=alert_labels(signal),
            annotations=dict(signal.annotations),
            starts_at=now,
            ends_at=None,
            fingerprint=fingerprint(signal.name, signal.node_id, signal.key),
        )
        row_id = self._tables.insert_alert(
            alert.fingerprint,
            alert.name,
            alert.node_id,
            alert.key,
            alert.severity,
            _dumps(alert.labels),
            _dumps(alert.annotations),
            now,
        )
        entry = _Entry(row_id, alert, 0)
        self._firing[(alert.name, alert.node_id, alert.key)] = entry
        return self._record(entry, FIRING, None, now)

    def _update(self, entry: _Entry, signal: AlertSignal, now: float) -> Transition:
        alert = entry.alert
        labels = alert_labels(signal)
        entry.alert = replace(alert, severity=signal.severity, labels=labels, annotations=dict(signal.annotations))
        entry.revision += 1
        self._tables.update_alert(
            entry.row_id, signal.severity, _dumps(labels), _dumps(signal.annotations), entry.revision
        )
        return self._record(entry, UPDATED, alert, now)

    def _resolve(self, entry: _Entry, now: float) -> Transition:
        del self._firing[(entry.alert.name, entry.alert.node_id, entry.alert.key)]
        entry.alert = replace(entry.alert, ends_at=max(now, entry.alert.starts_at))
        entry.revision += 1
        self._tables.end_alert(entry.row_id, entry.alert.ends_at, entry.revision)
        return self._record(entry, RESOLVED, None, now)

    def _record(self, entry: _Entry, kind: str, previous: Alert | None, now: float) -> Transition:
        transition = Transition(
            id=f"{entry.alert.fingerprint}-{entry.row_id}-{entry.revision}",
            kind=kind,
            alert=entry.alert,
            previous=previous,
            at=now,
        )
        self._tables.put_outbox(transition.id, self._clock(), _dumps(transition.to_plain()))
        self._pending.append(transition)
        return transition

    # -- storage --

    def _load(self) -> None:
        for row in self._tables.firing_alerts():
            alert = _alert_from_row(row)
            self._firing[(alert.name, alert.node_id, alert.key)] = _Entry(int(row[9]), alert, int(row[10]))

    def _undelivered(self) -> list[Transition]:
        out: list[Transition] = []
        for text in self._tables.outbox():
            try:
                out.append(Transition.from_plain(json.loads(text)))
            except (ValueError, KeyError, TypeError) as err:
                _log.error("dropping unreadable alert outbox row", error=str(err))
        return out

    def _prune(self, now: float) -> None:
        """Forget resolved alerts past retention, and outbox rows nobody will ever acknowledge."""
        cutoff = min(now, self._clock()) - self._retention_seconds
        self._tables.prune(cutoff)
        self._next_prune = now + _PRUNE_EVERY_SECONDS


@dataclass(slots=True)
class _Entry:
    """A firing alert and where it lives (mutable on purpose: updated in place while firing)."""

    row_id: int
    alert: Alert
    revision: int


def _alert_from_row(row: Sequence[Any]) -> Alert:
    return Alert(
        name=row[0],
        node_id=row[1],
        key=row[2],
        severity=row[3],
        labels=json.loads(row[4]),
        annotations=json.loads(row[5]),
        starts_at=float(row[6]),
        ends_at=None if row[7] is None else float(row[7]),
        fingerprint=row[8],
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
