"""The disk spool's writing side: records appended to segments, finished segments deleted, and
what the directory takes against the spool's bound.

The disk spool is this folder's ``record`` (a record's bytes), ``segment_file`` (a segment's
name and size), ``state_file`` (``state.json``), ``recovery`` (reading it all back at start)
and ``disk_io`` (the writes that reach the device); this store ties them together for the
spool (``nodeagent.agent.delivery.spool``).

Each record is synced to the device (``fdatasync``) before the sender may send it; the state
file is rewritten at most once a second, and always before a finished segment is deleted.
Appends after a restart go to a new segment, so damaged bytes are never followed by new data
in the same file.

A write that fails or comes up short (a full disk) is undone (the file is cut back to the last
whole record) and raised as ``SpoolDiskError``; the spool then keeps its reports in memory and
calls ``degrade``. From then on the store writes no records, only the state file, on every
append, naming the last seq handed out: a restart carries on above every seq that may have
left the agent, and counts the ones that were in memory only, and unacknowledged, as dropped.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import structlog

from nodeagent.agent.delivery import recovery
from nodeagent.agent.delivery.disk_io import (
    BLOCK_BYTES,
    SpoolDiskError,
    blocks,
    fsync_dir,
    private_directory,
    write_all,
)
from nodeagent.agent.delivery.record import HEADER_BYTES, Record, encode
from nodeagent.agent.delivery.segment_file import Segment, segment_path
from nodeagent.agent.delivery.state_file import STATE_RESERVE_BYTES, State, read_state, write_state
from nodeagent.core.program.lock_file import LockFile

log = structlog.get_logger("nodeagent.spool")

SEGMENT_BYTES = 4 * 1024 * 1024
MIN_SEGMENT_BYTES = 16 * 1024
STATE_INTERVAL_SECONDS = 1.0
# The lock file beside the segments (core/program/lock_file.py), as Prometheus has in its TSDB folder.
LOCK_NAME = "lock"


def segment_bytes_for(max_bytes: int) -> int:
    """Segment size for a spool bounded at ``max_bytes``: small enough that the acknowledged
    records a segment still holds until it is deleted are a small share of the bound."""
    return max(MIN_SEGMENT_BYTES, min(SEGMENT_BYTES, max_bytes // 8))


class SegmentStore:
    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        private_directory(directory)
        # One agent per directory: a second would hand out the same epoch and seqs
        # (``LockedError`` names the one that holds it).
        self._lock = LockFile(directory / LOCK_NAME, f"spool directory {directory}")
        self._segments: list[Segment] = []
        self._fd: int | None = None
        self._written = 0
        self._last_state = 0.0
        self._state_dirty = False
        self._renames: list[tuple[Segment, int]] = []
        self.degraded = False
        self._floor_failed = False
        # What state.json says, as it will say it next (written at most once a second, see
        # _maybe_write_state); its last_seq is the last seq handed out.
        self._state = State()

    @property
    def disk_bytes(self) -> int:
        """What the segments take on disk (as the filesystem allocates them), plus the state
        file's reserve."""
        return sum(segment.disk_bytes for segment in self._segments) + STATE_RESERVE_BYTES

    @staticmethod
    def footprint_of_one(data_bytes: int) -> int:
        return blocks(HEADER_BYTES + data_bytes) + BLOCK_BYTES + STATE_RESERVE_BYTES

    def footprint_after(self, data_bytes: int) -> int:
        """At most ``disk_bytes`` once a record of ``data_bytes`` more is appended: the blocks its
        bytes need, and room for one block of the filesystem's own (an extent block) besides."""
        size = HEADER_BYTES + data_bytes
        if self._fd is None or self._written >= self.segment_bytes or not self._segments:
            return self.disk_bytes + blocks(size) + BLOCK_BYTES
        current = self._segments[-1]
        overhead = max(BLOCK_BYTES, current.allocated - blocks(current.size))
        return self.disk_bytes - current.disk_bytes + blocks(current.size + size) + overhead

    def recover(self) -> recovery.Recovered:
        """Take up what the directory holds (``recovery``); the spool carries on from it."""
        out = recovery.recover(self.directory, read_state(self.directory))
        self._segments, self._renames = out.segments, out.renames
        self._state = State(
            epoch=out.epoch,
            acked_seq=out.acked_seq,
            skipped_through=out.done_through,
            dropped_total=out.dropped_total,
            last_seq=out.last_seq,
            counted_through=out.last_seq,
            unresolved=out.unresolved,
        )
        self._delete_finished()
        return out

    def begin(self, epoch: int, acked_seq: int, dropped_total: int) -> None:
        self._state.epoch, self._state.acked_seq, self._state.dropped_total = epoch, acked_seq, dropped_total
        self._write_state()

    def append(self, record: Record) -> None:
        self._state.last_seq = record.seq
        if self.degraded:
            self._write_floor()
            return
        if self._fd is None or self._written >= self.segment_bytes:
            self._roll(record.seq)
        assert self._fd is not None
        blob = encode(record)
        segment = self._segments[-1]
        try:
            write_all(self._fd, blob)
            # On the device before the sender can see it: a report that was sent can never be lost
            # to a power cut and its seq handed out again (the collector would take the new report
            # for a duplicate). At one report a second this is one fdatasync a second.
            os.fdatasync(self._fd)
        except OSError as err:
            # Cut the half record off: nothing after the last whole record, so a restart neither
            # reads it nor mistakes it for a write torn by a crash.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._written)
            segment.size = self._written
            raise SpoolDiskError(err.errno, err.strerror or str(err)) from err
        self._written += len(blob)
        segment.size = self._written
        with contextlib.suppress(OSError):
            segment.allocated = os.fstat(self._fd).st_blocks * 512
        segment.last_seq = record.seq
        self._maybe_write_state(time.monotonic())

    def degrade(self) -> None:
        """Stop writing records (the disk failed); from now on only the state file, per append."""
        self.degraded = True
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        self._write_floor()

    def note_acked(self, acked_seq: int) -> None:
        self._state.acked_seq = acked_seq
        self._state_dirty = True
        self._delete_finished()
        self._maybe_write_state(time.monotonic())

    def note_dropped(self, seq: int, dropped_total: int, produced_at: float) -> None:
        """A report dropped unwritten (larger than the whole spool): an empty marker keeps its seq."""
        self._state.dropped_total = dropped_total
        self._state_dirty = True
        self.append(Record(seq=seq, produced_at=produced_at, data=b""))

    def note_skipped(self, seq: int, dropped_total: int, unresolved: list[int] | None = None) -> None:
        self._state.skipped_through = max(self._state.skipped_through, seq)
        self._state.dropped_total = dropped_total
        if unresolved is not None:
            self._state.unresolved = unresolved
        self._state_dirty = True
        self._delete_finished()
        self._maybe_write_state(time.monotonic())

    def note_resolved(self, dropped_total: int, unresolved: list[int]) -> None:
        """Unresolved drops settled: the lost ones are in ``dropped_total`` now."""
        self._state.dropped_total = dropped_total
        self._state.unresolved = unresolved
        self._state_dirty = True
        if self.degraded:
            self._write_floor()
        else:
            self._maybe_write_state(time.monotonic())

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        self._write_state()
        self._lock.release()

    def reclaim(self) -> bool:
        """Delete the segment being written too, when all of it is done; True if that freed any."""
        before = len(self._segments)
        self._delete_finished(current=True)
        return len(self._segments) < before

    # ---- helpers ----

    def _roll(self, first_seq: int) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        path = segment_path(self.directory, first_seq)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._written = 0
        self._segments.append(Segment(path, first_seq, first_seq - 1))
        fsync_dir(self.directory)

    def _delete_finished(self, *, current: bool = False) -> None:
        done = max(self._state.acked_seq, self._state.skipped_through)
        # The segment being written goes too once it is done and half full (or room is needed):
        # deleting it at every ack would cost a new file and three more syncs per report.
        keep = (
            self._segments[-1]
            if self._fd is not None and not current and self._written < self.segment_bytes // 2
            else None
        )
        finished = [segment for segment in self._segments if segment.last_seq <= done and segment is not keep]
        if not finished:
            return
        # The state that explains their absence (acked, or dropped and counted) goes first: a crash
        # between the two must not leave reports that are neither spooled nor accounted for.
        self._write_state()
        if self._fd is not None and self._segments[-1] in finished:
            os.close(self._fd)  # everything in it is done: the next append starts a new one
            self._fd = None
        for segment in finished:
            segment.path.unlink(missing_ok=True)
        self._segments = [segment for segment in self._segments if segment not in finished]

    def _maybe_write_state(self, now: float) -> None:
        if self._state_dirty and now - self._last_state >= STATE_INTERVAL_SECONDS:
            self._write_state()

    def _write_floor(self) -> None:
        # Degraded: the one thing that must reach the disk is how far the seqs went.
        try:
            self._write_state()
        except OSError as err:
            if not self._floor_failed:
                self._floor_failed = True
                log.error(
                    "cannot record the spool's last seq either; a restart may start a new epoch",
                    error=str(err),
                )

    def _write_state(self) -> None:
        write_state(self.directory, self._state)
        self._last_state = time.monotonic()
        self._state_dirty = False
        if self._renames:
            self._mark_counted()

    def _mark_counted(self) -> None:
        # Only once the drop count that includes them is durable: say which segments' losses were
        # counted. A crash in between counts them again (too many, never too few).
        for segment, lost in self._renames:
            path = segment_path(self.directory, segment.first_seq, lost)
            with contextlib.suppress(FileNotFoundError):
                segment.path.rename(path)
                segment.path, segment.lost_counted = path, lost
        self._renames.clear()
