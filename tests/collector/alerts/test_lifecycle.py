"""Replay shows the alert lifecycle the collector's book applies: the same transitions, the same kinds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nodeagent.collector.alerts.book import AlertBook
from nodeagent.collector.replay import replay_alerts
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal


def _evaluations() -> list[tuple[float, list[AlertSignal]]]:
    def starved(firing: bool, tier: str = "moderate", severity: str = "warning", ratio: str = "0.3") -> AlertSignal:
        labels = {"cause": "network", "tier": tier} if firing else {}
        return AlertSignal("GPUDataStarved", "n1", "gpu0", firing, severity, labels, {"ratio": ratio})

    def hot(firing: bool) -> AlertSignal:
        return AlertSignal("GPUThermal", "n1", "gpu1", firing, "critical", {}, {})

    return [
        (10.0, [starved(False), hot(False)]),
        (20.0, [starved(True), hot(True)]),
        (30.0, [starved(True, ratio="0.4")]),  # evidence moved: no transition
        (40.0, [starved(True, "high")]),  # labels changed
        (50.0, [starved(True, "high", "critical")]),  # severity changed
        (60.0, [starved(False), hot(False)]),
        (70.0, [starved(False)]),
    ]


def test_replay_and_the_book_make_the_same_transitions(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "alerts.db")
    book = AlertBook(AlertTables(conn))
    from_book = [
        (now, t.kind, t.alert.name, t.alert.severity)
        for now, signals in _evaluations()
        for t in book.observe(signals, now)
    ]
    from_replay = [(t.time_unix_seconds, t.status, t.name, t.severity) for t in replay_alerts(_evaluations())]
    assert from_replay == from_book
    assert [kind for _, kind, name, _ in from_book if name == "GPUDataStarved"] == [
        "firing", "updated", "updated", "resolved",
    ]  # fmt: skip
