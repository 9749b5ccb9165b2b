"""The spool: bounds, acks, restart from disk, torn tails."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from nodeagent.agent.delivery.record import HEADER_BYTES, Record, encode
from nodeagent.agent.delivery.recovery import decode_all
from nodeagent.agent.delivery.segment_store import SegmentStore
from nodeagent.agent.delivery.spool import MIN_DISK_BYTES, Spool


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
    # Report 6 was produced and is gone: counted, and its seq is not handed out again (damage that
    # only looks like a torn write may be a record that was sent).
    assert again.next_seq == 7
    assert again.stats().dropped_total == 1
    _fill(again, 2)  # new reports go to a fresh segment, never after the torn bytes
    again.close()
    third = Spool(directory=tmp_path)
    assert [r.seq for r in third.records_from(0, 100)] == [1, 2, 3, 4, 5, 7, 8]
    assert third.stats().dropped_total == 1


def test_decoding_resynchronises_after_a_corrupt_record() -> None:
    blob = b"".join(encode(Record(seq=s, produced_at=1.0, data=b"p" * 50)) for s in (1, 2, 3))
    flipped = bytearray(blob)
    flipped[len(encode(Record(seq=1, produced_at=1.0, data=b"p" * 50))) + HEADER_BYTES + 3] ^= 0xFF
    records, damaged = decode_all(bytes(flipped))
    assert damaged
    assert [r.seq for r in records] == [1, 3]


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
    spool = Spool(max_bytes=MIN_DISK_BYTES, directory=tmp_path)
    _fill(spool, 5)
    spool.make_room(MIN_DISK_BYTES, now=2000.0)
    spool.append(6, b"x" * MIN_DISK_BYTES, produced_at=2000.0)
    assert [r.seq for r in spool.records_from(0, 100)] == [1, 2, 3, 4, 5]
    assert spool.stats().dropped_total == 1
    spool.ack(spool.epoch, 5)
    assert spool.all_acked()  # nothing left: report 6 is counted as dropped, never waited for
    spool.close()
    again = Spool(max_bytes=MIN_DISK_BYTES, directory=tmp_path)
    assert again.stats().dropped_total == 1
    assert again.next_seq == 7


def test_a_kill_right_after_a_drop_still_accounts_for_every_report(tmp_path: Path) -> None:
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


def test_a_kill_right_after_a_report_too_large_for_the_spool_still_counts_it(tmp_path: Path) -> None:
    # Found by test_spool_model.py: the drop was counted in memory and its marker record synced,
    # but state.json is written at most once a second, so a kill in that second lost the count.
    spool = Spool(directory=tmp_path, max_bytes=MIN_DISK_BYTES)
    _fill(spool, 2)
    spool.append(3, b"x" * (MIN_DISK_BYTES + 1), produced_at=1003.0)
    assert spool.stats().dropped_total == 1
    # No close(): the process is killed here.
    again = Spool(directory=tmp_path, max_bytes=MIN_DISK_BYTES)
    assert [r.seq for r in again.records_from(0, 100)] == [1, 2]
    assert (again.next_seq, again.stats().dropped_total) == (4, 1)
    again.close()
    third = Spool(directory=tmp_path, max_bytes=MIN_DISK_BYTES)  # counted once, not at every start
    assert (third.next_seq, third.stats().dropped_total) == (4, 1)


def _flip(path: Path, offset: int) -> None:
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0xFF
    path.write_bytes(bytes(blob))


def _record_offsets(path: Path) -> dict[int, int]:
    """Seq -> offset of its record in an undamaged segment."""
    offsets, offset = {}, 0
    for record in decode_all(path.read_bytes())[0]:
        offsets[record.seq] = offset
        offset += len(encode(record))
    return offsets


def test_short_write_is_detected_and_its_seq_never_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.agent.delivery import disk_io

    spool = Spool(directory=tmp_path)
    _fill(spool, 5)
    real_write = os.write

    def half_write(fd: int, data: bytes | memoryview) -> int:
        return real_write(fd, bytes(data)[: len(data) // 2])  # a filesystem that just filled up

    monkeypatch.setattr(disk_io.os, "write", half_write)
    _fill(spool, 1)  # report 6: no exception, kept in memory, may be sent
    monkeypatch.setattr(disk_io.os, "write", real_write)
    _fill(spool, 1)
    assert [r.seq for r in spool.records_from(0, 100)] == [1, 2, 3, 4, 5, 6, 7]
    assert spool.stats().disk_failures_total == 1
    assert not spool.stats().on_disk
    spool.close()
    segment = next(tmp_path.glob("seg-*.log"))
    assert decode_all(segment.read_bytes()) == (decode_all(segment.read_bytes())[0], False)  # no half record
    again = Spool(directory=tmp_path)
    # 6 and 7 may have reached the collector: their seqs are never handed out again, and as
    # nothing acknowledged them they are counted as dropped.
    assert again.next_seq == 8
    assert [r.seq for r in again.records_from(0, 100)] == [1, 2, 3, 4, 5]
    assert again.stats().dropped_total == 2


def test_full_disk_degrades_to_memory_instead_of_raising(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from nodeagent.agent.delivery import disk_io

    spool = Spool(directory=tmp_path)
    _fill(spool, 3)

    def no_space(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_io.os, "write", no_space)
    _fill(spool, 3)
    spool.ack(spool.epoch, 4)
    assert [r.seq for r in spool.records_from(0, 100)] == [5, 6]
    assert spool.stats().disk_failures_total == 1
    spool.close()
    monkeypatch.undo()
    again = Spool(directory=tmp_path)
    assert again.next_seq == 7
    assert again.stats().dropped_total == 2  # 5 and 6: in memory only when the agent stopped


@pytest.mark.parametrize("victim", [4, 10])  # in the middle, and the very last record
def test_a_corrupt_record_costs_only_itself(tmp_path: Path, victim: int) -> None:
    spool = Spool(directory=tmp_path)
    _fill(spool, 10)
    spool.close()
    segment = next(tmp_path.glob("seg-*.log"))
    _flip(segment, _record_offsets(segment)[victim] + HEADER_BYTES + 7)
    again = Spool(directory=tmp_path)
    assert [r.seq for r in again.records_from(0, 100)] == [s for s in range(1, 11) if s != victim]
    assert again.next_seq == 11
    assert again.stats().dropped_total == 1
    again.close()
    third = Spool(directory=tmp_path)  # counted once, not on every start
    assert third.stats().dropped_total == 1
    assert third.next_seq == 11


def test_a_corrupt_header_is_resynchronised_past(tmp_path: Path) -> None:
    spool = Spool(directory=tmp_path)
    _fill(spool, 10)
    spool.close()
    segment = next(tmp_path.glob("seg-*.log"))
    _flip(segment, _record_offsets(segment)[3] + 3)  # the length field of record 3
    again = Spool(directory=tmp_path)
    assert [r.seq for r in again.records_from(0, 100)] == [1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert again.stats().dropped_total == 1


def test_a_record_above_the_acked_mark_corrupt_after_a_kill(tmp_path: Path) -> None:
    spool = Spool(directory=tmp_path)
    _fill(spool, 20)
    spool.ack(spool.epoch, 8)
    spool.close()
    first = Spool(directory=tmp_path)  # a later run appends to a segment of its own
    _fill(first, 5)
    # No close: killed. The state on disk says acked 8.
    segments_on_disk = sorted(tmp_path.glob("seg-*.log"))
    _flip(segments_on_disk[0], _record_offsets(segments_on_disk[0])[9] + HEADER_BYTES + 1)
    again = Spool(directory=tmp_path)
    assert again.next_seq == 26
    assert [r.seq for r in again.records_from(0, 100)] == list(range(10, 26))
    assert again.stats().dropped_total == 1


def test_second_damage_in_a_segment_whose_first_was_counted_is_counted_too(tmp_path: Path) -> None:
    # Found by test_spool_model.py: the segment's name said one loss was counted, and once the
    # acked mark passed that loss, a new one in the same segment hid behind the old count.
    spool = Spool(directory=tmp_path)
    _fill(spool, 3)
    segment = next(tmp_path.glob("seg-*.log"))
    offsets = _record_offsets(segment)
    _flip(segment, offsets[1] + HEADER_BYTES + 1)
    # No close(): killed.
    again = Spool(directory=tmp_path)  # counts 1; the segment is renamed .lost-1
    assert ([r.seq for r in again.records_from(0, 100)], again.stats().dropped_total) == ([2, 3], 1)
    again.ack(again.epoch, 2)
    again.close()
    (segment,) = tmp_path.glob("seg-*.lost-1.log")
    _flip(segment, offsets[3] + HEADER_BYTES + 1)  # a second bad spot, in report 3
    third = Spool(directory=tmp_path)
    assert (third.all_acked(), third.stats().dropped_total, third.next_seq) == (True, 2, 4)
    third.close()
    fourth = Spool(directory=tmp_path)  # and each is counted once
    assert (fourth.stats().dropped_total, fourth.next_seq) == (2, 4)


def test_disk_use_stays_within_the_bound(tmp_path: Path) -> None:
    bound = 64 * 1024
    spool = Spool(max_bytes=bound, directory=tmp_path)
    peak = 0
    for seq in range(1, 601):
        spool.make_room(900, now=1000.0 + seq)
        spool.append(seq, b"r" * 900, produced_at=1000.0 + seq)
        if seq % 7 == 0 and 40 < seq <= 300:
            spool.ack(spool.epoch, seq - 40)  # a collector 40 reports behind, then gone: the spool fills
        peak = max(peak, _disk_bytes(tmp_path))
    assert peak <= bound
    stats = spool.stats()
    assert stats.dropped_total > 0  # it did fill up
    assert stats.reports + stats.dropped_total + stats.acked_seq >= 600 - 40


def _disk_bytes(directory: Path) -> int:
    return sum(max(p.stat().st_size, p.stat().st_blocks * 512) for p in directory.iterdir())


def test_state_and_segments_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        spool = Spool(directory=tmp_path / "var" / "spool")
        _fill(spool, 2)
        spool.close()
    finally:
        os.umask(old)
    directory = tmp_path / "var" / "spool"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "state.json").stat().st_mode) == 0o600
    for segment in directory.glob("seg-*.log"):
        assert stat.S_IMODE(segment.stat().st_mode) == 0o600


def test_a_kill_while_degraded_never_reuses_a_seq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from nodeagent.agent.delivery import disk_io

    spool = Spool(directory=tmp_path)
    _fill(spool, 4)

    def disk_full(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    # Appending to a file fails and so does writing a new state file; the state file already
    # there is rewritten in place (pwrite into blocks it has).
    monkeypatch.setattr(disk_io.os, "write", disk_full)
    _fill(spool, 6)  # 5..10 in memory only
    spool.ack(spool.epoch, 7)
    _fill(spool, 1)  # 11: its append writes the state, acked mark included
    # No close(): killed.
    monkeypatch.undo()
    again = Spool(directory=tmp_path)
    assert again.next_seq == 12
    assert again.stats().acked_seq == 7
    assert again.stats().dropped_total == 4  # 8..11: unacknowledged, in memory only
    assert again.all_acked()


def test_a_flipped_length_in_the_last_record_after_a_kill_never_reuses_its_seq(tmp_path: Path) -> None:
    spool = Spool(directory=tmp_path)
    _fill(spool, 6)
    # No close(): killed, so the state file does not name the last seq.
    segment = next(tmp_path.glob("seg-*.log"))
    _flip(segment, _record_offsets(segment)[6] + 3)  # record 6 now claims far more bytes than there are
    again = Spool(directory=tmp_path)
    assert [r.seq for r in again.records_from(0, 100)] == [1, 2, 3, 4, 5]
    assert again.next_seq == 7  # 6 may have been sent
    assert again.stats().dropped_total == 1


def test_a_flipped_length_in_front_of_more_damage_is_not_taken_for_one_write_cut_short(tmp_path: Path) -> None:
    # Found by test_spool_model.py: record 5's length now claims more bytes than the file holds,
    # so the damaged tail from it on looked like one write cut short; record 6, damaged too, was
    # neither counted nor kept from being handed out again, although it may have been sent.
    spool = Spool(directory=tmp_path)
    _fill(spool, 6)
    # No close(): killed, so the state file does not name the last seq.
    segment = next(tmp_path.glob("seg-*.log"))
    offsets = _record_offsets(segment)
    _flip(segment, offsets[5] + 4)  # the length field's third byte: about 16 MiB more
    _flip(segment, offsets[6] + HEADER_BYTES + 1)
    again = Spool(directory=tmp_path)
    assert [r.seq for r in again.records_from(0, 100)] == [1, 2, 3, 4]
    assert (again.next_seq, again.stats().dropped_total) == (7, 2)


def test_a_spool_directory_that_cannot_be_set_up_on_a_full_disk_leaves_a_memory_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    def no_space(self: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "mkdir", no_space)
    spool = Spool(directory=tmp_path / "spool")
    _fill(spool, 3)
    assert (spool.stats().on_disk, spool.stats().disk_failures_total) == (False, 1)
    assert spool.take_events() == ["spool directory unusable; spooling in memory only"]
    monkeypatch.undo()
    (tmp_path / "a-file").write_text("")
    with pytest.raises((NotADirectoryError, FileExistsError)):  # a bad --spool-dir is the operator's to fix
        Spool(directory=tmp_path / "a-file" / "spool")


def test_prompt_acks_do_not_cost_a_new_segment_per_report(tmp_path: Path) -> None:
    spool = Spool(directory=tmp_path)
    for _ in range(50):
        _fill(spool, 1)
        spool.ack(spool.epoch, spool.stats().last_seq)
    # Still the first segment: it goes once it is half full, or when its room is needed.
    assert [p.name for p in tmp_path.glob("seg-*.log")] == ["seg-00000000000000000001.log"]
    assert spool.all_acked()


def test_a_kill_right_after_a_degraded_restart_still_never_reuses_a_seq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from nodeagent.agent.delivery import disk_io

    spool = Spool(directory=tmp_path)
    _fill(spool, 2)

    def no_space(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_io.os, "write", no_space)
    _fill(spool, 3)  # 3..5 in memory only
    spool.close()
    monkeypatch.undo()
    again = Spool(directory=tmp_path)  # counts 3..5, then is killed before it appends anything
    assert (again.next_seq, again.stats().dropped_total) == (6, 3)
    third = Spool(directory=tmp_path)
    assert (third.next_seq, third.stats().dropped_total) == (6, 3)


def test_a_failed_spool_disk_is_exported_and_queued_as_a_report_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from prometheus_client.parser import text_string_to_metric_families

    from nodeagent.agent.delivery import disk_io
    from nodeagent.agent.delivery.sender import Sender
    from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
    from nodeagent.v1 import nodeagent_pb2 as pb

    spool = Spool(directory=tmp_path)
    _fill(spool, 2)

    def no_space(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def values() -> dict[str, float]:
        sender = Sender(spool, ["127.0.0.1:1"], hello=pb.NodeInfo)
        text = AgentExposition(AgentMetrics(AgentTelemetry("n", 1.0), spool, sender, ("127.0.0.1:1",))).render()
        return {s.name: s.value for f in text_string_to_metric_families(text.decode()) for s in f.samples}

    before = values()
    assert (before["nodeagent_agent_spool_disk_failures_total"], before["nodeagent_agent_spool_on_disk"]) == (0, 1)
    assert before["nodeagent_agent_reports_resent_total"] == 0
    assert 0 < before["nodeagent_agent_spool_disk_bytes"] <= spool.max_bytes
    monkeypatch.setattr(disk_io.os, "write", no_space)
    _fill(spool, 1)
    after = values()
    assert (after["nodeagent_agent_spool_disk_failures_total"], after["nodeagent_agent_spool_on_disk"]) == (1, 0)
    [event] = spool.take_events()
    assert "spooling in memory only" in event
    assert spool.take_events() == []  # told once
