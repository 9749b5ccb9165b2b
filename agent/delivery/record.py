"""One spool record's bytes: the layout, writing a record, and reading the one at an offset.

Record layout (little endian)::

    magic  b"NR"      2 bytes
    length  uint32    payload bytes
    crc32   uint32    over seq, produced_at and payload
    seq     uint64
    produced_at float64 (seconds since 1970)
    payload           one serialized NodeReport (empty: a marker for a report dropped unwritten)

A segment file is nothing but such records, one after another (``segment_file``); reading one
back across damage is ``recovery``'s.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = b"NR"
HEADER = struct.Struct("<2sII")  # magic, length, crc32
_META = struct.Struct("<Qd")  # seq, produced_at
_SEQ = struct.Struct("<Q")
HEADER_BYTES = HEADER.size + _META.size
# A record header claiming more than this is damage, not a write cut short.
MAX_RECORD_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    produced_at: float
    data: bytes


def encode(record: Record) -> bytes:
    meta = _META.pack(record.seq, record.produced_at)
    crc = zlib.crc32(record.data, zlib.crc32(meta))
    return HEADER.pack(MAGIC, len(record.data), crc) + meta + record.data


def parse_at(blob: bytes, view: memoryview, offset: int) -> tuple[Record, int] | None:
    """The whole, intact record at ``offset`` and where it ends, or None."""
    if len(blob) - offset < HEADER_BYTES:
        return None
    magic, length, crc = HEADER.unpack_from(blob, offset)
    start = offset + HEADER_BYTES
    if magic != MAGIC or start + length > len(blob):
        return None
    meta = view[offset + HEADER.size : start]
    payload = view[start : start + length]
    if zlib.crc32(payload, zlib.crc32(meta)) != crc:
        return None
    seq, produced_at = _META.unpack_from(meta)
    return Record(seq=seq, produced_at=produced_at, data=bytes(payload)), start + length


def seq_at(blob: bytes, offset: int) -> int | None:
    """The seq that a header at ``offset`` names, where its magic and seq field are there;
    nothing else is checked (the header of a damaged record can still say which it was)."""
    if len(blob) - offset < HEADER.size + _SEQ.size or blob[offset : offset + len(MAGIC)] != MAGIC:
        return None
    seq: int = _SEQ.unpack_from(blob, offset + HEADER.size)[0]
    return seq
