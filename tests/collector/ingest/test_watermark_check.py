"""The watermark checks the store makes as it loads them (``collector/store/watermark_check.py``);
the black-box case, a flipped bit in a stopped collector's file, is in ``test_store_integrity.py``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nodeagent.collector.store import nodes
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.watermark_check import verify, watermark_crc


def test_watermarks_are_checked_against_their_checksum_and_the_node_row() -> None:
    crc = watermark_crc
    node_rows = {"a": (7, 20), "b": (9, 5), "c": (3, 40), "d": (0, 0)}
    marks = [
        ("a", 7, 16404, crc("a", 7, 20)),  # a flipped bit: back to the node row's seq
        ("a", 6, 100, crc("a", 6, 101)),  # an older epoch that fails its checksum: deleted
        ("a", 5, 50, crc("a", 5, 50)),  # an older epoch, intact: kept
        ("b", 9, 8, crc("b", 9, 8)),  # intact but above the node row: the lower of the two
        ("b", 9 + 1024, 5, crc("b", 9 + 1024, 5)),  # (an epoch of its own, intact)
        ("ghost", 1, 1, None),  # no node row: not loaded at all
    ]
    kept, repairs = verify(node_rows, marks)
    assert kept == {"a": {7: 20, 5: 50}, "b": {9: 5, 1033: 5}, "c": {3: 40}, "d": {}}
    assert [(r.node_id, r.epoch, r.stored, r.repaired) for r in repairs] == [
        ("a", 7, 16404, 20), ("a", 6, 100, None), ("b", 9, 8, 5), ("c", 3, None, 40),  # c's was missing
    ]  # fmt: skip


def test_an_older_database_gets_checksums_for_the_watermarks_it_holds(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(nodes.SCHEMA.replace("    crc INTEGER,\n", ""))
        conn.execute("INSERT INTO nodes VALUES ('a','a','0',1,2,20,0,0,0,7,20,1,NULL,NULL)")
        conn.execute("INSERT INTO watermarks VALUES ('a', 7, 20)")
    conn.close()
    writer = StoreWriter(db)
    try:
        rows = writer.call_sync(writer.store.nodes.load)
        repairs = writer.store.repairs()
    finally:
        writer.close()
    assert [(r.node_id, r.watermarks) for r in rows] == [("a", {7: 20})]
    assert repairs == {"watermark": 0}
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT crc FROM watermarks").fetchall() == [(watermark_crc("a", 7, 20),)]
    conn.close()
