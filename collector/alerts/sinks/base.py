"""What every sink is: the ``Sink`` protocol, its error, and the JSON POST with retries the network sinks share.

Sinks import the alert types for annotations only (``nodeagent.collector.alerts.book`` imports this module), so
nothing here runs code from ``nodeagent.collector.alerts.book``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nodeagent.collector.outbound.post import post
from nodeagent.core.transport.backoff import Backoff

if TYPE_CHECKING:
    from nodeagent.collector.alerts.alert import Alert
    from nodeagent.collector.alerts.book import Transition


class SinkError(Exception):
    """A sink gave up on a delivery (after its retries); the message is one line."""


class Sink(Protocol):
    """Where alert transitions go. ``deliver`` may block on the network: the ``SinkDispatcher``
    runs it on its own thread, never on the ingest path."""

    # "log", "webhook", "alertmanager": names the sink in logs and counters.
    name: str
    # Seconds between re-sends of every firing alert (``refresh``); None when the sink needs none.
    resend_seconds: float | None

    def deliver(self, transitions: Sequence[Transition]) -> None:
        """Send these transitions, oldest first; raise ``SinkError`` when giving up."""

    def refresh(self, firing: Sequence[Alert], now: float) -> None:
        """Re-send the alerts firing now (receivers that expire alerts not refreshed)."""

    def close(self) -> None:
        """Cut short any wait (retry backoff) so a stopping dispatcher is not held up."""


@runtime_checkable
class DeferredSink(Protocol):
    """A sink whose ``deliver`` only queues: it reports later which transitions are done (sent, or
    given up on), so the alert book can forget them. ``SinkDispatcher`` is one."""

    def add_done_listener(self, listener: Callable[[Sequence[str]], None]) -> None:
        """``listener`` gets the ids of finished transitions, from the sink's thread."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    # Attempts after the first one.
    retries: int = 5
    # Wait before the first retry; doubles each time, capped at max_backoff_seconds. Equal jitter
    # (each wait between half of that and all of it): a few retries still span a receiver's restart,
    # and collectors that lost the same receiver do not all retry at the same instant.
    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 30.0
    # Per attempt: connect plus response.
    timeout_seconds: float = 5.0


class HttpPoster:
    """POSTs JSON with retries (``nodeagent.collector.outbound.post`` says which answers retry: no
    answer, 5xx and 429; another 4xx is the receiver refusing the content, never retried)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        # Each post starts its retries over; a sink posts from one thread (its dispatcher's).
        self._backoff = Backoff(policy.backoff_seconds, policy.max_backoff_seconds, jitter="equal")
        self._closed = threading.Event()
        self.attempts_total = 0

    def post(self, url: str, body: Any, headers: Mapping[str, str] | None = None) -> int:
        """Status of the accepted attempt (2xx); ``SinkError`` after the last failed one."""
        data = json.dumps(body, separators=(",", ":")).encode()
        sent_headers = {"Content-Type": "application/json", **(headers or {})}
        self._backoff.reset()
        last = ""
        for attempt in range(self.policy.retries + 1):
            if attempt and self._closed.wait(self._backoff.next()):
                raise SinkError(f"POST {url}: stopped while retrying (last: {last})")
            self.attempts_total += 1
            answer = post(url, data, sent_headers, timeout_seconds=self.policy.timeout_seconds)
            if answer.accepted:
                return answer.status
            last = answer.detail
            if not answer.retry:
                raise SinkError(f"POST {url}: refused: {last}")
        raise SinkError(f"POST {url}: gave up after {self.policy.retries + 1} attempts (last: {last})")

    def close(self) -> None:
        self._closed.set()


def rfc3339(unix_seconds: float) -> str:
    """``2026-11-29T18:04:05.123Z``: what Alertmanager and most webhooks expect."""
    return datetime.fromtimestamp(unix_seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
