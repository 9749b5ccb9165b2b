"""What the sender tells the operator: connections, failures with their real reason, a summary.

An agent that cannot deliver retries every few hundred milliseconds; logging each attempt would
bury the log, logging none leaves the operator guessing. So: the first successful stream and
each one after a failure at info; a failure at warning the first time it happens and whenever
its reason changes; the same failure again as ``still <event>`` with backoff (after 5 s, 10 s,
20 s, ... then every ``repeat_seconds``), with how long delivery has been down, how many reports
wait in the spool and how often it recurred since the last line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from nodeagent.agent.delivery.spool import Spool

log = structlog.get_logger("nodeagent.sender")

# A failure that keeps recurring with the same reason is said again after FIRST_REPEAT_SECONDS,
# then twice as far apart each time, up to REPEAT_SECONDS.
FIRST_REPEAT_SECONDS = 5.0
REPEAT_SECONDS = 60.0


@dataclass(slots=True)
class _Failure:
    key: tuple[str, str, str]
    logged_monotonic: float
    # How long after logged_monotonic it is said again.
    repeat_after: float
    suppressed: int = 0


class DeliveryLog:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, repeat_seconds: float = REPEAT_SECONDS,
        waiting: Callable[[], int] | None = None,
    ) -> None:  # fmt: skip
        """``waiting``: how many reports wait in the spool now (said with each repeat)."""
        self._clock = clock
        self._repeat_seconds = repeat_seconds
        self._waiting = waiting
        self._failure: _Failure | None = None
        self._failures_since_connected = 0
        self._down_since: float | None = None
        self._ever_connected = False
        self.acked_reports_total = 0

    def connected(self, target: str) -> None:
        """A stream to ``target`` got its first ack: the collector works."""
        now = self._clock()
        fields: dict[str, object] = {"collector": target}
        if self._ever_connected:
            fields["reconnect"] = True
        if self._failures_since_connected:
            fields["after_failures"] = self._failures_since_connected
        if self._down_since is not None:
            fields["down_seconds"] = round(now - self._down_since, 1)
        log.info("connected to collector", **fields)
        self._ever_connected = True
        self._failures_since_connected = 0
        self._down_since = None
        self._failure = None

    def failed(self, event: str, target: str, error: str) -> None:
        """A connection attempt or a stream ended with ``error``; logged unless it merely repeats."""
        now = self._clock()
        self._failures_since_connected += 1
        if self._down_since is None:
            self._down_since = now
        down_since = self._down_since
        key = (event, target, error)
        last = self._failure
        if last is None or last.key != key:
            log.warning(event, collector=target, error=error)
            self._failure = _Failure(key, now, min(FIRST_REPEAT_SECONDS, self._repeat_seconds))
            return
        if now - last.logged_monotonic < last.repeat_after:
            last.suppressed += 1
            return
        fields: dict[str, object] = {"collector": target, "error": error, "down_seconds": round(now - down_since)}
        if self._waiting is not None:
            fields["reports_waiting"] = self._waiting()
        fields["repeated"] = last.suppressed
        log.warning(f"still {event}" if event.startswith("cannot ") else f"{event} again", **fields)
        self._failure = _Failure(key, now, min(last.repeat_after * 2, self._repeat_seconds))

    def summary(self, spool: Spool, connected_to: str | None, reports_resent_total: int = 0) -> None:
        """One line on how delivery goes: what was acknowledged, what waits in the spool, what was
        sent again to another collector (``moves.ResentCount``)."""
        stats = spool.stats()
        log.info(
            "delivery summary",
            connected_to=connected_to,
            acked_reports_total=self.acked_reports_total,
            spool_reports=stats.reports,
            spool_bytes=stats.bytes,
            spool_dropped_reports_total=stats.dropped_total,
            reports_resent_total=reports_resent_total,
        )
