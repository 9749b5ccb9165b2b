"""Reading the disk spool back at start: the reports still to deliver, and what was lost.

Every seq handed out is written to a segment in order (a report too large for the spool as an
empty marker record), so the seqs on disk run without gaps from the acknowledged mark to the
last one produced. A gap found next to damaged bytes is therefore exactly the reports the damage
destroyed. Recovery reads every whole record whose checksum matches; after a bad one it
resynchronises on the next valid record, and it counts the seqs lost in between as dropped
(once: the segment is renamed ``seg-<first>.lost-<n>.log``, ``n`` the seqs it lacked when
counted, see ``segment_file``). Damage after the last valid record is a write cut short by a crash (one
report, produced and never synced) or destroyed records that may have left the agent: either
way their seqs are never handed out again, and they are counted. Seqs the state file names
beyond every record were only in memory (the disk had failed): counted too; so are markers
above the state file's last seq, drops whose count had not reached it yet. The store appends
after a restart to a new segment, so damaged bytes are never followed by new data in the same
file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import structlog

from nodeagent.agent.delivery.record import HEADER, HEADER_BYTES, MAGIC, MAX_RECORD_BYTES, Record, parse_at, seq_at
from nodeagent.agent.delivery.segment_file import Segment, segment_files
from nodeagent.agent.delivery.state_file import State

log = structlog.get_logger("nodeagent.spool")


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
    # For the store: how far every seq is done (acked or dropped), the segments kept, and the
    # losses to put in their names once the drop count that includes them is durable.
    done_through: int = 0
    segments: list[Segment] = field(default_factory=list)
    renames: list[tuple[Segment, int]] = field(default_factory=list)


@dataclass(slots=True)
class Scan:
    """What one segment's bytes hold."""

    records: list[Record] = field(default_factory=list)
    damaged_bytes: int = 0  # bytes that are part of no valid record
    tail_bytes: int = 0  # of those, the ones after the last valid record
    tail_torn: bool = False  # the tail looks like a write cut short (never synced, never sent)
    tail_one_record: bool = False  # the tail is exactly one whole record with a bad checksum
    tail_seqs: list[int] = field(default_factory=list)  # what the headers still readable in it name
    smallest_record_bytes: int = 0


def recover(directory: Path, state: State) -> Recovered:
    """What ``directory`` holds beyond ``state``; deletes segment files that hold nothing."""
    out = Recovered(
        epoch=state.epoch,
        acked_seq=state.acked_seq,
        dropped_total=state.dropped_total,
        unresolved=state.unresolved,
    )
    done = max(out.acked_seq, state.skipped_through)
    scans: list[tuple[Segment, Scan]] = []
    for path, first_seq, counted in segment_files(directory):
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
        scans.append((Segment(path, first_seq, last, stats.st_size, counted, stats.st_blocks * 512), found))
    last_valid = max([done] + [s.last_seq for s, _ in scans])
    # The last seq that may have left the agent: what the state file names (a clean stop, or a
    # failing disk), or what a destroyed tail of the newest segment may have held.
    handed_out = max(last_valid, state.last_seq)
    if scans and scans[-1][1].tail_bytes:
        handed_out = max(handed_out, last_valid + _records_in_tail(scans[-1][1], last_valid))
    for index, (segment, found) in enumerate(scans):
        end = scans[index + 1][0].first_seq - 1 if index + 1 < len(scans) else handed_out
        if found.damaged_bytes:
            present = {r.seq for r in found.records}
            missing = [seq for seq in range(segment.first_seq, end + 1) if seq not in present]
            # Lost: the seqs not done (acked, dropped) when destroyed, and not missing already at
            # an earlier count (the name's n; the acked mark may have passed those since).
            lost = min(sum(1 for seq in missing if seq > done), len(missing) - segment.lost_counted)
            if lost > 0:
                out.lost += lost
            if len(missing) > segment.lost_counted:
                out.renames.append((segment, len(missing)))
            segment.last_seq = max(segment.last_seq, end)
        out.records.extend(r for r in found.records if r.seq > done and r.data)
        if state.epoch:
            out.dropped_total += _uncounted_markers(found, state)
    # Seqs handed out past every record on disk (in memory only while the disk was failing).
    memory_only = max(0, handed_out - max(last_valid, done, state.counted_through))
    if not (scans and scans[-1][1].damaged_bytes):
        out.lost += memory_only
    if out.lost:
        log.warning("reports lost from the spool counted as dropped", reports=out.lost)
    out.dropped_total += out.lost
    out.last_seq = handed_out
    out.done_through = done
    out.segments = [segment for segment, _ in scans]
    return out


def _uncounted_markers(found: Scan, state: State) -> int:
    """Reports too large for the spool whose drop the state file never counted.

    Such a drop is counted in memory and its marker record synced at once, but the count
    reaches the state file up to a second later. A state file holds the drop count and the
    last seq handed out of the same moment, so the markers above its last seq are the drops
    its count lacks (a kill came first). Counted here, they are in the state file that the
    spool writes as it starts, with a last seq above them, and never counted again."""
    return sum(1 for r in found.records if not r.data and r.seq > state.last_seq)


def scan(blob: bytes) -> Scan:
    """Every valid record of a segment, resynchronising after damage."""
    out = Scan()
    view = memoryview(blob)
    offset = 0
    while offset < len(blob):
        parsed = parse_at(blob, view, offset)
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
            out.tail_seqs = _header_seqs(blob, offset)
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
        if parse_at(blob, view, offset) is not None:
            return offset
        offset += 1


def _looks_torn(blob: bytes, offset: int) -> bool:
    tail = blob[offset:]
    if not tail.strip(b"\0"):
        return True  # a crash before writeback leaves the file's new length filled with zeros
    if len(tail) < HEADER.size:
        return MAGIC.startswith(tail[: len(MAGIC)])
    magic, length, _crc = HEADER.unpack_from(blob, offset)
    return bool(magic == MAGIC and length <= MAX_RECORD_BYTES and offset + HEADER_BYTES + length > len(blob))


def _one_whole_record(blob: bytes, offset: int) -> bool:
    if len(blob) - offset < HEADER_BYTES:
        return False
    magic, length, _crc = HEADER.unpack_from(blob, offset)
    return bool(magic == MAGIC and offset + HEADER_BYTES + length == len(blob))


def _header_seqs(blob: bytes, offset: int) -> list[int]:
    seqs = []
    at = blob.find(MAGIC, offset)
    while at >= 0:
        seq = seq_at(blob, at)
        if seq is not None:
            seqs.append(seq)
        at = blob.find(MAGIC, at + 1)
    return seqs


def _records_in_tail(tail: Scan, last_valid: int) -> int:
    """How many reports the damaged tail of the newest segment stands for, after ``last_valid``.

    A write cut short (a kill or power cut while appending) is one report, produced and never
    synced: gone, so counted, and its seq is not handed out again either, since damage that only
    looks like it (a flipped length field) may be a record that was sent. A whole record with a
    bad checksum is one. Anything else may have held as many records as the smallest record seen
    fits into it: never fewer than were there. Whatever it looks like, a header in it that still
    names a later seq (as many as could fit) means records up to that one: a flipped length field
    that claims more than the file holds makes damaged records behind it look like one write cut
    short."""
    most = tail.tail_bytes // HEADER_BYTES + 1
    shown = [seq - last_valid for seq in tail.tail_seqs if 0 < seq - last_valid <= most]
    if tail.tail_torn or tail.tail_one_record:
        return max([1, *shown])
    smallest = tail.smallest_record_bytes or HEADER_BYTES
    return max([1, -(-tail.tail_bytes // smallest), *shown])
