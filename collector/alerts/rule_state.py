"""What the report rules remember per alert instance: what was sent last, counter increases,
bursts of growth, conditions that must hold for a while. Plain state machines, no I/O."""

from __future__ import annotations

from collections.abc import Mapping

# What an instance last sent when it said "not firing".
NOT_FIRING = (False, "")


class Instance:
    """One alert instance of a node and what was last sent for it: (firing, variant), where the
    variant (severity, reason) of a firing alert is sent again when it changes."""

    __slots__ = ("key", "labels", "name", "sent")

    def __init__(self, name: str, key: str, labels: Mapping[str, str]) -> None:
        self.name, self.key, self.labels = name, key, labels
        self.sent: tuple[bool, str] | None = None

    def changed(self, firing: bool | None, variant: str = "") -> bool:
        """Whether to send: the verdict is known and differs from the last one sent. Records it."""
        if firing is None:
            return False
        sent = (firing, variant) if firing else NOT_FIRING
        if self.sent == sent:
            return False
        self.sent = sent
        return True


class Counter:
    """Increase of a cumulative counter between reports; a counter going down is a reset: no increase."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: int | None = None

    def increase(self, value: int | None) -> int:
        if value is None:
            return 0
        last, self.last = self.last, value
        return value - last if last is not None and value > last else 0


class Burst:
    """Growth without a quiet gap: fires once it reaches a minimum, resolves after a quiet period.
    Until one quiet period has passed since first sight, "not firing" is unknown."""

    __slots__ = ("accumulated", "last_increase_at")

    def __init__(self, now: float) -> None:
        self.accumulated = 0
        self.last_increase_at = now

    def add(self, increase: int, now: float, quiet_seconds: float) -> None:
        if increase <= 0:
            return
        if now - self.last_increase_at >= quiet_seconds:
            self.accumulated = 0  # a new burst
        self.accumulated += increase
        self.last_increase_at = now

    def verdict(self, now: float, minimum: int, quiet_seconds: float) -> bool | None:
        if now - self.last_increase_at >= quiet_seconds:
            return False
        return True if self.accumulated >= minimum else None


class Sustained:
    """A condition that must hold for a while to fire and stay clear for a while to resolve."""

    __slots__ = ("condition", "since")

    def __init__(self) -> None:
        self.condition = False
        self.since: float | None = None

    def verdict(self, condition: bool, now: float, sustain_seconds: float, clear_seconds: float) -> bool | None:
        if self.since is None or condition != self.condition or now < self.since:
            self.condition, self.since = condition, now
        held = now - self.since
        if condition:
            return True if held >= sustain_seconds else None
        return False if held >= clear_seconds else None
