"""Sinks: webhook retries and idempotency against a real HTTP server, Alertmanager payloads, the
dispatcher that keeps them off the ingest path, and the [sinks] table."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import datetime

import pytest
from structlog.testing import capture_logs

from nodeagent.collector.alerts.book import AlertBook, Transition
from nodeagent.collector.alerts.sinks import (
    AlertmanagerSink,
    LogSink,
    SinkConfigError,
    SinkDispatcher,
    SinkError,
    WebhookSink,
    build_sinks,
)
from nodeagent.collector.alerts.sinks.webhook import IDEMPOTENCY_HEADER
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal
from tests.fakes.alert_sinks import CapturingSink
from tests.fakes.http_receiver import DROP, http_receiver

T0 = 1_800_000_000.0


def transitions(*signals: AlertSignal, now: float = T0) -> list[Transition]:
    book = AlertBook(AlertTables(sqlite3.connect(":memory:")))
    return book.observe(signals, now)


def starved(firing: bool = True, severity: str = "warning") -> AlertSignal:
    return AlertSignal("GPUDataStarved", "node-a", "", firing, severity, {"cause": "storage", "gpus": "0,1"})


def test_webhook_delivers_once_through_503s_and_a_dropped_connection() -> None:
    [fired] = transitions(starved())
    with http_receiver([503, 503, DROP]) as receiver:
        sink = WebhookSink(receiver.url, timeout=2.0, retries=5, backoff=0.01)
        sink.deliver([fired])
        # The receiver saw the request whose connection it dropped: a sender that retries must not
        # make it count twice. The idempotency key lets it tell.
        receiver.script.append(200)
        sink.deliver([fired])  # e.g. re-delivered after a collector restart
        accepted = receiver.wait_accepted(1)
    assert [a.outcome for a in receiver.attempts] == [503, 503, DROP, 200, 200]
    assert {a.headers[IDEMPOTENCY_HEADER.lower()] for a in receiver.attempts} == {fired.id}
    assert len(accepted) == 1
    assert accepted[0]["id"] == fired.id
    assert accepted[0]["kind"] == "firing"
    assert accepted[0]["alert"]["labels"]["cause"] == "storage"
    assert sink.attempts_total == 5


def test_webhook_gives_up_on_a_refusal_without_retrying() -> None:
    [fired] = transitions(starved())
    with http_receiver([400]) as receiver:
        sink = WebhookSink(receiver.url, retries=5, backoff=0.01)
        with pytest.raises(SinkError, match="1 of 1"):
            sink.deliver([fired])
    assert len(receiver.attempts) == 1


def test_webhook_gives_up_after_its_retries_on_a_dead_receiver() -> None:
    with http_receiver() as receiver:
        url = receiver.url
    [fired] = transitions(starved())
    sink = WebhookSink(url, timeout=1.0, retries=2, backoff=0.01)
    with pytest.raises(SinkError):
        sink.deliver([fired])
    assert sink.attempts_total == 3


def test_alertmanager_payload() -> None:
    book = AlertBook(AlertTables(sqlite3.connect(":memory:")))
    fired = book.observe([starved()], T0)
    updated = book.observe([starved(severity="critical")], T0 + 10)
    resolved = book.observe([starved(firing=False)], T0 + 20)
    with http_receiver() as receiver:
        sink = AlertmanagerSink(receiver.url, resend_seconds=60, clock=lambda: T0 + 30, generator_url="http://c/")
        sink.deliver([*fired, *updated, *resolved])
        sink.refresh(book.active(), T0 + 40)
    [attempt] = receiver.attempts
    assert attempt.path == "/hook/api/v2/alerts"
    first, retired, current, ended = attempt.body
    assert first["labels"] == {
        "alertname": "GPUDataStarved", "node": "node-a", "severity": "warning", "cause": "storage", "gpus": "0,1",
    }  # fmt: skip
    assert first["startsAt"] == "2027-01-15T08:00:00.000Z"
    # Firing: valid for 4 re-send periods from now (the sink's clock), then Alertmanager expires it.
    assert _unix(first["endsAt"]) == T0 + 30 + 240
    assert first["generatorURL"] == "http://c/"
    # A new severity is a new label set for Alertmanager: the old one is ended, the new one sent.
    assert retired["labels"]["severity"] == "warning"
    assert _unix(retired["endsAt"]) == T0 + 10
    assert current["labels"]["severity"] == "critical"
    assert ended["labels"]["severity"] == "critical"
    assert _unix(ended["endsAt"]) == T0 + 20


def test_alertmanager_label_names_are_made_valid() -> None:
    from nodeagent.collector.alerts.sinks.alertmanager import am_labels

    assert am_labels({"gpu-ids": "1", "9x": "y", "empty": "", "ok_1": "z"}) == {"gpu_ids": "1", "_9x": "y", "ok_1": "z"}


def test_dispatcher_never_blocks_the_caller_and_counts_drops() -> None:
    slow = CapturingSink("slow")
    slow.block = threading.Event()
    dispatcher = SinkDispatcher([slow], queue_limit=2)
    dispatcher.start()
    try:
        batches = [transitions(AlertSignal("NodeDown", f"n{i}", "", True)) for i in range(5)]
        start = time.monotonic()
        dispatcher.submit(batches[0])
        assert slow.entered.wait(5), "the first batch is being delivered (and held)"
        results = [dispatcher.submit(batch) for batch in batches[1:]]
        assert time.monotonic() - start < 1.0
        assert results == [True, True, False, False], "queue of 2 while the sink is held"
        assert dispatcher.stats().dropped_total == 2
        slow.block.set()
    finally:
        assert dispatcher.stop(5)
    assert [t.alert.node_id for t in slow.transitions] == ["n0", "n1", "n2"]
    assert dispatcher.stats().sinks["slow"].delivered_total == 3


def test_dispatcher_a_failing_sink_does_not_stop_the_others() -> None:
    broken, good = CapturingSink("broken", fail=True), CapturingSink("good")
    done: list[str] = []
    dispatcher = SinkDispatcher([broken, good])
    dispatcher.add_done_listener(done.extend)
    dispatcher.start()
    batch = transitions(starved())
    dispatcher.submit(batch)
    assert dispatcher.stop(5)
    assert good.kinds == [("firing", "GPUDataStarved", "")]
    assert done == [batch[0].id], "finished (for every sink, failed or not): the book may forget it"
    stats = dispatcher.stats().sinks
    assert (stats["broken"].failed_total, stats["good"].delivered_total) == (1, 1)


def test_dispatcher_resends_firing_alerts_on_each_sinks_period() -> None:
    resending, plain = CapturingSink("am", resend_seconds=60), CapturingSink("hook")
    dispatcher = SinkDispatcher([resending, plain])
    book = AlertBook(AlertTables(sqlite3.connect(":memory:")))
    book.observe([starved()], T0)
    calls: list[float] = []

    def firing() -> list:  # type: ignore[type-arg]
        calls.append(time.monotonic())
        return book.active()

    dispatcher.start()
    for now in (T0, T0 + 30, T0 + 59, T0 + 60, T0 + 61, T0 + 125):
        dispatcher.tick(now, firing)
    assert dispatcher.stop(5)
    assert [now for now, _ in resending.refreshes] == [T0, T0 + 60, T0 + 125]
    assert all(len(alerts) == 1 for _, alerts in resending.refreshes)
    assert plain.refreshes == []
    assert len(calls) == 3, "the firing alerts are only listed when a re-send is due"


def test_dispatcher_stop_cuts_retries_short() -> None:
    with http_receiver([503] * 100) as receiver:
        sink = WebhookSink(receiver.url, retries=100, backoff=0.05)
        dispatcher = SinkDispatcher([sink])
        dispatcher.start()
        dispatcher.submit(transitions(starved()))
        while not receiver.attempts:
            time.sleep(0.01)
        start = time.monotonic()
        assert not dispatcher.stop(0.2)
        assert time.monotonic() - start < 3


def test_log_sink_writes_one_event_per_transition() -> None:
    book = AlertBook(AlertTables(sqlite3.connect(":memory:")))
    batch = book.observe([starved()], T0) + book.observe([starved(firing=False)], T0 + 5)
    with capture_logs() as logs:
        LogSink().deliver(batch)
    assert [(e["event"], e["alertname"], e["node"], e["log_level"]) for e in logs] == [
        ("alert firing", "GPUDataStarved", "node-a", "warning"),
        ("alert resolved", "GPUDataStarved", "node-a", "warning"),
    ]
    assert logs[1]["ends_at_unix_seconds"] == T0 + 5


@pytest.mark.parametrize("node_id", ["n2", ""], ids=["keyed-to-the-straggler", "keyed-to-no-node"])
def test_a_job_alert_reaches_every_sink_with_its_job_node_and_cause(node_id: str) -> None:
    """JobStraggler is about a job (its key) and the node holding it back (a label): whether the
    roll-up files it under the straggler or under no node, every sink shows job, node and cause."""
    labels = {"job": "torch/trainer-7", "node": "n2", "cause": "network"}
    annotations = {"summary": "job torch/trainer-7 waits for n2 (network)", "wait_ratio": "0.530"}
    straggler = AlertSignal("JobStraggler", node_id, "torch/trainer-7", True, "warning", labels, annotations)
    [fired] = transitions(straggler)
    assert fired.alert.labels["node"] == "n2" and fired.alert.labels["subject"] == "torch/trainer-7"
    with http_receiver() as receiver:
        AlertmanagerSink(receiver.url, clock=lambda: T0).deliver([fired])
        WebhookSink(receiver.url, retries=0).deliver([fired])
        webhook = receiver.wait_accepted(2)[1]
    [postable] = receiver.attempts[0].body
    assert {k: postable["labels"][k] for k in ("alertname", "job", "node", "cause")} == {
        "alertname": "JobStraggler", "job": "torch/trainer-7", "node": "n2", "cause": "network",
    }  # fmt: skip
    assert postable["annotations"]["wait_ratio"] == "0.530"
    assert {k: webhook["alert"]["labels"][k] for k in ("job", "node", "cause")} == labels
    with capture_logs() as logs:
        LogSink().deliver([fired])
    assert (logs[0]["alertname"], logs[0]["node"], logs[0]["labels"]["job"]) == ("JobStraggler", "n2", labels["job"])


def test_build_sinks_from_a_table() -> None:
    sinks = build_sinks(
        {
            "webhook_url": "http://127.0.0.1:9/hook",
            "webhook_retries": 2,
            "alertmanager_url": "http://127.0.0.1:9093/",
            "alertmanager_resend_seconds": 30,
        },
        source="collector.toml",
    )
    assert [s.name for s in sinks] == ["log", "webhook", "alertmanager"]
    assert isinstance(sinks[2], AlertmanagerSink)
    assert sinks[2].url == "http://127.0.0.1:9093/api/v2/alerts"
    assert sinks[2].resend_seconds == 30.0
    assert [s.name for s in build_sinks({"log": False})] == []


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"webhook": "http://x"}, "collector.toml: sinks.webhook: unknown key"),
        ({"webhook_url": 5}, "collector.toml: sinks.webhook_url: expected a string, got 5"),
        ({"webhook_url": "ftp://x/"}, "collector.toml: sinks.webhook_url: expected an http(s) URL"),
        ({"webhook_retries": 1.5}, "collector.toml: sinks.webhook_retries: expected an integer, got 1.5"),
        ({"log": "yes"}, "collector.toml: sinks.log: expected true or false, got 'yes'"),
        ({"alertmanager_url": "http://h", "alertmanager_resend_seconds": 0}, "alertmanager_resend_seconds: must be"),
        ({"alertmanager_resend_seconds": True}, "expected a number, got True"),
    ],
)
def test_build_sinks_rejects_bad_tables_in_one_line(table: dict[str, object], message: str) -> None:
    with pytest.raises(SinkConfigError) as caught:
        build_sinks(table, source="collector.toml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def _unix(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
