"""The agent's routing key: which job its reports say it runs, held steady before it moves the node.

The sender ranks collectors by this key (``core/transport/rendezvous.py``): every node of a job
has the same key, so all of them meet on one collector. The key is the job with the most GPUs on
the node (ties by the smaller key), read from the reports' ``JobSample``s; "" (the node id) when
the node runs none. A key changes only after the new one has held for ``ROUTING_HOLD_REPORTS``
consecutive reports, both to a job and back to none: a job that shows for one tick, or a gap of
one report while a job restarts, moves nothing.

The daemon feeds it every report it built (``observe``, before the report is serialized); the
sender reads ``key`` and hears of a change through ``subscribe``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from nodeagent.v1 import nodeagent_pb2 as pb

# Consecutive reports a new key must hold before the node moves to it.
ROUTING_HOLD_REPORTS = 3


def job_key(jobs: Iterable[pb.JobSample]) -> str:
    """The job with the most GPUs on the node, ties by the smaller key; "" when none."""
    best, best_gpus = "", -1
    for sample in jobs:
        key, gpus = sample.job, len(sample.gpus)
        if not key:
            continue
        if gpus > best_gpus or (gpus == best_gpus and key < best):
            best, best_gpus = key, gpus
    return best


class RoutingKey:
    """The key the sender ranks collectors by, changed only once a new one has held."""

    def __init__(self, hold_reports: int = ROUTING_HOLD_REPORTS, key: str = "") -> None:
        self.hold_reports = max(1, hold_reports)
        self._key = key
        self._candidate = key
        self._held = 0
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    @property
    def key(self) -> str:
        return self._key

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(new_key)`` (from the thread that feeds reports) whenever the key changes."""
        with self._lock:
            self._listeners.append(listener)

    def observe(self, report: pb.NodeReport) -> bool:
        """One new report; True when the key changed with it."""
        return self.observe_key(job_key(report.jobs))

    def observe_key(self, key: str) -> bool:
        """The key one report names; True when the key changed with it."""
        with self._lock:
            if key == self._key:
                self._candidate, self._held = key, 0
                return False
            if key != self._candidate:
                self._candidate, self._held = key, 0
            self._held += 1
            if self._held < self.hold_reports:
                return False
            self._key, self._held = key, 0
            listeners = list(self._listeners)
        for listener in listeners:
            listener(key)
        return True
