"""Reports waiting for the collector's ack, bounded by bytes and age.

The sampler appends every report here and never waits on the network; the sender reads from
here and removes what the collector acknowledged. When the spool is full (or a report is older
than the age bound) the oldest reports are dropped and counted: every report the agent produced
is acknowledged, still spooled, or counted as dropped.

With a directory the spool is also written to disk (see ``nodeagent.agent.delivery.segments``), so
unacknowledged reports survive an agent restart and the epoch and sequence carry on where they
stopped. Without one it lives in memory only, and a restart starts a new epoch.

Records stay in seq order (the sampler counts up by one and reports leave only from the oldest
end), so the sender finds its place by bisection.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.agent.delivery.segments import Record, SegmentStore

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class SpoolStats:
    reports: int
    bytes: int
    dropped_total: int
    acked_seq: int
    last_seq: int


class Spool:
    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        directory: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_bytes <= 0 or max_age_seconds <= 0:
            raise ValueError("spool bounds must be positive")
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._records: list[Record] = []
        self._head = 0  # index of the oldest live record in _records
        self._bytes = 0
        self._store = SegmentStore(directory) if directory is not None else None
        if self._store is not None:
            recovered = self._store.recover()
            self.epoch = recovered.epoch or _new_epoch()
            self._acked_seq = recovered.acked_seq
            self._dropped_total = recovered.dropped_total
            self._last_seq = recovered.last_seq
            for record in recovered.records:
                self._records.append(record)
                self._bytes += len(record.data)
            self._store.begin(self.epoch, self._acked_seq, self._dropped_total)
        else:
            self.epoch = _new_epoch()
            self._acked_seq = 0
            self._dropped_total = 0
            self._last_seq = 0

    # ---- the sampler's side ----

    @property
    def next_seq(self) -> int:
        """The sequence number the next report of this epoch must carry."""
        with self._lock:
            return self._last_seq + 1

    def make_room(self, size: int, now: float | None = None) -> None:
        """Drop the oldest reports (and expired ones) until ``size`` more bytes fit.

        The sampler calls this before it fills in the spool figures of a report, so the drop
        count a report carries includes the drops its own arrival causes."""
        now = self._clock() if now is None else now
        with self._lock:
            self._expire_locked(now)
            if size > self.max_bytes:
                return  # it cannot fit whatever goes: append drops it alone
            while self._live_count() and self._bytes + size > self.max_bytes:
                self._drop_oldest_locked()

    def append(self, seq: int, data: bytes, produced_at: float | None = None) -> None:
        """Spool one serialized report; the oldest go when it does not fit."""
        produced_at = self._clock() if produced_at is None else produced_at
        record = Record(seq=seq, produced_at=produced_at, data=data)
        with self._lock:
            if seq != self._last_seq + 1:
                raise ValueError(f"report seq {seq} does not follow {self._last_seq}")
            self._expire_locked(produced_at)
            if len(data) <= self.max_bytes:
                while self._live_count() and self._bytes + len(data) > self.max_bytes:
                    self._drop_oldest_locked()
            else:
                # A report larger than the whole spool cannot be kept: it is the one dropped.
                self._last_seq = seq
                self._dropped_total += 1
                if self._store is not None:
                    # Counted, but not "skipped through": older reports are still waiting.
                    self._store.note_dropped(self._dropped_total)
                return
            if self._store is not None:
                self._store.append(record)  # on disk before the sender can see it
            self._records.append(record)
            self._bytes += len(data)
            self._last_seq = seq
            listeners = list(self._listeners)
        for notify in listeners:
            notify()

    # ---- the sender's side ----

    def subscribe(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` (from the appending thread) after every append."""
        with self._lock:
            self._listeners.append(notify)

    def first_unacked_seq(self) -> int:
        with self._lock:
            return self._records[self._head].seq if self._live_count() else self._last_seq + 1

    def records_from(self, seq: int, limit: int) -> list[Record]:
        """Up to ``limit`` spooled records with seq >= ``seq``, oldest first."""
        with self._lock:
            if not self._live_count():
                return []
            start = bisect.bisect_left(self._records, seq, lo=self._head, key=_seq_of)
            return self._records[start : start + limit]

    def ack(self, epoch: int, acked_seq: int) -> int:
        """Forget every report up to ``acked_seq``; returns how many left the spool."""
        with self._lock:
            if epoch != self.epoch or acked_seq <= self._acked_seq:
                return 0
            self._acked_seq = min(acked_seq, self._last_seq)
            removed = 0
            while self._live_count() and self._records[self._head].seq <= self._acked_seq:
                self._pop_oldest_locked()
                removed += 1
            if self._store is not None:
                self._store.note_acked(self._acked_seq)
            return removed

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(
                reports=self._live_count(),
                bytes=self._bytes,
                dropped_total=self._dropped_total,
                acked_seq=self._acked_seq,
                last_seq=self._last_seq,
            )

    def all_acked(self) -> bool:
        """Nothing left to deliver: every report was acknowledged or dropped (and counted)."""
        with self._lock:
            return not self._live_count()

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()

    # ---- helpers (lock held) ----

    def _live_count(self) -> int:
        return len(self._records) - self._head

    def _expire_locked(self, now: float) -> None:
        while self._live_count() and now - self._records[self._head].produced_at > self.max_age_seconds:
            self._drop_oldest_locked()

    def _drop_oldest_locked(self) -> None:
        record = self._pop_oldest_locked()
        self._dropped_total += 1
        if self._store is not None:
            self._store.note_skipped(record.seq, self._dropped_total)

    def _pop_oldest_locked(self) -> Record:
        record = self._records[self._head]
        self._records[self._head] = _GONE
        self._head += 1
        self._bytes -= len(record.data)
        # Compact once the dead prefix dominates, so memory follows the live records.
        if self._head > 1024 and self._head * 2 > len(self._records):
            del self._records[: self._head]
            self._head = 0
        return record


def _seq_of(record: Record) -> int:
    return record.seq


_GONE = Record(seq=0, produced_at=0.0, data=b"")


def _new_epoch() -> int:
    # Microseconds since 1970: a restart without a spool always starts a later epoch.
    return time.time_ns() // 1000
