"""Each transition as a JSON POST, retried until the receiver takes it.

The body is ``Transition.to_plain()`` (id, kind, alert, previous, at). The transition id is also in
the ``Idempotency-Key`` header: a retry after an answer that got lost, or a re-delivery after a
collector restart, carries the same id, so a receiver that stores ids sees each transition once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from nodeagent.collector.alerts.sinks.base import HttpPoster, RetryPolicy, SinkError

if TYPE_CHECKING:
    from nodeagent.collector.alerts.alert import Alert
    from nodeagent.collector.alerts.book import Transition

IDEMPOTENCY_HEADER = "Idempotency-Key"

_log = structlog.get_logger("collector.sinks.webhook")


class WebhookSink:
    name = "webhook"
    resend_seconds: float | None = None

    def __init__(self, url: str, *, timeout: float = 5.0, retries: int = 5, backoff: float = 1.0) -> None:
        self.url = url
        self._poster = HttpPoster(RetryPolicy(retries=retries, backoff_seconds=backoff, timeout_seconds=timeout))

    @property
    def attempts_total(self) -> int:
        return self._poster.attempts_total

    def deliver(self, transitions: Sequence[Transition]) -> None:
        """POST each transition in order; one that is given up on does not hold back the rest."""
        failed: list[str] = []
        for transition in transitions:
            try:
                self._poster.post(self.url, transition.to_plain(), {IDEMPOTENCY_HEADER: transition.id})
            except SinkError as err:
                _log.error("webhook delivery failed", transition_id=transition.id, error=str(err))
                failed.append(transition.id)
        if failed:
            raise SinkError(f"webhook {self.url}: {len(failed)} of {len(transitions)} transitions not delivered")

    def refresh(self, firing: Sequence[Alert], now: float) -> None:
        """Webhooks get transitions only."""

    def close(self) -> None:
        self._poster.close()
