"""Reports waiting for the collector's ack, bounded by bytes and age.

The sampler appends every report here and never waits on the network; the sender reads from
here and removes what the collector acknowledged. When the spool is full (or a report is older
than the age bound) the oldest reports are dropped and counted: every report the agent produced
is acknowledged, still spooled, or counted as dropped. A dropped report that may have been sent
(the collector may have stored it and died before its ack) is counted only once the collector
says it does not have it: until then it is "unresolved" (``nodeagent.agent.delivery.unresolved``);
the sender tells the spool where each stream begins, what it sent, and the stream's first ack.

With a directory the spool is also written to disk (``nodeagent.agent.delivery.segment_store``),
so unacknowledged reports survive an agent restart and the epoch and sequence carry on where
they stopped; the bound then holds for what the directory takes on disk (records, their
headers, acknowledged records a segment still holds, the state file). Without one it lives in
memory only, and a restart starts a new epoch. When the disk fails (full, I/O errors) the spool logs
it, counts it (``disk_failures_total``) and goes on in memory until the agent restarts.

Records stay in seq order (the sampler counts up by one and reports leave only from the oldest
end), so the sender finds its place by bisection.
"""

from __future__ import annotations

import bisect
import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from nodeagent.agent.delivery.record import Record
from nodeagent.agent.delivery.recovery import Recovered
from nodeagent.agent.delivery.segment_store import SegmentStore, segment_bytes_for
from nodeagent.agent.delivery.unresolved import DropLedger

