"""The spool's on-disk form: append-only segment files of checksummed records, plus a state file.

Record layout (little endian)::

    magic  b"NR"      2 bytes
    length  uint32    payload bytes
    crc32   uint32    over seq, produced_at and payload
    seq     uint64
    produced_at float64 (seconds since 1970)
    payload           one serialized NodeReport (empty: a marker for a report dropped unwritten)

Every seq handed out is written here in order (a report too large for the spool as an empty
marker record), so the seqs on disk run without gaps from the acknowledged mark to the last
one produced. A gap found next to damaged bytes is therefore exactly the reports the damage
destroyed. Recovery reads every whole record whose checksum matches; after a bad one it
resynchronises on the next valid record, and it counts the seqs lost in between as dropped
(once: the segment is renamed ``seg-<first>.lost-<n>.log`` to say how many were counted).
Damage after the last valid record is a write cut short by a crash (one report, produced and
never synced) or destroyed records that may have left the agent: either way their seqs are
never handed out again, and they are counted. Appends after a restart go to a new
segment, so damaged bytes are never followed by new data in the same file.

``state.json`` holds the epoch, the highest acknowledged seq, the highest seq dropped for lack
of room, the drop count and the runs of dropped seqs not counted yet (they may have reached the
collector; ``nodeagent.agent.delivery.unresolved``), so a restart neither resends what the collector has nor forgets
where the epoch was. It also holds the last seq handed out (never behind the records on disk;
exact at a clean stop and while the disk is failing) and how far a recovery already counted
seqs that are on no record (``counted_through``), so no loss is counted twice. It is padded
to a fixed size so that, when the disk is full and the usual write-then-rename cannot
allocate, it can still be rewritten in place. Each record is synced to
the device (``fdatasync``) before the sender may send it; the state file is rewritten at most
once a second, and always before a finished segment is deleted.

A write that fails or comes up short (a full disk) is undone (the file is cut back to the last
whole record) and raised as ``SpoolDiskError``; the spool then keeps its reports in memory and
calls ``degrade``. From then on the store writes no records, only the state file, on every
append, naming the last seq handed out: a restart carries on above every seq that may have
left the agent, and counts the ones that were in memory only, and unacknowledged, as dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("nodeagent.spool")

MAGIC = b"NR"
_HEADER = struct.Struct("<2sII")  # magic, length, crc32
_META = struct.Struct("<Qd")  # seq, produced_at
HEADER_BYTES = _HEADER.size + _META.size
SEGMENT_BYTES = 4 * 1024 * 1024
MIN_SEGMENT_BYTES = 16 * 1024
STATE_INTERVAL_SECONDS = 1.0
STATE_FILE = "state.json"
# state.json is padded to this size: an in-place rewrite never needs a new block (the runs of
# unresolved drops, at most 2 x unresolved.MAX_RANGES of them, fit with room to spare).
STATE_BYTES = 1024
# What the filesystem allocates per file (a page on tmpfs, a block on ext4): segments count
# against the spool's bound in whole blocks, and state.json plus its temporary file as two.
BLOCK_BYTES = 4096
STATE_RESERVE_BYTES = 2 * BLOCK_BYTES
# A record header claiming more than this is damage, not a write cut short.
_MAX_RECORD_BYTES = 256 * 1024 * 1024
_SEGMENT_NAME = re.compile(r"seg-(\d{20})(?:\.lost-(\d+))?\.log")


class SpoolDiskError(OSError):
    """The spool directory cannot take a write (full disk, I/O error)."""


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    produced_at: float
    data: bytes


@dataclass(slots=True)
class Recovered:
    epoch: int = 0
    acked_seq: int = 0
    dropped_total: int = 0
    last_seq: int = 0
    records: list[Record] = field(default_factory=list)
    # Reports found lost in this recovery (already included in dropped_total).
    lost: int = 0
    # Runs of seqs dropped after they may have been sent, not yet known lost (flat: first, last, ...).
    unresolved: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Scan:
    """What one segment's bytes hold."""

    records: list[Record] = field(default_factory=list)
    damaged_bytes: int = 0  # bytes that are part of no valid record
    tail_bytes: int = 0  # of those, the ones after the last valid record
    tail_torn: bool = False  # the tail looks like a write cut short (never synced, never sent)
    tail_one_record: bool = False  # the tail is exactly one whole record with a bad checksum
    smallest_record_bytes: int = 0


@dataclass(slots=True)
class _Segment:
    path: Path
    first_seq: int
    last_seq: int
    size: int = 0
    lost_counted: int = 0
    # What the filesystem reports it holds (st_blocks): whole blocks, and on ext4 also the
    # extent block a file appended in many small synced writes can need.
    allocated: int = 0

    @property
    def disk_bytes(self) -> int:
        return max(_blocks(self.size), self.allocated)


