"""Alerts to Alertmanager through its API v2 (``POST /api/v2/alerts``), as Prometheus sends them.

Alertmanager resolves an alert by itself once its ``endsAt`` passes, so a firing alert is sent
with ``endsAt`` a few re-send periods ahead (Prometheus uses 4) and re-sent every
``resend_seconds`` while it fires: a collector that dies lets its alerts expire instead of
pinning them forever, and one that restarts re-sends them from the alert table. A resolved alert
is sent with its real ``endsAt``. Alertmanager keys alerts on their label set, so when a firing
alert's labels change (a new severity), the old label set is resolved and the new one sent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from nodeagent.collector.alerts.sinks.base import HttpPoster, RetryPolicy, rfc3339

if TYPE_CHECKING:
    from nodeagent.collector.alerts.alert import Alert
    from nodeagent.collector.alerts.book import Transition

API_PATH: Final = "/api/v2/alerts"
# A firing alert is valid for this many re-send periods (Prometheus: 4).
VALIDITY_RESENDS: Final = 4
# Alerts per POST: Alertmanager takes large batches, but a smaller body fails and retries cheaper.
BATCH: Final = 500

_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


class AlertmanagerSink:
    name = "alertmanager"

    def __init__(
        self,
        url: str,
        *,
        resend_seconds: float = 60.0,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 1.0,
        generator_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith(API_PATH) else base + API_PATH
        self.resend_seconds: float | None = resend_seconds
        self._generator_url = generator_url
        self._clock = clock
        self._poster = HttpPoster(RetryPolicy(retries=retries, backoff_seconds=backoff, timeout_seconds=timeout))

    def deliver(self, transitions: Sequence[Transition]) -> None:
        now = self._clock()
        body: list[dict[str, Any]] = []
        for transition in transitions:
            previous = transition.previous
            if previous is not None and am_labels(previous.labels) != am_labels(transition.alert.labels):
                body.append(self._postable(previous, ends_at=transition.at))
            body.append(self._postable(transition.alert, ends_at=self._ends_at(transition.alert, now)))
        self._post(body)

    def refresh(self, firing: Sequence[Alert], now: float) -> None:
        wall = self._clock()
        self._post([self._postable(alert, ends_at=self._ends_at(alert, wall)) for alert in firing])

    def close(self) -> None:
        self._poster.close()

    def _ends_at(self, alert: Alert, wall_now: float) -> float:
        if alert.ends_at is not None:
            return alert.ends_at
        assert self.resend_seconds is not None
        return wall_now + VALIDITY_RESENDS * self.resend_seconds

    def _postable(self, alert: Alert, *, ends_at: float) -> dict[str, Any]:
        postable: dict[str, Any] = {
            "labels": am_labels(alert.labels),
            "annotations": {k: v for k, v in alert.annotations.items() if v},
            "startsAt": rfc3339(alert.starts_at),
            "endsAt": rfc3339(ends_at),
        }
        if self._generator_url:
            postable["generatorURL"] = self._generator_url
        return postable

    def _post(self, body: list[dict[str, Any]]) -> None:
        for start in range(0, len(body), BATCH):
            self._poster.post(self.url, body[start : start + BATCH])


def am_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels as Alertmanager accepts them: names [a-zA-Z_][a-zA-Z0-9_]*, no empty values (an empty
    value means "no such label" there)."""
    out: dict[str, str] = {}
    for name, value in labels.items():
        if not value:
            continue
        clean = _LABEL_NAME.sub("_", name)
        if not clean or clean[0].isdigit():
            clean = "_" + clean
        out[clean] = value
    return out
