"""A real Alertmanager (Debian's prometheus-alertmanager) on 127.0.0.1 receives the collector's
alerts through the book, the dispatcher and the Alertmanager sink, and sees them resolve."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from nodeagent.collector.alerts.book import AlertBook
from nodeagent.collector.alerts.sinks import AlertmanagerSink, SinkDispatcher
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal
from tests.fakes.alertmanager import alerts as _alerts
from tests.fakes.alertmanager import wait as _wait


def starved(firing: bool = True) -> AlertSignal:
    return AlertSignal(
        "GPUDataStarved",
        "gpu-node-7",
        "",
        firing,
        "critical",
        {"cause": "network", "gpus": "0,1,2,3,4,5,6,7", "jobs": "slurm:4242"},
        {"summary": "8 GPUs wait for data 34% of the time: network", "starvation_ratio": "0.34"},
    )


class Collector:
    """The alerting half of a collector run: a connection, the book, a dispatcher with the sink."""

    def __init__(self, db: Path, am_url: str) -> None:
        self.conn = sqlite3.connect(db)
        self.dispatcher = SinkDispatcher([AlertmanagerSink(am_url, resend_seconds=60, backoff=0.1)])
        self.book = AlertBook(AlertTables(self.conn), sinks=[self.dispatcher])
        self.dispatcher.start()

    def evaluate(self, signals: list[AlertSignal], now: float) -> None:
        self.book.observe(signals, now)
        self.conn.commit()
        self.book.committed()
        self.dispatcher.tick(now, self.book.active)

    def stop(self) -> None:
        assert self.dispatcher.stop(10)
        self.book.record_deliveries()
        self.conn.commit()
        self.conn.close()


def test_alert_appears_with_its_labels_and_resolves(tmp_path: Path, alertmanager: str) -> None:
    collector = Collector(tmp_path / "c.sqlite", alertmanager)
    try:
        collector.evaluate([starved()], time.time())
        [alert] = _wait(lambda: _alerts(alertmanager), 10, "the alert never reached Alertmanager")
        assert alert["labels"] == {
            "alertname": "GPUDataStarved", "node": "gpu-node-7", "severity": "critical", "cause": "network",
            "gpus": "0,1,2,3,4,5,6,7", "jobs": "slurm:4242",
        }  # fmt: skip
        assert alert["status"]["state"] == "active"
        assert alert["annotations"]["starvation_ratio"] == "0.34"

        collector.evaluate([starved(firing=False)], time.time())
        _wait(lambda: not _alerts(alertmanager), 10, "the alert did not resolve in Alertmanager")
    finally:
        collector.stop()
    assert collector.dispatcher.stats().sinks["alertmanager"].failed_total == 0


def test_a_restarted_collector_refreshes_and_later_resolves(tmp_path: Path, alertmanager: str) -> None:
    db = tmp_path / "c.sqlite"
    first = Collector(db, alertmanager)
    try:
        first.evaluate([starved()], time.time())
        [sent] = _wait(lambda: _alerts(alertmanager), 10, "the alert never reached Alertmanager")
    finally:
        first.stop()

    time.sleep(0.05)  # Alertmanager's updatedAt has millisecond resolution
    second = Collector(db, alertmanager)
    try:
        assert [a.name for a in second.book.active()] == ["GPUDataStarved"]
        # No new transition for an alert that simply goes on; the first tick re-sends it.
        second.evaluate([starved()], time.time())
        [refreshed] = _wait(
            lambda: [a for a in _alerts(alertmanager) if a["updatedAt"] > sent["updatedAt"]],
            10,
            "the restarted collector did not re-send the firing alert",
        )
        assert refreshed["startsAt"] == sent["startsAt"], "the same alert, not a new one"
        second.evaluate([starved(firing=False)], time.time())
        _wait(lambda: not _alerts(alertmanager), 10, "the alert did not resolve after the restart")
    finally:
        second.stop()