def encode(record: Record) -> bytes:
    meta = _META.pack(record.seq, record.produced_at)
    crc = zlib.crc32(record.data, zlib.crc32(meta))
    return _HEADER.pack(MAGIC, len(record.data), crc) + meta + record.data


def _parse_at(blob: bytes, view: memoryview, offset: int) -> tuple[Record, int] | None:
    """The whole, intact record at ``offset`` and where it ends, or None."""
    if len(blob) - offset < HEADER_BYTES:
        return None
    magic, length, crc = _HEADER.unpack_from(blob, offset)
    start = offset + HEADER_BYTES
    if magic != MAGIC or start + length > len(blob):
        return None
    meta = view[offset + _HEADER.size : start]
    payload = view[start : start + length]
    if zlib.crc32(payload, zlib.crc32(meta)) != crc:
        return None
    seq, produced_at = _META.unpack_from(meta)
    return Record(seq=seq, produced_at=produced_at, data=bytes(payload)), start + length


def scan(blob: bytes) -> Scan:
    """Every valid record of a segment, resynchronising after damage."""
    out = Scan()
    view = memoryview(blob)
    offset = 0
    while offset < len(blob):
        parsed = _parse_at(blob, view, offset)
        if parsed is not None:
            record, end = parsed
            out.records.append(record)
            size = end - offset
            out.smallest_record_bytes = min(out.smallest_record_bytes or size, size)
            offset = end
            continue
        resume = _next_valid(blob, view, offset + 1)
        if resume is None:
            out.damaged_bytes += len(blob) - offset
            out.tail_bytes = len(blob) - offset
            out.tail_torn = _looks_torn(blob, offset)
            out.tail_one_record = _one_whole_record(blob, offset)
            break
        out.damaged_bytes += resume - offset
        offset = resume
    return out


def decode_all(blob: bytes) -> tuple[list[Record], bool]:
    """Every valid record in ``blob``; True when damaged bytes were skipped."""
    found = scan(blob)
    return found.records, found.damaged_bytes > 0


def _next_valid(blob: bytes, view: memoryview, offset: int) -> int | None:
    while True:
        offset = blob.find(MAGIC, offset)
        if offset < 0:
            return None
        if _parse_at(blob, view, offset) is not None:
            return offset
        offset += 1


def _looks_torn(blob: bytes, offset: int) -> bool:
    tail = blob[offset:]
    if not tail.strip(b"\0"):
        return True  # a crash before writeback leaves the file's new length filled with zeros
    if len(tail) < _HEADER.size:
        return MAGIC.startswith(tail[: len(MAGIC)])
    magic, length, _crc = _HEADER.unpack_from(blob, offset)
    return bool(magic == MAGIC and length <= _MAX_RECORD_BYTES and offset + HEADER_BYTES + length > len(blob))


def _one_whole_record(blob: bytes, offset: int) -> bool:
    if len(blob) - offset < HEADER_BYTES:
        return False
    magic, length, _crc = _HEADER.unpack_from(blob, offset)
    return bool(magic == MAGIC and offset + HEADER_BYTES + length == len(blob))


