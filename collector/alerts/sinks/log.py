"""Every transition as one structured log event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from nodeagent.collector.alerts.alert import Alert
    from nodeagent.collector.alerts.book import Transition


class LogSink:
    """``alert firing`` / ``alert updated`` / ``alert resolved`` events at warning level (an alert
    is worth a look wherever the collector's logs go), an ``info`` alert's (``NodeStopped``) at
    info level, with the alert's labels and annotations."""

    name = "log"
    resend_seconds: float | None = None

    def __init__(self, logger: structlog.typing.FilteringBoundLogger | None = None) -> None:
        self._log = logger if logger is not None else structlog.get_logger("collector.alerts")

    def deliver(self, transitions: Sequence[Transition]) -> None:
        for transition in transitions:
            alert = transition.alert
            emit = self._log.info if alert.severity == "info" else self._log.warning
            emit(
                f"alert {transition.kind}",
                alertname=alert.name,
                node=alert.node_id or alert.labels.get("node", ""),
                subject=alert.key,
                severity=alert.severity,
                labels=dict(alert.labels),
                annotations=dict(alert.annotations),
                starts_at_unix_seconds=alert.starts_at,
                ends_at_unix_seconds=alert.ends_at,
                transition_id=transition.id,
            )

    def refresh(self, firing: Sequence[Alert], now: float) -> None:
        """Nothing to re-send: a log line is forever."""

    def close(self) -> None:
        """Nothing to cut short."""
