"""``CollectorStoreFailing`` straight to the sinks: held back for the first 10 s of failures, sent
once, re-sent to the sinks that re-send while it lasts, resolved at the first commit, and a new
failure a new alert (its own ids)."""

from __future__ import annotations

import time

from nodeagent.collector.alerts.sinks.dispatcher import SinkDispatcher
from nodeagent.collector.alerts.store_failing import ALERT_NAME, FIRING_AFTER_SECONDS, StoreFailingAlert
from tests.fakes.alert_sinks import CapturingSink

ERROR = "OperationalError: database or disk is full"


def _drained(dispatcher: SinkDispatcher) -> None:
    deadline = time.monotonic() + 10
    while dispatcher.stats().queued and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the batch taken off the queue is being delivered


def test_store_failing_fires_after_its_wait_is_resent_and_resolves_at_the_first_commit() -> None:
    now = [1_000.0]
    sink = CapturingSink(resend_seconds=60.0)
    dispatcher = SinkDispatcher([sink])
    dispatcher.start()
    try:
        alert = StoreFailingAlert(dispatcher, worker="1", clock=lambda: now[0])
        alert.observe(FIRING_AFTER_SECONDS - 0.5, ERROR)  # a short failure pages no one
        now[0] += 1.0
        alert.observe(FIRING_AFTER_SECONDS + 0.5, ERROR)
        now[0] += 30.0
        alert.observe(FIRING_AFTER_SECONDS + 30.5, ERROR)  # before the sink's re-send period
        now[0] += 31.0
        alert.observe(FIRING_AFTER_SECONDS + 61.5, ERROR)
        now[0] += 1.0
        alert.observe(0.0, "")
        alert.observe(0.0, "")
        now[0] += 100.0
        alert.observe(FIRING_AFTER_SECONDS, ERROR)  # a new failure
        _drained(dispatcher)
    finally:
        dispatcher.stop()
    assert sink.kinds == [("firing", ALERT_NAME, ""), ("resolved", ALERT_NAME, ""), ("firing", ALERT_NAME, "")]
    first, resolved, second = sink.transitions
    assert first.alert.labels == {"alertname": ALERT_NAME, "node": "", "severity": "critical", "worker": "1"}
    assert first.alert.annotations["error"] == ERROR
    assert first.alert.starts_at == 1_001.0 - (FIRING_AFTER_SECONDS + 0.5)
    assert resolved.alert.ends_at == 1_063.0
    assert len({first.id, resolved.id, second.id}) == 3
    assert [(at, [a.name for a in firing]) for at, firing in sink.refreshes] == [(1_062.0, [ALERT_NAME])]
