"""A capturing alert sink: what tests hand the alert book instead of a real destination."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from nodeagent.collector.alerts.alert import Alert
from nodeagent.collector.alerts.book import Transition


class CapturingSink:
    """Synchronous sink that keeps every transition and re-send; ``fail`` makes it raise."""

    def __init__(self, name: str = "capture", *, resend_seconds: float | None = None, fail: bool = False) -> None:
        self.name = name
        self.resend_seconds = resend_seconds
        self.fail = fail
        self.transitions: list[Transition] = []
        self.refreshes: list[tuple[float, list[Alert]]] = []
        # Set while deliver runs when ``block`` is set: lets a test hold the dispatcher's thread.
        self.block: threading.Event | None = None
        self.entered = threading.Event()

    def deliver(self, transitions: Sequence[Transition]) -> None:
        self.entered.set()
        if self.block is not None:
            self.block.wait(10)
        if self.fail:
            raise RuntimeError(f"{self.name} is broken")
        self.transitions.extend(transitions)

    def refresh(self, firing: Sequence[Alert], now: float) -> None:
        self.refreshes.append((now, list(firing)))

    def close(self) -> None:
        if self.block is not None:
            self.block.set()

    @property
    def kinds(self) -> list[tuple[str, str, str]]:
        """(kind, alert name, key) per transition, in order."""
        return [(t.kind, t.alert.name, t.alert.key) for t in self.transitions]
