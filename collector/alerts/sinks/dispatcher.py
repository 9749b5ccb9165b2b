"""Runs the sinks off the ingest path: a bounded queue and one thread.

The alert book hands batches to ``deliver`` (which only queues, never blocks), the collector's
periodic task calls ``tick`` so sinks that need it (Alertmanager) get the firing alerts re-sent.
One thread delivers in order; a sink that fails is logged and counted and the next sink still gets
the batch. A full queue drops the batch and counts it: the book still holds those transitions in
its outbox and sends them again on the next start.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from nodeagent.collector.alerts.sinks.base import Sink

if TYPE_CHECKING:
    from nodeagent.collector.alerts.alert import Alert
    from nodeagent.collector.alerts.book import Transition

DEFAULT_QUEUE_LIMIT = 10_000
_POLL_SECONDS = 0.1

_log = structlog.get_logger("collector.sinks")


@dataclass(frozen=True, slots=True)
class SinkCounts:
    delivered_total: int
    failed_total: int
    refreshes_total: int
    refresh_failures_total: int


@dataclass(frozen=True, slots=True)
class DispatchStats:
    # Transitions dropped because the queue was full (or still queued when the dispatcher stopped).
    dropped_total: int
    # Refreshes dropped the same way.
    refreshes_dropped_total: int
    queued: int
    # Per sink name: transitions delivered and failed, refreshes sent and failed.
    sinks: dict[str, SinkCounts]


@dataclass(frozen=True, slots=True)
class _Deliver:
    transitions: tuple[Transition, ...]


@dataclass(frozen=True, slots=True)
class _Refresh:
    sink: Sink
    firing: tuple[Alert, ...]
    now: float


class SinkDispatcher:
    """Itself a sink (``deliver`` queues), so the alert book takes it like any other."""

    name = "dispatcher"
    resend_seconds: float | None = None

    def __init__(self, sinks: Sequence[Sink], *, queue_limit: int = DEFAULT_QUEUE_LIMIT) -> None:
        self.sinks = tuple(sinks)
        self._queue: queue.Queue[_Deliver | _Refresh] = queue.Queue(maxsize=queue_limit)
        self._listeners: list[Callable[[Sequence[str]], None]] = []
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._abandon = threading.Event()
        self._next_refresh = {id(sink): 0.0 for sink in self.sinks if sink.resend_seconds}
        # Drops are counted from both threads (full queue, abandoned queue); the rest only on the dispatcher's.
        self._drop_lock = threading.Lock()
        self._dropped = 0
        self._refreshes_dropped = 0
        self._counts = {sink.name: [0, 0, 0, 0] for sink in self.sinks}

    # -- lifecycle --

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="alert-sinks", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Deliver what is queued for up to ``timeout`` seconds, then cut retries short and drop the
        rest (counted). True when everything queued went out."""
        if self._thread is None:
            return self._queue.empty()
        self._stopping.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abandon.set()
            for sink in self.sinks:
                sink.close()
            self._thread.join(_POLL_SECONDS * 20)
        self._thread = None
        return self._queue.empty() and not self._abandon.is_set()

    # -- the caller's side: never blocks --

    def add_done_listener(self, listener: Callable[[Sequence[str]], None]) -> None:
        self._listeners.append(listener)

    def deliver(self, transitions: Sequence[Transition]) -> None:
        self.submit(transitions)

    def submit(self, transitions: Sequence[Transition]) -> bool:
        """Queue a batch for every sink; False (and counted) when the queue is full."""
        if not transitions:
            return True
        try:
            self._queue.put_nowait(_Deliver(tuple(transitions)))
        except queue.Full:
            self._count_drop(len(transitions), 0)
            return False
        return True

    def tick(self, now: float, firing: Callable[[], Sequence[Alert]]) -> None:
        """Queue a re-send of the firing alerts to each sink whose re-send period has passed.
        ``firing`` (e.g. ``book.active``) is called only then. Call it after ``book.committed()``
        so a re-send never overtakes a transition."""
        snapshot: tuple[Alert, ...] | None = None
        for sink in self.sinks:
            due = self._next_refresh.get(id(sink))
            if due is None or now < due:
                continue
            assert sink.resend_seconds is not None
            self._next_refresh[id(sink)] = now + sink.resend_seconds
            if snapshot is None:
                snapshot = tuple(firing())
            if not snapshot:
                continue
            try:
                self._queue.put_nowait(_Refresh(sink, snapshot, now))
            except queue.Full:
                self._count_drop(0, 1)

    def refresh(self, firing: Sequence[Alert], now: float) -> None:
        """As a sink: re-send to every sink that re-sends, now, regardless of its period."""
        for sink in self.sinks:
            if sink.resend_seconds and firing:
                try:
                    self._queue.put_nowait(_Refresh(sink, tuple(firing), now))
                except queue.Full:
                    self._count_drop(0, 1)

    def close(self) -> None:
        self.stop(0.0)

    def stats(self) -> DispatchStats:
        return DispatchStats(
            dropped_total=self._dropped,
            refreshes_dropped_total=self._refreshes_dropped,
            queued=self._queue.qsize(),
            sinks={name: SinkCounts(*counts) for name, counts in self._counts.items()},
        )

    # -- the dispatcher's thread --

    def _run(self) -> None:
        while not self._abandon.is_set():
            try:
                job = self._queue.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            if isinstance(job, _Deliver):
                self._deliver(job.transitions)
            else:
                self._refresh(job)
        self._drop_queued()

    def _deliver(self, batch: tuple[Transition, ...]) -> None:
        for sink in self.sinks:
            counts = self._counts[sink.name]
            try:
                sink.deliver(batch)
                counts[0] += len(batch)
            except Exception as err:  # one sink's failure must not starve the others
                counts[1] += len(batch)
                _log.error("alert sink failed", sink=sink.name, error=str(err), transitions=len(batch))
        ids = [t.id for t in batch]
        for listener in self._listeners:
            listener(ids)

    def _refresh(self, job: _Refresh) -> None:
        counts = self._counts[job.sink.name]
        try:
            job.sink.refresh(job.firing, job.now)
            counts[2] += 1
        except Exception as err:
            counts[3] += 1
            _log.error("alert re-send failed", sink=job.sink.name, error=str(err), alerts=len(job.firing))

    def _drop_queued(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(job, _Deliver):
                self._count_drop(len(job.transitions), 0)
            else:
                self._count_drop(0, 1)

    def _count_drop(self, transitions: int, refreshes: int) -> None:
        with self._drop_lock:
            self._dropped += transitions
            self._refreshes_dropped += refreshes
