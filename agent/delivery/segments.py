"""The spool's on-disk form: append-only segment files of checksummed records, plus a state file.

Record layout (little endian)::

    magic  b"NR"      2 bytes
    length  uint32    payload bytes
    crc32   uint32    over seq, produced_at and payload
    seq     uint64
    produced_at float64 (seconds since 1970)
    payload           one serialized NodeReport

A crash can leave the last record of a segment half written. Recovery reads records while the
header is whole, the payload is all there and the checksum matches; the first record that fails
ends that segment (it and anything after it are skipped, never parsed). Appends after a restart
go to a new segment, so a torn tail is never followed by good data in the same file.

``state.json`` holds the epoch, the highest acknowledged seq and the highest seq dropped for
lack of room, so a restart neither resends what the collector has nor forgets where the epoch
was. Each record is synced to the device (``fdatasync``) before the sender may send it; the
state file is rewritten at most once a second, and always before a finished segment is deleted.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("nodeagent.spool")

MAGIC = b"NR"
_HEADER = struct.Struct("<2sII")  # magic, length, crc32
_META = struct.Struct("<Qd")  # seq, produced_at
HEADER_BYTES = _HEADER.size + _META.size
SEGMENT_BYTES = 4 * 1024 * 1024
STATE_INTERVAL_SECONDS = 1.0
STATE_FILE = "state.json"


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
    torn: int = 0


@dataclass(slots=True)
class _Segment:
    path: Path
    first_seq: int
    last_seq: int


def encode(record: Record) -> bytes:
    meta = _META.pack(record.seq, record.produced_at)
    crc = zlib.crc32(record.data, zlib.crc32(meta))
    return _HEADER.pack(MAGIC, len(record.data), crc) + meta + record.data


def decode_all(blob: bytes) -> tuple[list[Record], bool]:
    """Every whole, intact record from the start of ``blob``; True when a torn or bad one ended it."""
    records: list[Record] = []
    offset = 0
    view = memoryview(blob)
    while offset < len(blob):
        if len(blob) - offset < HEADER_BYTES:
            return records, True
        magic, length, crc = _HEADER.unpack_from(blob, offset)
        start = offset + HEADER_BYTES
        if magic != MAGIC or start + length > len(blob):
            return records, True
        meta = view[offset + _HEADER.size : start]
        payload = view[start : start + length]
        if zlib.crc32(payload, zlib.crc32(meta)) != crc:
            return records, True
        seq, produced_at = _META.unpack_from(meta)
        records.append(Record(seq=seq, produced_at=produced_at, data=bytes(payload)))
        offset = start + length
    return records, False


class SegmentStore:
    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[_Segment] = []
        self._fd: int | None = None
        self._written = 0
        self._last_state = 0.0
        self._state_dirty = False
        self.epoch = 0
        self.acked_seq = 0
        self.skipped_through = 0
        self.dropped_total = 0

    def recover(self) -> Recovered:
        state = self._read_state()
        out = Recovered(
            epoch=int(state.get("epoch", 0)),
            acked_seq=int(state.get("acked_seq", 0)),
            dropped_total=int(state.get("dropped_total", 0)),
        )
        skip_through = max(out.acked_seq, int(state.get("skipped_through", 0)))
        out.last_seq = skip_through
        for path in sorted(self.directory.glob("seg-*.log")):
            records, torn = decode_all(path.read_bytes())
            if torn:
                out.torn += 1
                log.warning("spool segment has a torn or corrupt tail; the rest of it is skipped", segment=path.name)
            live = [r for r in records if r.seq > skip_through and r.seq > out.last_seq]
            out.records.extend(live)
            if records:
                out.last_seq = max(out.last_seq, records[-1].seq)
                self._segments.append(_Segment(path, records[0].seq, records[-1].seq))
            else:
                path.unlink()
        self.skipped_through = skip_through
        self._delete_finished()
        return out

    def begin(self, epoch: int, acked_seq: int, dropped_total: int) -> None:
        self.epoch, self.acked_seq, self.dropped_total = epoch, acked_seq, dropped_total
        self._write_state(force=True)

    def append(self, record: Record) -> None:
        if self._fd is None or self._written >= self.segment_bytes:
            self._roll(record.seq)
        assert self._fd is not None
        blob = encode(record)
        os.write(self._fd, blob)
        # On the device before the sender can see it: a report that was sent can never be lost to
        # a power cut and its seq handed out again (the collector would take the new report for a
        # duplicate). At one report a second this is one fdatasync a second.
        os.fdatasync(self._fd)
        self._written += len(blob)
        self._segments[-1].last_seq = record.seq
        self._maybe_write_state(time.monotonic())

    def note_acked(self, acked_seq: int) -> None:
        self.acked_seq = acked_seq
        self._state_dirty = True
        self._delete_finished()
        self._maybe_write_state(time.monotonic())

    def note_dropped(self, dropped_total: int) -> None:
        """A report dropped that was never written here (larger than the whole spool)."""
        self.dropped_total = dropped_total
        self._state_dirty = True
        self._maybe_write_state(time.monotonic())

    def note_skipped(self, seq: int, dropped_total: int) -> None:
        self.skipped_through = max(self.skipped_through, seq)
        self.dropped_total = dropped_total
        self._state_dirty = True
        self._delete_finished()
        self._maybe_write_state(time.monotonic())

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        self._write_state(force=True)

    # ---- helpers ----

    def _roll(self, first_seq: int) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
        path = self.directory / f"seg-{first_seq:020d}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._written = 0
        self._segments.append(_Segment(path, first_seq, first_seq - 1))
        _fsync_dir(self.directory)

    def _delete_finished(self) -> None:
        done = max(self.acked_seq, self.skipped_through)
        last = len(self._segments) - 1
        finished = [
            segment
            for index, segment in enumerate(self._segments)
            if segment.last_seq <= done and not (index == last and self._fd is not None)
        ]
        if not finished:
            return
        # The state that explains their absence (acked, or dropped and counted) goes first: a crash
        # between the two must not leave reports that are neither spooled nor accounted for.
        self._write_state(force=True)
        for segment in finished:
            segment.path.unlink(missing_ok=True)
        self._segments = [segment for segment in self._segments if segment not in finished]

    def _maybe_write_state(self, now: float) -> None:
        if self._state_dirty and now - self._last_state >= STATE_INTERVAL_SECONDS:
            self._write_state(force=True)

    def _write_state(self, *, force: bool) -> None:
        if not force:
            return
        state = {
            "epoch": self.epoch,
            "acked_seq": self.acked_seq,
            "skipped_through": self.skipped_through,
            "dropped_total": self.dropped_total,
        }
        tmp = self.directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state))
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        tmp.replace(self.directory / STATE_FILE)
        self._last_state = time.monotonic()
        self._state_dirty = False

    def _read_state(self) -> dict[str, int]:
        path = self.directory / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("spool state unreadable; starting a new epoch", path=str(path), error=str(err))
            return {}
        if not isinstance(raw, dict) or not all(isinstance(v, int) and v >= 0 for v in raw.values()):
            log.warning("spool state malformed; starting a new epoch", path=str(path))
            return {}
        return raw


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
