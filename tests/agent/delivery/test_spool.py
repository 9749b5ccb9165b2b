"""The spool: bounds, acks, restart from disk, torn tails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.agent.delivery.segments import HEADER_BYTES, Record, SegmentStore, decode_all, encode
from nodeagent.agent.delivery.spool import Spool


def _fill(spool: Spool, count: int, size: int = 100) -> None:
    for _ in range(count):
        seq = spool.next_seq
        spool.append(seq, bytes([seq % 256]) * size, produced_at=1000.0 + seq)


def test_full_spool_drops_oldest_and_counts() -> None:
    spool = Spool(max_bytes=1000)
    _fill(spool, 25)
    stats = spool.stats()
    assert (stats.reports, stats.bytes, stats.dropped_total, stats.last_seq) == (10, 1000, 15, 25)
    assert [r.seq for r in spool.records_from(0, 100)] == list(range(16, 26))


def test_ack_is_cumulative_and_ignores_other_epochs() -> None:
    spool = Spool()
    _fill(spool, 10)
    assert spool.ack(spool.epoch + 1, 9) == 0
    assert spool.ack(spool.epoch, 4) == 4
    assert spool.ack(spool.epoch, 3) == 0  # an older ack changes nothing
    assert spool.first_unacked_seq() == 5
    assert [r.seq for r in spool.records_from(7, 2)] == [7, 8]
    spool.ack(spool.epoch, 10)
    assert spool.all_acked()
    assert spool.first_unacked_seq() == 11


def test_age_bound_drops_stale_reports() -> None:
    spool = Spool(max_age_seconds=5.0)
    for seq, at in enumerate([100.0, 101.0, 102.0, 110.0], start=1):
        spool.append(seq, b"x", produced_at=at)
    # 100, 101 and 102 are more than 5 s older than the report at 110.
    assert [r.seq for r in spool.records_from(0, 10)] == [4]
    assert spool.stats().dropped_total == 3


def test_make_room_counts_the_drop_before_the_report_is_built() -> None:
    spool = Spool(max_bytes=300)
    _fill(spool, 3)
    spool.make_room(100, now=2000.0)
    assert spool.stats().dropped_total == 1
    spool.append(4, b"y" * 100, produced_at=2000.0)
    assert spool.stats().dropped_total == 1  # no second drop: room was made


def test_append_out_of_order_is_refused() -> None:
    spool = Spool()
    spool.append(1, b"a")
    with pytest.raises(ValueError, match="does not follow"):
        spool.append(3, b"c")


def test_restart_resends_unacked_and_continues_the_epoch(tmp_path: Path) -> None:
    first = Spool(directory=tmp_path)
    _fill(first, 12)
    first.ack(first.epoch, 5)
    first.close()
    second = Spool(directory=tmp_path)
    assert second.epoch == first.epoch
    assert [r.seq for r in second.records_from(0, 100)] == list(range(6, 13))
    assert second.next_seq == 13
    assert second.records_from(8, 1)[0].data == bytes([8]) * 100


def test_memory_only_spool_starts_a_later_epoch_each_time() -> None:
    first = Spool().epoch
    assert Spool().epoch > first


@pytest.mark.parametrize("cut", [1, HEADER_BYTES - 1, HEADER_BYTES + 10])
def test_torn_tail_is_skipped_not_parsed(tmp_path: Path, cut: int) -> None:
    spool = Spool(directory=tmp_path)
    _fill(spool, 5)
    spool.close()
    segment = next(tmp_path.glob("seg-*.log"))
    torn = encode(Record(seq=6, produced_at=1.0, data=b"z" * 100))[:cut]
    segment.write_bytes(segment.read_bytes() + torn)  # a crash in the middle of writing report 6
    again = Spool(directory=tmp_path)
    assert [r.seq for r in again.records_from(0, 100)] == [1, 2, 3, 4, 5]
    assert again.next_seq == 6
    _fill(again, 2)  # new reports go to a fresh segment, never after the torn bytes
    again.close()
    assert [r.seq for r in Spool(directory=tmp_path).records_from(0, 100)] == [1, 2, 3, 4, 5, 6, 7]


def test_corrupt_record_ends_its_segment(tmp_path: Path) -> None:
    blob = b"".join(encode(Record(seq=s, produced_at=1.0, data=b"p" * 50)) for s in (1, 2, 3))
    flipped = bytearray(blob)
    flipped[len(encode(Record(seq=1, produced_at=1.0, data=b"p" * 50))) + HEADER_BYTES + 3] ^= 0xFF
    records, torn = decode_all(bytes(flipped))
    assert torn
    assert [r.seq for r in records] == [1]


def test_acked_segments_are_deleted(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, segment_bytes=1000)
    store.recover()
    store.begin(epoch=7, acked_seq=0, dropped_total=0)
    for seq in range(1, 31):
        store.append(Record(seq=seq, produced_at=1.0, data=b"d" * 100))
    before = len(list(tmp_path.glob("seg-*.log")))
    store.note_acked(25)
    store.close()
    after = len(list(tmp_path.glob("seg-*.log")))
    assert before > after >= 1
    assert json.loads((tmp_path / "state.json").read_text())["acked_seq"] == 25


def test_a_report_larger_than_the_spool_is_dropped_alone(tmp_path: Path) -> None:
    spool = Spool(max_bytes=1000, directory=tmp_path)
    _fill(spool, 5)
    spool.make_room(5000, now=2000.0)
    spool.append(6, b"x" * 5000, produced_at=2000.0)
    assert [r.seq for r in spool.records_from(0, 100)] == [1, 2, 3, 4, 5]
    assert spool.stats().dropped_total == 1
    spool.ack(spool.epoch, 5)
    assert spool.all_acked()  # nothing left: report 6 is counted as dropped, never waited for
    spool.close()
    again = Spool(max_bytes=1000, directory=tmp_path)
    assert again.stats().dropped_total == 1


def test_a_kill_right_after_a_drop_still_accounts_for_every_report(tmp_path: Path) -> None:
    from nodeagent.agent.delivery.segments import SegmentStore

    store = SegmentStore(tmp_path, segment_bytes=300)
    store.recover()
    store.begin(epoch=9, acked_seq=0, dropped_total=0)
    for seq in range(1, 9):
        store.append(Record(seq=seq, produced_at=1.0, data=b"d" * 100))
    store.note_skipped(4, dropped_total=4)  # deletes the finished segment: the state goes first
    # No close(): the process is killed here.
    again = Spool(directory=tmp_path)
    seqs = [r.seq for r in again.records_from(0, 100)]
    stats = again.stats()
    assert seqs[0] == 5
    assert stats.dropped_total + len(seqs) == 8
