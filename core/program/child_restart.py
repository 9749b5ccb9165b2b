"""Child processes a program keeps running: when to start one again, and dying with the parent.

The collector has two kinds of child: the workers of ``serve --workers N`` and each collector's
remote-write process. Both are started again when they die, by one policy (``RestartPolicy``):
a child that dies at once, or cannot start at all, is retried after a delay that grows (the one
backoff, ``core/transport/backoff.py``) so it does not spin on a broken database or a taken
port; one that ran healthily (``healthy_run_seconds``) before it died starts over at the first,
short delay. Both children die with their parent (``die_with_parent``): Linux's parent-death
signal, which a SIGKILLed parent still sends.
"""

from __future__ import annotations

import ctypes
import random as _random
import signal
import time
from collections.abc import Callable
from typing import Final

from nodeagent.core.transport.backoff import Backoff

# Restart delays: 0.5 s, growing to 30 s while a child keeps dying; reset once it ran a minute.
RESTART_BASE_SECONDS: Final = 0.5
RESTART_CAP_SECONDS: Final = 30.0
HEALTHY_RUN_SECONDS: Final = 60.0
_PR_SET_PDEATHSIG: Final = 1


class RestartPolicy:
    """One child's restarts: ``started()`` when it is up, ``delay()`` when it died or did not
    start; the delay to wait before the next start. Not thread-safe: one supervisor per child."""

    def __init__(
        self,
        base_seconds: float = RESTART_BASE_SECONDS,
        cap_seconds: float = RESTART_CAP_SECONDS,
        healthy_run_seconds: float = HEALTHY_RUN_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = _random.random,
    ) -> None:
        # Equal jitter: never under half the ceiling, so a child that keeps failing is not
        # retried in a tight loop by an unlucky draw; spread enough that N workers do not start in step.
        self.backoff = Backoff(base_seconds, cap_seconds, jitter="equal", random=random)
        self.healthy_run_seconds = healthy_run_seconds
        self._clock = clock
        self._started: float | None = None

    def started(self) -> None:
        """The child is up (its run is timed from now)."""
        self._started = self._clock()

    def ran_seconds(self) -> float:
        """How long the child last ran (0 when it never came up since the last ``delay``)."""
        return 0.0 if self._started is None else self._clock() - self._started

    def delay(self) -> float:
        """The child died or failed to start: seconds to wait before starting it again."""
        if self.ran_seconds() >= self.healthy_run_seconds:
            self.backoff.reset()
        self._started = None
        return self.backoff.next()


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux for ``sig`` when the parent dies, however it dies (PR_SET_PDEATHSIG), from the
    child; False when it cannot be asked (not Linux): the caller then watches the parent itself.
    The caller checks after it whether the parent is already gone (it died before this).

    The signal comes when the parent *thread* that started the child ends: a parent must start
    its children from a thread that lives as long as it does (its event loop's, its watcher)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False
