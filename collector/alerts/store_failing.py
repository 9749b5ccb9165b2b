"""``CollectorStoreFailing``: the collector's own alert while its store cannot commit.

Every other alert goes through the alert book, whose lifecycles are written in the store's own
transactions and reach the sinks once committed. While the store fails nothing commits, so this
one alert cannot take that road: it goes to the sinks directly, through the same dispatcher. It
fires once flushes have failed for ``FIRING_AFTER_SECONDS`` (a lock held for a moment pages no
one), is sent again to the sinks that re-send (Alertmanager lets an alert lapse without them)
while the failure lasts, and resolves at the first flush that commits. It is not kept in the
alert table (the store is what fails), so ``alerts`` does not list it: ``/healthz`` and
``nodeagent_store_failing`` say the same while it lasts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from nodeagent.collector.alerts.alert import Alert, fingerprint
from nodeagent.collector.alerts.book import Transition
from nodeagent.collector.alerts.lifecycle import FIRING, RESOLVED, alert_labels
from nodeagent.collector.alerts.sinks.dispatcher import SinkDispatcher
from nodeagent.core.detector.alert_signals import AlertSignal

ALERT_NAME: Final = "CollectorStoreFailing"
# The same wait after which the collector turns new streams away (``ingest/streams.py``).
FIRING_AFTER_SECONDS: Final = 10.0


class StoreFailingAlert:
    """Fires and resolves ``CollectorStoreFailing`` from what the flusher sees; the event loop's."""

    def __init__(self, dispatcher: SinkDispatcher, *, worker: str = "", clock: Callable[[], float] = time.time) -> None:
        self.dispatcher = dispatcher
        self.worker = worker
        self.clock = clock
        self.firing: Alert | None = None
        self._revision = 0
        self._next_refresh = 0.0
        periods = [sink.resend_seconds for sink in dispatcher.sinks if sink.resend_seconds]
        self._refresh_seconds = min(periods) if periods else None

    def observe(self, failing_for: float, error: str) -> None:
        """After each flush: ``failing_for`` seconds of failed flushes (0: this one committed) and
        the last one's error."""
        now = self.clock()
        if failing_for <= 0.0:
            if self.firing is not None:
                self._send(RESOLVED, replace(self.firing, ends_at=now), now)
                self.firing = None
            return
        if self.firing is None and failing_for >= FIRING_AFTER_SECONDS:
            self._revision = 0
            self._send(FIRING, self._alert(now - failing_for, error), now)
        elif self.firing is not None and self._refresh_seconds is not None and now >= self._next_refresh:
            self.firing = replace(self.firing, annotations=self._annotations(error))
            self.dispatcher.refresh([self.firing], now)
            self._next_refresh = now + self._refresh_seconds

    def _alert(self, since: float, error: str) -> Alert:
        signal = AlertSignal(ALERT_NAME, "", "", True, "critical", labels=self._labels())
        return Alert(
            name=ALERT_NAME, node_id="", key="", severity="critical", labels=alert_labels(signal),
            annotations=self._annotations(error), starts_at=since, ends_at=None,
            fingerprint=fingerprint(ALERT_NAME, "", self.worker),
        )  # fmt: skip

    def _labels(self) -> dict[str, str]:
        return {"worker": self.worker} if self.worker else {}

    def _annotations(self, error: str) -> dict[str, str]:
        where = f"worker {self.worker}'s store" if self.worker else "the collector's store"
        return {
            "summary": f"{where} cannot commit: reports are not acknowledged, agents spool them",
            "error": error,
        }

    def _send(self, kind: str, alert: Alert, now: float) -> None:
        # Unique per failure (its start) and per transition, as the book's ids are.
        transition_id = f"{alert.fingerprint}-{int(alert.starts_at * 1000)}-{self._revision}"
        self._revision += 1
        self.dispatcher.submit([Transition(id=transition_id, kind=kind, alert=alert, previous=None, at=now)])
        if kind == FIRING:
            self.firing = alert
            if self._refresh_seconds is not None:
                self._next_refresh = now + self._refresh_seconds
