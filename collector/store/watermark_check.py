"""The watermarks checked as the store loads them: a flipped bit must not discard reports silently.

SQLite keeps no page checksums, so ``PRAGMA integrity_check`` passes a watermark whose value a
bad sector or a stray write changed. Dedup resumes from the watermarks after a restart: one that
reads 16,984 where 600 was stored would have the node's next 16,000 reports acknowledged and
dropped as duplicates, with nothing logged. Two sources check it:

- every watermark row carries a CRC-32 over (node, epoch, seq), written with it (databases of
  an older version get the column, and checksums of what they hold, when the store opens them);
- the node row's (epoch, last_seq) is written in the same transaction as that epoch's
  watermark, from the same state, so the two agree.

A watermark of the node row's epoch that fails its checksum is repaired to the node row's seq;
one whose checksum holds but which disagrees with the node row goes to the lower of the two
(what both sources support: a report between them that comes again is stored again, never
dropped); a missing one is made from the node row. A watermark of an older epoch that fails its
checksum has nothing to be checked against and is deleted: that epoch's reports, if an agent
sends them again, are stored again. Each repair is written back at once, logged at error level
with both values, and counted (``nodeagent_store_repairs_total{what="watermark"}``).
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

log = structlog.get_logger("nodeagent.collector")

# A watermark row as the store reads it: node id, epoch, seq, checksum (None: none stored).
MarkRow = tuple[str, int, int, int | None]


def watermark_crc(node_id: str, epoch: int, seq: int) -> int:
    """The checksum stored with a watermark row."""
    return zlib.crc32(f"{node_id}\0{epoch}\0{seq}".encode())


@dataclass(frozen=True, slots=True)
class Repair:
    node_id: str
    epoch: int
    stored: int | None  # the seq the table held (None: no row)
    repaired: int | None  # the seq it holds now (None: the row is deleted)
    node_row_seq: int  # what the node row says of its own epoch
    reason: str


def add_checksums(conn: sqlite3.Connection) -> None:
    """A database of an older version: add the checksum column and checksum what it holds."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(watermarks)")}
    if "crc" in columns:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE watermarks ADD COLUMN crc INTEGER")
        rows = conn.execute("SELECT node_id, epoch, seq FROM watermarks").fetchall()
        conn.executemany(
            "UPDATE watermarks SET crc=? WHERE node_id=? AND epoch=?",
            [(watermark_crc(node, epoch, seq), node, epoch) for node, epoch, seq in rows],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    log.info("watermarks given checksums", rows=len(rows))


def verify(
    node_rows: Mapping[str, tuple[int, int]], marks: Iterable[MarkRow]
) -> tuple[dict[str, dict[int, int]], list[Repair]]:
    """Each node's watermarks after the checks, and the repairs they took. ``node_rows``: node
    id -> (epoch, last_seq) of its row; watermarks of nodes without a row are left out."""
    kept: dict[str, dict[int, int]] = {node: {} for node in node_rows}
    repairs: list[Repair] = []
    for node, epoch, seq, crc in marks:
        if node not in node_rows:
            continue
        row_epoch, row_seq = node_rows[node]
        intact = crc == watermark_crc(node, epoch, seq)
        if epoch != row_epoch:
            if intact:
                kept[node][epoch] = seq
            else:
                repairs.append(
                    Repair(node, epoch, seq, None, row_seq, "checksum mismatch, nothing to check it against")
                )
            continue
        good = min(seq, row_seq) if intact else row_seq
        kept[node][epoch] = good
        if good != seq or not intact:
            reason = "disagrees with the node row" if intact else "checksum mismatch"
            repairs.append(Repair(node, epoch, seq, good, row_seq, reason))
    for node, (row_epoch, row_seq) in node_rows.items():
        if row_seq > 0 and row_epoch not in kept[node]:
            kept[node][row_epoch] = row_seq
            repairs.append(Repair(node, row_epoch, None, row_seq, row_seq, "missing"))
    return kept, repairs


def write_repairs(conn: sqlite3.Connection, repairs: list[Repair]) -> None:
    """Write the repairs in one transaction and say what each one was."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for r in repairs:
            if r.repaired is None:
                conn.execute("DELETE FROM watermarks WHERE node_id=? AND epoch=?", (r.node_id, r.epoch))
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO watermarks (node_id, epoch, seq, crc) VALUES (?,?,?,?)",
                    (r.node_id, r.epoch, r.repaired, watermark_crc(r.node_id, r.epoch, r.repaired)),
                )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    for r in repairs:
        log.error(
            "stored watermark damaged; repaired",
            node=r.node_id, epoch=r.epoch, reason=r.reason, watermark_seq=r.stored, node_row_seq=r.node_row_seq,
            now=r.repaired if r.repaired is not None else "deleted: this epoch's reports are stored again if resent",
        )  # fmt: skip
