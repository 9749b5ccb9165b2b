"""The alert book: lifecycles, durable delivery, and what a collector restart does to them."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.collector.alerts.book import FIRING, RESOLVED, UPDATED, AlertBook, fingerprint
from nodeagent.collector.alerts.sinks import SinkDispatcher
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal
from tests.fakes.alert_sinks import CapturingSink

T0 = 1_800_000_000.0


def starved(firing: bool = True, severity: str = "warning", cause: str = "network", ratio: str = "0.12") -> AlertSignal:
    return AlertSignal(
        "GPUDataStarved", "node-a", "", firing, severity, {"cause": cause, "gpus": "0,1,2,3"}, {"ratio": ratio}
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "collector.sqlite"


@pytest.fixture
def conns(db: Path) -> Iterator[list[sqlite3.Connection]]:
    """Connections a test opens on the same file (one per simulated collector run)."""
    opened: list[sqlite3.Connection] = []
    yield opened
    for conn in opened:
        conn.close()


def open_book(db: Path, conns: list[sqlite3.Connection], sink: CapturingSink | SinkDispatcher) -> AlertBook:
    conn = sqlite3.connect(db)
    conns.append(conn)
    return AlertBook(AlertTables(conn), sinks=[sink], clock=lambda: T0)


def commit(book: AlertBook, conn: sqlite3.Connection) -> None:
    """What the ingest store does after each batch."""
    conn.commit()
    book.committed()


def test_lifecycle_fire_continue_update_resolve(db: Path, conns: list[sqlite3.Connection]) -> None:
    sink = CapturingSink()
    book = open_book(db, conns, sink)
    conn = conns[0]

    fired = book.observe([starved()], T0)
    assert [t.kind for t in fired] == [FIRING]
    assert sink.transitions == [], "nothing leaves before the store committed"
    commit(book, conn)
    alert = sink.transitions[0].alert
    assert alert.labels == {
        "alertname": "GPUDataStarved", "node": "node-a", "severity": "warning", "cause": "network", "gpus": "0,1,2,3",
    }  # fmt: skip
    assert alert.starts_at == T0
    assert alert.ends_at is None
    assert alert.fingerprint == fingerprint("GPUDataStarved", "node-a", "")

    # Still firing, new evidence: no transition, but the book keeps the evidence current.
    assert book.observe([starved(ratio="0.15")], T0 + 10) == []
    assert book.active()[0].annotations == {"ratio": "0.15"}
    # No signal for it: no change.
    assert book.observe([], T0 + 20) == []

    updated = book.observe([starved(severity="critical", ratio="0.25")], T0 + 30)
    assert [t.kind for t in updated] == [UPDATED]
    assert updated[0].previous is not None
    assert updated[0].previous.severity == "warning"
    assert updated[0].alert.severity == "critical"
    assert updated[0].alert.starts_at == T0, "an update is the same alert, not a new one"

    resolved = book.observe([starved(firing=False)], T0 + 40)
    assert [t.kind for t in resolved] == [RESOLVED]
    assert resolved[0].alert.ends_at == T0 + 40
    commit(book, conn)
    assert [t.kind for t in sink.transitions] == [FIRING, UPDATED, RESOLVED]
    assert len({t.id for t in sink.transitions}) == 3
    assert book.active() == []
    assert book.observe([starved(firing=False)], T0 + 50) == [], "resolving what does not fire does nothing"

    refired = book.observe([starved()], T0 + 60)
    assert refired[0].kind == FIRING
    assert refired[0].alert.starts_at == T0 + 60
    assert refired[0].id not in {t.id for t in sink.transitions}
    recent = book.recent(10)
    assert [(a.starts_at, a.ends_at) for a in recent] == [(T0 + 60, None), (T0, T0 + 40)]
    json.dumps([a.to_plain() for a in recent])
    json.dumps(refired[0].to_plain())


def test_instances_are_told_apart_by_key_and_node(db: Path, conns: list[sqlite3.Connection]) -> None:
    book = open_book(db, conns, CapturingSink())
    signals = [
        AlertSignal("NVLinkDown", "node-a", "nvlink:gpu0:link1", True),
        AlertSignal("NVLinkDown", "node-a", "nvlink:gpu0:link2", True),
        AlertSignal("NVLinkDown", "node-b", "nvlink:gpu0:link1", True),
    ]
    assert len(book.observe(signals, T0)) == 3
    assert book.active()[0].labels["subject"] == "nvlink:gpu0:link1"
    resolved = book.resolve_node("node-a", ["NVLinkDown"], T0 + 5)
    assert sorted(t.alert.key for t in resolved) == ["nvlink:gpu0:link1", "nvlink:gpu0:link2"]
    assert [(a.node_id, a.key) for a in book.active()] == [("node-b", "nvlink:gpu0:link1")]


def test_restart_neither_loses_nor_repeats(db: Path, conns: list[sqlite3.Connection]) -> None:
    first = CapturingSink()
    book = open_book(db, conns, first)
    book.observe([starved(), AlertSignal("GPULost", "node-a", "gpu:3", True, "critical")], T0)
    book.observe([AlertSignal("GPULost", "node-a", "gpu:3", False)], T0 + 5)
    commit(book, conns[0])
    assert first.kinds == [(FIRING, "GPUDataStarved", ""), (FIRING, "GPULost", "gpu:3"), (RESOLVED, "GPULost", "gpu:3")]
    # Orderly shutdown: deliveries recorded, last commit.
    book.record_deliveries()
    conns[0].commit()
    conns[0].close()

    second = CapturingSink()
    book = open_book(db, conns, second)
    assert second.transitions == [], "delivered before the restart: not sent again"
    [alert] = book.active()
    assert (alert.name, alert.starts_at, alert.ends_at) == ("GPUDataStarved", T0, None)
    assert book.observe([starved()], T0 + 100) == [], "still firing: the same alert goes on"
    book.observe([starved(firing=False)], T0 + 200)
    commit(book, conns[1])
    [resolved] = second.transitions
    assert resolved.kind == RESOLVED
    assert resolved.alert.starts_at == T0
    assert resolved.alert.ends_at == T0 + 200


def test_crash_after_commit_redelivers_the_same_transition_once(db: Path, conns: list[sqlite3.Connection]) -> None:
    first = CapturingSink()
    book = open_book(db, conns, first)
    book.observe([starved()], T0)
    commit(book, conns[0])
    # Crash: the delivery happened but was never recorded.
    conns[0].close()

    second = CapturingSink()
    book = open_book(db, conns, second)
    assert [t.id for t in second.transitions] == [t.id for t in first.transitions], "same id: receivers can dedupe"
    book.observe([], T0 + 1)  # the store's next batch records the delivery
    conns[1].commit()
    conns[1].close()

    third = CapturingSink()
    open_book(db, conns, third)
    assert third.transitions == []


def test_crash_before_commit_sends_nothing_and_keeps_nothing(db: Path, conns: list[sqlite3.Connection]) -> None:
    sink = CapturingSink()
    book = open_book(db, conns, sink)
    book.observe([starved()], T0)
    conns[0].close()  # never committed
    assert sink.transitions == []
    book = open_book(db, conns, sink)
    assert book.active() == []


def test_rollback_forgets_the_transaction(db: Path, conns: list[sqlite3.Connection]) -> None:
    sink = CapturingSink()
    book = open_book(db, conns, sink)
    book.observe([starved()], T0)
    commit(book, conns[0])
    # This batch also records the delivery above; the rollback takes that away too.
    book.observe([starved(firing=False), AlertSignal("NodeDown", "node-b", "", True, "critical")], T0 + 1)
    conns[0].rollback()
    book.rolled_back()
    book.committed()
    assert sink.kinds == [(FIRING, "GPUDataStarved", "")]
    assert [a.name for a in book.active()] == ["GPUDataStarved"]
    outbox = "SELECT COUNT(*) FROM alert_outbox"
    assert conns[0].execute(outbox).fetchone() == (1,)
    book.observe([], T0 + 2)
    conns[0].commit()
    assert conns[0].execute(outbox).fetchone() == (0,), "the delivery is recorded again in the next batch"


def test_a_failing_sink_does_not_break_ingest(db: Path, conns: list[sqlite3.Connection]) -> None:
    broken, good = CapturingSink("broken", fail=True), CapturingSink("good")
    conn = sqlite3.connect(db)
    conns.append(conn)
    book = AlertBook(AlertTables(conn), sinks=[broken, good])
    book.observe([starved()], T0)
    commit(book, conn)
    assert good.kinds == [(FIRING, "GPUDataStarved", "")]


def test_dispatcher_acknowledgements_clear_the_outbox(db: Path, conns: list[sqlite3.Connection]) -> None:
    sink = CapturingSink()
    dispatcher = SinkDispatcher([sink])
    book = open_book(db, conns, dispatcher)
    dispatcher.start()
    try:
        book.observe([starved()], T0)
        commit(book, conns[0])
        deadline = time.monotonic() + 5
        while not sink.transitions and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sink.kinds == [(FIRING, "GPUDataStarved", "")]
    finally:
        assert dispatcher.stop(5)
    outbox = "SELECT COUNT(*) FROM alert_outbox"
    assert conns[0].execute(outbox).fetchone() == (1,)
    book.observe([], T0 + 1)
    conns[0].commit()
    assert conns[0].execute(outbox).fetchone() == (0,)


def test_resolved_alerts_are_pruned_after_retention(db: Path, conns: list[sqlite3.Connection]) -> None:
    conn = sqlite3.connect(db)
    conns.append(conn)
    book = AlertBook(AlertTables(conn), clock=lambda: T0 + 30 * 86400, retention_seconds=86400)
    book.observe([starved()], T0)
    book.observe([starved(firing=False)], T0 + 10)
    book.observe([AlertSignal("NodeDown", "node-b", "", True, "critical")], T0 + 20)
    book.observe([], T0 + 86400 + 3600 * 2)
    assert [a.name for a in book.recent(10)] == ["NodeDown"], "firing alerts are never pruned"


def test_the_book_never_commits_the_stores_transaction(db: Path, conns: list[sqlite3.Connection]) -> None:
    conn = sqlite3.connect(db)
    conns.append(conn)
    conn.execute("CREATE TABLE reports (seq INTEGER)")
    conn.commit()
    conn.execute("INSERT INTO reports VALUES (1)")  # the store's batch, open
    book = AlertBook(AlertTables(conn))
    book.observe([starved()], T0)
    book.record_deliveries()
    conn.rollback()
    assert conn.execute("SELECT COUNT(*) FROM reports").fetchone() == (0,)
    assert AlertBook(AlertTables(conn)).active() == []
