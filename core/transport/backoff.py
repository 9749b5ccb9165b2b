"""How long to wait before a retry: exponential backoff with jitter, the one copy of it.

The agent's sender reconnecting, remote write re-posting a batch and the alert sinks re-posting a
transition all wait by this. Retry ``n`` (0 for the first after a success) waits a random time
below a ceiling that grows from ``base_seconds`` by ``multiplier`` per retry and stops at
``cap_seconds``:

- full jitter, uniform in [0, ceiling): senders that failed together (every agent of a fleet when
  its collector restarts) come back spread over the whole window, not in step;
- equal jitter, uniform in [ceiling / 2, ceiling): spread as well, but never shorter than half the
  ceiling, for a sender with a few retries that must span a receiver's restart.

Both after AWS's "Exponential Backoff And Jitter" (Marc Brooker, 2015).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from typing import Literal

Jitter = Literal["full", "equal"]


class Backoff:
    """Delays for consecutive retries. ``next()`` gives the next one and counts it, ``reset()``
    starts over after a success; ``delay(n)`` is retry ``n``'s for a caller that counts itself.

    ``random`` returns a float in [0, 1) (``random.random``'s contract); tests pass their own."""

    __slots__ = ("_random", "base_seconds", "cap_seconds", "jitter", "multiplier", "retries")

    def __init__(
        self,
        base_seconds: float,
        cap_seconds: float,
        *,
        multiplier: float = 2.0,
        jitter: Jitter = "full",
        random: Callable[[], float] = _random.random,
    ) -> None:
        if not base_seconds > 0:
            raise ValueError(f"backoff base must be positive, got {base_seconds!r}")
        if not cap_seconds > 0:
            raise ValueError(f"backoff cap must be positive, got {cap_seconds!r}")
        if not multiplier >= 1:
            raise ValueError(f"backoff multiplier must be at least 1, got {multiplier!r}")
        if jitter not in ("full", "equal"):
            raise ValueError(f'backoff jitter must be "full" or "equal", got {jitter!r}')
        self.base_seconds = base_seconds
        self.cap_seconds = cap_seconds
        self.multiplier = multiplier
        self.jitter: Jitter = jitter
        self._random = random
        # Retries counted by next() since the last reset().
        self.retries = 0

    def next(self) -> float:
        """The delay before the next retry, in seconds; the one after it may be longer."""
        delay = self.delay(self.retries)
        self.retries += 1
        return delay

    def reset(self) -> None:
        """After a success: the next retry waits as the first one does."""
        self.retries = 0

    def delay(self, retry: int) -> float:
        """Retry ``retry``'s delay (0: the first), jittered below its ``ceiling``."""
        ceiling = self.ceiling(retry)
        if self.jitter == "full":
            return ceiling * self._random()
        half = ceiling / 2
        return half + half * self._random()

    def ceiling(self, retry: int) -> float:
        """The longest wait retry ``retry`` can draw: ``base * multiplier**retry``, at most the cap."""
        try:
            grown = self.base_seconds * float(self.multiplier) ** max(0, retry)
        except OverflowError:  # a long outage counts past what a float holds; the cap is long reached
            return self.cap_seconds
        return min(self.cap_seconds, grown)