log = structlog.get_logger("nodeagent.spool")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 24 * 3600.0
# A spool directory takes whole blocks and a state file: below this bound it could hold next to nothing.
MIN_DISK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SpoolStats:
    reports: int
    bytes: int
    dropped_total: int
    acked_seq: int
    last_seq: int
    # Times the spool directory failed and the spool went on in memory only.
    disk_failures_total: int = 0
    on_disk: bool = False
    # What the spool directory takes (0 without one, or once the disk failed).
    disk_bytes: int = 0
    # Dropped after they may have been sent: not in dropped_total until the collector says.
    dropped_unresolved: int = 0


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
        if directory is not None and max_bytes < MIN_DISK_BYTES:
            raise ValueError(f"a spool on disk needs max_bytes of at least {MIN_DISK_BYTES}")
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._records: list[Record] = []
        self._head = 0  # index of the oldest live record in _records
        self._bytes = 0
        self._disk_failures_total = 0
        self._events: list[str] = []
        self._drops = DropLedger()
        self._store, recovered = _open_store(directory, max_bytes) if directory is not None else (None, None)
        if directory is not None and self._store is None:
            # The directory could not even be set up (a full or failing disk): a spool in memory,
            # in a new epoch, so that no seq the directory may know of is handed out again.
            self._disk_failures_total = 1
            self._events.append("spool directory unusable; spooling in memory only")
        if self._store is not None and recovered is not None:
            self.epoch = recovered.epoch or _new_epoch()
            self._acked_seq = recovered.acked_seq
            self._last_seq = recovered.last_seq
            # Every seq up to last_seq may have left the agent.
            self._drops = DropLedger(recovered.dropped_total, recovered.unresolved, sent_before=recovered.last_seq)
            for record in recovered.records:
                self._records.append(record)
                self._bytes += len(record.data)
            if recovered.lost:
                self._events.append(f"{recovered.lost} reports lost to spool damage, counted as dropped")
            try:
                self._store.begin(self.epoch, self._acked_seq, self._drops.dropped_total)
            except OSError as err:
                self._degrade_locked(err)
        else:
            self.epoch = _new_epoch()
            self._acked_seq = 0
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
            if not self._fits_alone(size):
                return  # it cannot fit whatever goes: append drops it alone
            self._make_room_locked(size)

    def append(self, seq: int, data: bytes, produced_at: float | None = None) -> None:
        """Spool one serialized report; the oldest go when it does not fit."""
        produced_at = self._clock() if produced_at is None else produced_at
        record = Record(seq=seq, produced_at=produced_at, data=data)
        with self._lock:
            if seq != self._last_seq + 1:
                raise ValueError(f"report seq {seq} does not follow {self._last_seq}")
            self._expire_locked(produced_at)
            if self._fits_alone(len(data)):
                self._make_room_locked(len(data))
            else:
                # A report larger than the whole spool cannot be kept: it is the one dropped.
                self._make_room_locked(0)  # room for the marker that keeps its seq on disk
                self._last_seq = seq
                self._drops.dropped_unsent()
                if self._store is not None:
                    # Counted, but not "skipped through": older reports are still waiting.
                    dropped = self._drops.dropped_total
                    self._store_call(lambda s: s.note_dropped(seq, dropped, produced_at))
                return
            if self._store is not None:
                # On disk before the sender can see it; when the disk fails, in memory, with its seq
                # noted in the state file so that a restart never hands it out again.
                self._store_call(lambda s: s.append(record))
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
            # Reports this stream sent before the spool dropped them: reports arrive in order,
            # so an ack at or past them means they are stored.
            if self._drops.acked(self._acked_seq):
                self._note_resolved_locked()
            if self._store is not None:
                acked = self._acked_seq
                self._store_call(lambda s: s.note_acked(acked))
            return removed

    def stream_started(self) -> None:
        """A new stream: call before it sends anything."""
        with self._lock:
            self._drops.stream_started()

    def stream_ended(self) -> None:
        with self._lock:
            self._drops.stream_ended()

    def sending(self, seq: int) -> None:
        """The current stream is about to write the report ``seq`` (it may leave even if the write fails)."""
        with self._lock:
            self._drops.sending(seq)

    def attached(self, epoch: int, stored_seq: int) -> int:
        """The stream's first ack: the collector had ``stored_seq`` of ``epoch`` before it began.

        Settles every drop that waited for it; returns how many of them were lost (now counted)."""
        with self._lock:
            stored = stored_seq if epoch == self.epoch else 0  # none of this epoch: none of ours
            lost = self._drops.attached(stored)
            self._note_resolved_locked()
            return lost

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(
                reports=self._live_count(),
                bytes=self._bytes,
                dropped_total=self._drops.dropped_total,
                acked_seq=self._acked_seq,
                last_seq=self._last_seq,
                disk_failures_total=self._disk_failures_total,
                on_disk=self._on_disk(),
                disk_bytes=self._store.disk_bytes if self._on_disk() and self._store is not None else 0,
                dropped_unresolved=len(self._drops),
            )

    def take_events(self) -> list[str]:
        """What happened to the spool since the last call (for the next report's events)."""
        with self._lock:
            events, self._events = self._events, []
            return events

    def all_acked(self) -> bool:
        """Nothing left to deliver: every report was acknowledged or dropped (and counted)."""
        with self._lock:
            return not self._live_count()

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store_call(lambda s: s.close())

    # ---- helpers (lock held) ----

    def _on_disk(self) -> bool:
        return self._store is not None and not self._store.degraded

    def _make_room_locked(self, size: int) -> None:
        while not self._fits(size):
            if self._live_count():
                self._drop_oldest_locked()
            elif not self._reclaim_locked():
                return

    def _reclaim_locked(self) -> bool:
        """Free the done segment being written; True when that changed what fits."""
        if self._store is None or not self._on_disk():
            return False
        try:
            return self._store.reclaim()
        except OSError as err:
            self._degrade_locked(err)
            return True  # in memory now: the bound is the memory one

    def _fits(self, size: int) -> bool:
        """Room for one more report of ``size`` bytes: on disk, what the directory would take."""
        if self._store is not None and not self._store.degraded:
            return self._store.footprint_after(size) <= self.max_bytes
        return self._bytes + size <= self.max_bytes

    def _fits_alone(self, size: int) -> bool:
        if self._store is not None and not self._store.degraded:
            return segment_footprint(size) <= self.max_bytes
        return size <= self.max_bytes

    def _store_call(self, call: Callable[[SegmentStore], None]) -> None:
        assert self._store is not None
        try:
            call(self._store)
        except OSError as err:
            self._degrade_locked(err)

    def _degrade_locked(self, err: OSError) -> None:
        assert self._store is not None
        if self._store.degraded:
            return
        self._disk_failures_total += 1
        log.error(
            "spool directory failed; keeping reports in memory only until the agent restarts",
            directory=str(self._store.directory), error=err.strerror or str(err),
        )  # fmt: skip
        self._events.append(f"spool directory failed ({err.strerror or err}); spooling in memory only")
        self._store.degrade()

    def _live_count(self) -> int:
        return len(self._records) - self._head

    def _expire_locked(self, now: float) -> None:
        while self._live_count() and now - self._records[self._head].produced_at > self.max_age_seconds:
            self._drop_oldest_locked()

    def _drop_oldest_locked(self) -> None:
        seq = self._pop_oldest_locked().seq
        self._drops.dropped(seq)
        if self._store is not None:
            dropped, unresolved = self._drops.dropped_total, self._drops.flat()
            self._store_call(lambda s: s.note_skipped(seq, dropped, unresolved))

    def _note_resolved_locked(self) -> None:
        if self._store is not None:
            dropped, unresolved = self._drops.dropped_total, self._drops.flat()
            self._store_call(lambda s: s.note_resolved(dropped, unresolved))

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


# Errors that say the disk is full or failing (the spool goes on in memory), not that the
# operator named a directory the agent may not use (that stops it, exit 2).
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


def _open_store(directory: Path, max_bytes: int) -> tuple[SegmentStore | None, Recovered | None]:
    try:
        store = SegmentStore(directory, segment_bytes=segment_bytes_for(max_bytes))
        return store, store.recover()
    except OSError as err:
        if err.errno not in _DISK_ERRNOS:
            raise
        log.error(
            "spool directory unusable; keeping reports in memory only until the agent restarts",
            directory=str(directory), error=err.strerror or str(err),
        )  # fmt: skip
        return None, None


def segment_footprint(size: int) -> int:
    """What a spool directory holding one report of ``size`` bytes takes at least."""
    return SegmentStore.footprint_of_one(size)


def _seq_of(record: Record) -> int:
    return record.seq


_GONE = Record(seq=0, produced_at=0.0, data=b"")


def _new_epoch() -> int:
    # Microseconds since 1970: a restart without a spool always starts a later epoch.
    return time.time_ns() // 1000