def segment_bytes_for(max_bytes: int) -> int:
    """Segment size for a spool bounded at ``max_bytes``: small enough that the acknowledged
    records a segment still holds until it is deleted are a small share of the bound."""
    return max(MIN_SEGMENT_BYTES, min(SEGMENT_BYTES, max_bytes // 8))


def _blocks(size: int) -> int:
    return -(-size // BLOCK_BYTES) * BLOCK_BYTES


class SegmentStore:
    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        _private_directory(directory)
        self._segments: list[_Segment] = []
        self._fd: int | None = None
        self._written = 0
        self._last_state = 0.0
        self._state_dirty = False
        self._renames: list[tuple[_Segment, int]] = []
        self.degraded = False
        self._floor_failed = False
        self.epoch = 0
        self.acked_seq = 0
        self.skipped_through = 0
        self.dropped_total = 0
        # The last seq handed out (the state file has it: exact at a clean stop and while degraded).
        self.last_seq = 0
        self.counted_through = 0
        # Drops not yet counted (nodeagent.agent.delivery.unresolved), written with dropped_total.
        self.unresolved: list[int] = []

    @property
    def disk_bytes(self) -> int:
        """What the segments take on disk (as the filesystem allocates them), plus the state
        file's reserve."""
        return sum(segment.disk_bytes for segment in self._segments) + STATE_RESERVE_BYTES

    @staticmethod
    def footprint_of_one(data_bytes: int) -> int:
        return _blocks(HEADER_BYTES + data_bytes) + BLOCK_BYTES + STATE_RESERVE_BYTES

    def footprint_after(self, data_bytes: int) -> int:
        """At most ``disk_bytes`` once a record of ``data_bytes`` more is appended: the blocks its
        bytes need, and room for one block of the filesystem's own (an extent block) besides."""
        size = HEADER_BYTES + data_bytes
        if self._fd is None or self._written >= self.segment_bytes or not self._segments:
            return self.disk_bytes + _blocks(size) + BLOCK_BYTES
        current = self._segments[-1]
        overhead = max(BLOCK_BYTES, current.allocated - _blocks(current.size))
        return self.disk_bytes - current.disk_bytes + _blocks(current.size + size) + overhead

    def recover(self) -> Recovered:
        state = self._read_state()
        out = Recovered(
            epoch=int(state.get("epoch", 0)),
            acked_seq=int(state.get("acked_seq", 0)),
            dropped_total=int(state.get("dropped_total", 0)),
            unresolved=list(state.get("unresolved", [])),
        )
        done = max(out.acked_seq, int(state.get("skipped_through", 0)))
        scans: list[tuple[_Segment, Scan]] = []
        for path, first_seq, counted in self._segment_files():
            found = scan(path.read_bytes())
            if found.damaged_bytes:
                log.warning(
                    "spool segment has damaged bytes; resynchronised on the next valid record",
                    segment=path.name, damaged_bytes=found.damaged_bytes,
                )  # fmt: skip
            if not found.records and not found.damaged_bytes:
                path.unlink()
                continue
            last = found.records[-1].seq if found.records else first_seq - 1
            stats = path.stat()
            segment = _Segment(path, first_seq, last, stats.st_size, counted, stats.st_blocks * 512)
            scans.append((segment, found))
            self._segments.append(segment)
        last_valid = max([done] + [s.last_seq for s, _ in scans])
        # The last seq that may have left the agent: what the state file names (a clean stop, or a
        # failing disk), or what a destroyed tail of the newest segment may have held.
        handed_out = max(last_valid, int(state.get("last_seq", 0)))
        if scans and scans[-1][1].tail_bytes:
            handed_out = max(handed_out, last_valid + _records_in_tail(scans[-1][1]))
        for index, (segment, found) in enumerate(scans):
            end = scans[index + 1][0].first_seq - 1 if index + 1 < len(scans) else handed_out
            if found.damaged_bytes:
                present = {r.seq for r in found.records}
                expected = range(max(segment.first_seq, done + 1), end + 1)
                lost = sum(1 for seq in expected if seq not in present)
                if lost > segment.lost_counted:
                    out.lost += lost - segment.lost_counted
                    self._renames.append((segment, lost))
                segment.last_seq = max(segment.last_seq, end)
            out.records.extend(r for r in found.records if r.seq > done and r.data)
        # Seqs handed out past every record on disk (in memory only while the disk was failing).
        memory_only = max(0, handed_out - max(last_valid, done, int(state.get("counted_through", 0))))
        if not (scans and scans[-1][1].damaged_bytes):
            out.lost += memory_only
        if out.lost:
            log.warning("reports lost from the spool counted as dropped", reports=out.lost)
        out.dropped_total += out.lost
        out.last_seq = handed_out
        self.skipped_through = done
        self.last_seq = self.counted_through = handed_out
        self.epoch, self.acked_seq, self.dropped_total = out.epoch, out.acked_seq, out.dropped_total
        self.unresolved = out.unresolved
        self._delete_finished()
        return out

    def begin(self, epoch: int, acked_seq: int, dropped_total: int) -> None:
        self.epoch, self.acked_seq, self.dropped_total = epoch, acked_seq, dropped_total
        self._write_state()

    def append(self, record: Record) -> None:
        self.last_seq = record.seq
        if self.degraded:
            self._write_floor()
            return
        if self._fd is None or self._written >= self.segment_bytes:
            self._roll(record.seq)
        assert self._fd is not None
        blob = encode(record)
        segment = self._segments[-1]
        try:
            _write_all(self._fd, blob)
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
        self.acked_seq = acked_seq
        self._state_dirty = True
        self._delete_finished()
        self._maybe_write_state(time.monotonic())

    def note_dropped(self, seq: int, dropped_total: int, produced_at: float) -> None:
        """A report dropped unwritten (larger than the whole spool): an empty marker keeps its seq."""
        self.dropped_total = dropped_total
        self._state_dirty = True
        self.append(Record(seq=seq, produced_at=produced_at, data=b""))

    def note_skipped(self, seq: int, dropped_total: int, unresolved: list[int] | None = None) -> None:
        self.skipped_through = max(self.skipped_through, seq)
        self.dropped_total = dropped_total
        if unresolved is not None:
            self.unresolved = unresolved
        self._state_dirty = True
        self._delete_finished()
        self._maybe_write_state(time.monotonic())

    def note_resolved(self, dropped_total: int, unresolved: list[int]) -> None:
        """Unresolved drops settled: the lost ones are in ``dropped_total`` now."""
        self.dropped_total = dropped_total
        self.unresolved = unresolved
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

    # ---- helpers ----

    def _segment_files(self) -> list[tuple[Path, int, int]]:
        found = []
        for path in self.directory.glob("seg-*.log"):
            match = _SEGMENT_NAME.fullmatch(path.name)
            if match is None:
                log.warning("not a spool segment; left alone", path=str(path))
                continue
            found.append((path, int(match[1]), int(match[2] or 0)))
        return sorted(found, key=lambda item: item[1])

    def _roll(self, first_seq: int) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        path = self.directory / f"seg-{first_seq:020d}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._written = 0
        self._segments.append(_Segment(path, first_seq, first_seq - 1))
        _fsync_dir(self.directory)

    def reclaim(self) -> bool:
        """Delete the segment being written too, when all of it is done; True if that freed any."""
        before = len(self._segments)
        self._delete_finished(current=True)
        return len(self._segments) < before

    def _delete_finished(self, *, current: bool = False) -> None:
        done = max(self.acked_seq, self.skipped_through)
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
        state = {
            "epoch": self.epoch,
            "acked_seq": self.acked_seq,
            "skipped_through": self.skipped_through,
            "dropped_total": self.dropped_total,
            # Never behind what is on disk; exact at a clean stop and while degraded.
            "last_seq": self.last_seq,
            # Seqs up to here that are on no record were counted as dropped by a recovery already.
            "counted_through": self.counted_through,
            # Dropped after they may have been sent; counted once the collector says it lacks them.
            "unresolved": self.unresolved,
        }
        blob = json.dumps(state).encode().ljust(STATE_BYTES - 1) + b"\n"
        path = self.directory / STATE_FILE
        tmp = self.directory / (STATE_FILE + ".tmp")
        try:
            _write_file(tmp, blob)
            tmp.replace(path)
            _fsync_dir(self.directory)  # the rename itself survives a power cut
        except OSError as err:
            if not path.exists():
                raise SpoolDiskError(err.errno, err.strerror or str(err)) from err
            with contextlib.suppress(OSError):
                tmp.unlink()
            _overwrite(path, blob)  # no room for a new file: the padded old one takes it in place
        self._last_state = time.monotonic()
        self._state_dirty = False
        if self._renames:
            self._mark_counted()

    def _mark_counted(self) -> None:
        # Only once the drop count that includes them is durable: say which segments' losses were
        # counted. A crash in between counts them again (too many, never too few).
        for segment, lost in self._renames:
            path = self.directory / f"seg-{segment.first_seq:020d}.lost-{lost}.log"
            with contextlib.suppress(FileNotFoundError):
                segment.path.rename(path)
                segment.path, segment.lost_counted = path, lost
        self._renames.clear()

    def _read_state(self) -> dict[str, Any]:
        path = self.directory / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("spool state unreadable; starting a new epoch", path=str(path), error=str(err))
            return {}
        if not isinstance(raw, dict) or not all(_state_value(k, v) for k, v in raw.items()):
            log.warning("spool state malformed; starting a new epoch", path=str(path))
            return {}
        return raw


def _state_value(key: object, value: object) -> bool:
    if key == "unresolved":
        return isinstance(value, list) and all(isinstance(v, int) and v >= 0 for v in value)
    return isinstance(value, int) and value >= 0


def _records_in_tail(tail: Scan) -> int:
    """How many reports the damaged tail of the newest segment stands for.

    A write cut short (a kill or power cut while appending) is one report, produced and never
    synced: gone, so counted, and its seq is not handed out again either, since damage that only
    looks like it (a flipped length field) may be a record that was sent. A whole record with a
    bad checksum is one. Anything else may have held as many records as the smallest record seen
    fits into it: never fewer than were there."""
    if tail.tail_torn or tail.tail_one_record:
        return 1
    smallest = tail.smallest_record_bytes or HEADER_BYTES
    return max(1, -(-tail.tail_bytes // smallest))


def _write_all(fd: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(28, "short write")  # ENOSPC: a write that takes nothing is a full disk
        view = view[written:]


def _write_file(path: Path, blob: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        _write_all(fd, blob)
        os.fsync(fd)
    finally:
        os.close(fd)


def _overwrite(path: Path, blob: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        view = memoryview(blob)
        offset = 0
        while offset < len(blob):
            written = os.pwrite(fd, view[offset:], offset)
            if written <= 0:
                raise OSError(28, "short write")
            offset += written
        os.ftruncate(fd, len(blob))
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _private_directory(directory: Path) -> None:
    """Create the spool directory 0700 whatever the umask (reports say what runs on the node)."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
