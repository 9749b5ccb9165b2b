"""Drops of reports that may have been sent: counted only once the collector says it lacks them."""

from __future__ import annotations

from pathlib import Path

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.delivery.unresolved import MAX_RANGES, SeqRanges


def _fill(spool: Spool, count: int, size: int = 100) -> None:
    for _ in range(count):
        seq = spool.next_seq
        spool.append(seq, bytes([seq % 256]) * size, produced_at=1000.0 + seq)


def _send_all(spool: Spool) -> None:
    for record in spool.records_from(0, 1000):
        spool.sending(record.seq)


def test_a_report_never_sent_is_counted_at_once() -> None:
    spool = Spool(max_bytes=1000)
    _fill(spool, 25)  # no stream ever: the 15 dropped cannot have reached a collector
    assert (spool.stats().dropped_total, spool.stats().dropped_unresolved) == (15, 0)


def test_the_next_streams_first_ack_settles_drops_of_sent_reports() -> None:
    spool = Spool(max_bytes=1000)
    spool.stream_started()
    _fill(spool, 10)
    _send_all(spool)  # 1..10 sent; the collector stored 1..7, then died before acking them
    spool.stream_ended()
    _fill(spool, 6)  # the collector is away: 1..6 dropped
    assert (spool.stats().dropped_total, spool.stats().dropped_unresolved) == (0, 6)
    spool.stream_started()
    assert spool.attached(spool.epoch, 4) == 2  # 1..4 stored after all, 5 and 6 lost
    assert (spool.stats().dropped_total, spool.stats().dropped_unresolved) == (2, 0)
    _fill(spool, 3)  # 7..9 dropped now: never sent on this stream, and 7 > 4 was not stored
    assert (spool.stats().dropped_total, spool.stats().dropped_unresolved) == (5, 0)


def test_an_ack_on_the_stream_that_sent_a_dropped_report_says_it_is_stored() -> None:
    spool = Spool(max_bytes=1000)
    spool.stream_started()
    spool.attached(spool.epoch, 0)
    _fill(spool, 10)
    _send_all(spool)
    _fill(spool, 3)  # 1..3 dropped after they were sent on this stream
    assert spool.stats().dropped_unresolved == 3
    spool.ack(spool.epoch, 2)
    assert (spool.stats().dropped_total, spool.stats().dropped_unresolved) == (0, 1)
    spool.stream_ended()
    spool.stream_started()
    assert spool.attached(spool.epoch + 1, 99) == 1  # a collector with another epoch has none of ours
    assert spool.stats().dropped_total == 1


def test_unresolved_drops_survive_a_restart_and_are_counted_once(tmp_path: Path) -> None:
    first = Spool(max_bytes=64 * 1024, directory=tmp_path)
    first.stream_started()
    _fill(first, 5, size=6000)
    _send_all(first)
    first.stream_ended()
    _fill(first, 20, size=6000)
    stats = first.stats()
    # 1..5 wait for the collector; the later drops were never sent: counted.
    assert (stats.dropped_unresolved, stats.reports + stats.dropped_total) == (5, 25 - 5)
    assert stats.dropped_total > 0
    counted = stats.dropped_total
    first.close()
    second = Spool(max_bytes=64 * 1024, directory=tmp_path)
    assert (second.stats().dropped_total, second.stats().dropped_unresolved) == (counted, 5)
    second.stream_started()
    assert second.attached(second.epoch, 3) == 2
    second.close()
    third = Spool(max_bytes=64 * 1024, directory=tmp_path)
    assert (third.stats().dropped_total, third.stats().dropped_unresolved) == (counted + 2, 0)
    third.close()


def test_memory_for_unresolved_drops_is_bounded_and_overflow_counts_as_lost() -> None:
    runs = SeqRanges()
    lost = sum(runs.add(seq) for seq in range(1, 4 * MAX_RANGES, 2))  # every other seq: one run each
    assert len(runs.flat()) == 2 * MAX_RANGES
    assert lost + len(runs) == 2 * MAX_RANGES  # each seq is held or counted, never neither
    assert runs.take_through(4 * MAX_RANGES) == MAX_RANGES
