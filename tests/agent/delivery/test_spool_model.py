"""A randomised model of the disk spool, as Vector tests its disk buffer (Hypothesis' stateful testing).

The real ``Spool`` on a real directory, and a plain model of what it must deliver, go through
the same random steps: append a report (small, large, or larger than the whole spool), ack up
to a seq, read what is pending, kill the agent (no ``close``), kill it in the middle of a write
(the newest segment cut short), flip a byte of a segment, restart cleanly. After every step the
spool is held to docs/delivery.md, to the letter where it is exact and as a bound where it
says the count errs high:

- every seq handed out is acknowledged, still pending, or counted (``dropped_total``, or
  ``dropped_unresolved`` while it waits for a collector's word): never silently gone; and
  nothing is counted twice or counted while still pending, but for one report per flipped
  byte (the record it destroyed may be a drop already counted: the count errs high);
- what is pending comes in seq order, without duplicates, with the bytes that were appended;
- a drop takes the oldest reports and is counted at once; an ack removes exactly what it covers;
- a clean restart changes nothing; a kill loses nothing pending, and what comes back is only
  what was acknowledged or dropped after ``state.json`` was last written, its count undone;
- nothing whose ack was durable comes back, and no seq that may have left the agent is handed
  out again: a write cut short is one report, counted; one that left no byte never was;
- a flipped byte costs at most the one record it lands in, counted once over later restarts.

The model does not predict which reports the byte bound drops (that depends on the blocks the
filesystem allocates); it checks that whatever went is the oldest and counted. Streams and the
collector's first ack (which settle ``dropped_unresolved``) are test_spool_unresolved.py's.
``--hypothesis-show-statistics`` shows how often each kind of step and outcome came up.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from nodeagent.agent.delivery.record import HEADER_BYTES
from nodeagent.agent.delivery.spool import MIN_DISK_BYTES, Spool
from nodeagent.agent.delivery.state_file import read_state

MAX_BYTES = MIN_DISK_BYTES  # 16 KiB segments: a few dozen steps roll, fill and delete several
MAX_AGE_SECONDS = 300.0
# Larger than the whole spool: dropped on arrival, an empty marker record keeps its seq on disk.
OVERSIZE = MAX_BYTES + 1
# Mostly small, so that segments hold many records and drops leave them half live; never empty
# (an empty payload is the marker, and a serialized NodeReport always has its seq).
_SMALL = st.integers(1, 3000)
SIZES = st.one_of(_SMALL, _SMALL, _SMALL, st.just(20_000), st.just(OVERSIZE))


def _payload(seq: int, size: int) -> bytes:
    return (struct.pack("<Q", seq) * (size // 8 + 1))[:size]


class SpoolModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="spool-model-"))
        self.now = 1000.0
        self.spool = self._open()
        self.epoch = self.spool.epoch
        self.produced: dict[int, bytes] = {}  # every report appended, by seq
        self.acked: set[int] = set()  # removed by an ack: the collector has them
        self.pending: list[int] = []  # what the spool must hand the sender, in order
        self.counted = 0  # dropped_total + dropped_unresolved, as last observed
        self.flips_ever = 0  # bytes flipped in this run: each may make the count err high by one
        self.durable_acked = 0
        self.dropped_since_open: set[int] = set()
        self.flips = 0
        self.newest_flipped = False
        self._opened()

    def teardown(self) -> None:
        _kill(self.spool)
        shutil.rmtree(self.directory, ignore_errors=True)

    # ---- rules ----

    @rule(sizes=st.lists(SIZES, min_size=1, max_size=8), seconds=st.integers(0, 60))
    def append(self, sizes: list[int], seconds: int) -> None:
        """Reports produced one after another, ``seconds`` apart (the spool ages them out at 300)."""
        for size in sizes:
            self._append(size, seconds)

    # Mostly an ack of a pending report, as a collector sends; also old ones, ones past the last
    # seq, and ones of another epoch, which must change nothing or clamp.
    @rule(pick=st.integers(0, 1 << 16), kind=st.sampled_from(["pending", "pending", "stale", "beyond", "epoch"]))
    def ack(self, pick: int, kind: str) -> None:
        stats = self.spool.stats()
        last, acked_seq = stats.last_seq, stats.acked_seq
        epoch = self.epoch
        if kind == "pending" and self.pending:
            seq = self.pending[pick % len(self.pending)]
        elif kind == "stale":
            seq = pick % (acked_seq + 1)
        elif kind == "epoch":
            seq, epoch = last, self.epoch + 1
        else:
            seq = last + 1 + pick % 3
        covered = min(seq, last) if epoch == self.epoch and seq > acked_seq else 0
        expected = [s for s in self.pending if s > covered]
        assert self.spool.ack(epoch, seq) == len(self.pending) - len(expected)
        self.acked.update(s for s in self.pending if s <= covered)
        self._observe(expected, newly_counted=0)
        assert self.pending == expected, "an ack dropped a report"

    @rule(start=st.integers(0, 1 << 16), limit=st.integers(1, 50))
    def read(self, start: int, limit: int) -> None:
        last = self.spool.stats().last_seq
        seq = start % (last + 2)
        assert [r.seq for r in self.spool.records_from(seq, limit)] == [s for s in self.pending if s >= seq][:limit]
        assert self.spool.first_unacked_seq() == (self.pending[0] if self.pending else last + 1)

    @rule()
    def restart(self) -> None:
        """A clean stop (SIGTERM): ``close`` syncs and writes the exact state."""
        self.spool.close()
        self.durable_acked = self.spool.stats().acked_seq
        self._reopen(killed=False)

    @rule()
    def kill(self) -> None:
        """SIGKILL: whatever was written is in the page cache; state.json may lag."""
        self._reopen(killed=True)

    @rule(size=SIZES, seconds=st.integers(0, 120), cut=st.floats(0.0, 1.0))
    def kill_mid_write(self, size: int, seconds: int, cut: float) -> None:
        """A kill or power cut while report N's record was being written: the newest segment ends
        inside it, or before its first byte. Only possible while state.json does not name N yet
        (it is written after the record); otherwise the record was whole, and this is a kill."""
        seq = self._append(size, seconds)
        if read_state(self.directory).last_seq >= seq:
            self._reopen(killed=True)
            return
        newest = max(self.directory.glob("seg-*.log"))
        record_bytes = HEADER_BYTES + (0 if size >= OVERSIZE else size)
        removed = 1 + round(cut * (record_bytes - 1))  # 1 .. the whole record
        with newest.open("r+b") as f:
            f.truncate(newest.stat().st_size - removed)
        event("a write cut short" if removed < record_bytes else "a write that left no byte")
        self._reopen(killed=True, cut_short=(seq, removed < record_bytes))

    @rule(pick=st.integers(0, 1 << 16), offset=st.floats(0.0, 1.0), mask=st.integers(1, 255), again=st.booleans())
    def flip_a_byte(self, pick: int, offset: float, mask: int, again: bool) -> None:
        """A bad spot in a segment; the running spool does not notice. At most one in the newest
        segment between two starts: two there can hide a loss, as docs/delivery.md says ("Damage
        at the end of the newest segment", under "Loss cases that remain")."""
        segments = [p for p in sorted(self.directory.glob("seg-*.log")) if p.stat().st_size]
        if not segments:
            return
        # Bad spots come in clusters: often one in a segment whose damage was counted already.
        counted = [p for p in segments if ".lost-" in p.name]
        choices = counted if again and counted else segments
        path = choices[pick % len(choices)]
        if path == segments[-1]:
            if self.newest_flipped:
                return
            self.newest_flipped = True
        blob = bytearray(path.read_bytes())
        blob[min(len(blob) - 1, int(offset * len(blob)))] ^= mask
        path.write_bytes(bytes(blob))
        self.flips += 1
        self.flips_ever += 1

    # ---- what holds after every step ----

    @invariant()
    def pending_is_in_order_and_intact(self) -> None:
        records = self.spool.records_from(0, 1 << 30)
        assert [r.seq for r in records] == self.pending
        assert all(a < b for a, b in zip(self.pending, self.pending[1:], strict=False))
        for record in records:
            assert record.data == self.produced[record.seq], f"report {record.seq} changed on the way"

    @invariant()
    def every_report_is_acked_pending_or_counted(self) -> None:
        stats = self.spool.stats()
        counted = stats.dropped_total + stats.dropped_unresolved
        assert counted == self.counted
        pending = set(self.pending)
        gone = [s for s in range(1, stats.last_seq + 1) if s not in pending and s not in self.acked]
        assert len(gone) <= counted, f"reports silently gone: {len(gone)} missing, {counted} counted"
        # Nothing counted twice or counted while pending. A flipped byte may destroy the marker of
        # a drop counted already, counted again as lost (docs/delivery.md: the count errs high).
        uncounted_room = stats.last_seq - len(pending) + self.flips_ever
        assert counted <= uncounted_room, "a report counted twice, or counted and still pending"

    # ---- helpers ----

    def _open(self) -> Spool:
        return Spool(directory=self.directory, max_bytes=MAX_BYTES, max_age_seconds=MAX_AGE_SECONDS)

    def _opened(self) -> None:
        stats = self.spool.stats()
        assert stats.on_disk and self.spool.epoch == self.epoch
        self.durable_acked = stats.acked_seq  # Spool() wrote it to state.json
        self.dropped_since_open = set()  # dropped since then (a kill may bring them back)
        self.flips = 0  # bytes flipped since then
        self.newest_flipped = False  # one of them in the newest segment

    def _append(self, size: int, seconds: int) -> int:
        self.now += seconds
        seq = self.spool.next_seq
        data = _payload(seq, size)
        self.produced[seq] = data
        self.spool.make_room(size, now=self.now)  # as the agent does, before filling in a report
        self.spool.append(seq, data, produced_at=self.now)
        oversize = size >= OVERSIZE
        self._observe(self.pending + ([] if oversize else [seq]), newly_counted=1 if oversize else 0)
        return seq

    def _observe(self, expected: list[int], *, newly_counted: int) -> None:
        """Take the spool's pending reports: ``expected`` less the oldest it dropped, each counted."""
        pending = [r.seq for r in self.spool.records_from(0, 1 << 30)]
        dropped = len(expected) - len(pending)
        assert dropped >= 0 and pending == expected[dropped:], "a drop that was not the oldest"
        stats = self.spool.stats()
        counted = stats.dropped_total + stats.dropped_unresolved
        assert counted - self.counted == dropped + newly_counted, "a drop not counted at once, or counted twice"
        self.dropped_since_open.update(expected[:dropped])
        if dropped:
            event("the oldest reports dropped")
        self.pending, self.counted = pending, counted

    def _reopen(self, *, killed: bool, cut_short: tuple[int, bool] | None = None) -> None:
        before = self.spool.stats()
        last, counted, pending = before.last_seq, self.counted, self.pending
        damaged = self.flips > 0
        if cut_short is not None:
            # Report N was never whole on disk: the sampler produced it, the sender never saw it.
            seq, oversize = cut_short[0], cut_short[0] not in pending
            pending = [s for s in pending if s != seq]
            counted -= 1 if oversize else 0
        if killed:
            _kill(self.spool)
        self.spool = self._open()
        after = self.spool.stats()
        now_pending = [r.seq for r in self.spool.records_from(0, 1 << 30)]
        came_back = set(now_pending) - set(pending)
        event(("a kill" if killed else "a clean restart") + (" after a flipped byte" if damaged else ""))
        if came_back & self.dropped_since_open:
            event("a report dropped after state.json was written came back")
        if came_back & self.acked:
            event("a report acked after state.json was written came back")
        if set(pending) - set(now_pending):
            event("a flipped byte destroyed a pending report")
        new_counted = after.dropped_total + after.dropped_unresolved
        assert self.spool.epoch == self.epoch
        assert self.durable_acked <= after.acked_seq <= before.acked_seq
        assert not any(s <= self.durable_acked for s in now_pending), "a report whose ack was durable came back"
        assert came_back <= self.acked | self.dropped_since_open, "a report came back that was never acked or dropped"
        if cut_short is not None:
            seq, partly_written = cut_short
            # A write cut short is one report, counted, and its seq is never handed out again;
            # one that left no byte never was a report (it had not been synced, so never sent).
            # Behind a damaged record, a cut-short write may be taken for part of that damage:
            # then it too never was (its seq comes again), but every seq before it is kept.
            if not damaged:
                assert after.last_seq == (seq if partly_written else seq - 1)
            assert after.last_seq >= seq - 1
            if after.last_seq < seq:
                del self.produced[seq]
            last = after.last_seq
        if not damaged:
            assert after.last_seq == last, "a seq handed out again, or skipped"
            assert set(pending) <= set(now_pending), "a pending report lost to a restart"
            # What came back after a kill was acked or dropped after state.json was last written:
            # its drop count is undone, and nothing else changes the count.
            newly_lost = 1 if cut_short is not None and cut_short[1] else 0
            assert counted - new_counted == len(came_back & self.dropped_since_open) - newly_lost
            if not killed:
                assert (now_pending, new_counted, after.acked_seq) == (pending, counted, before.acked_seq)
        else:
            assert after.last_seq >= last, "a seq that may have left the agent handed out again"
            assert len(set(pending) - set(now_pending)) <= self.flips, "more lost than the flipped bytes could destroy"
        self.pending, self.counted = now_pending, new_counted
        self._opened()


def _kill(spool: Spool) -> None:
    """What SIGKILL leaves: the open segment closed by the kernel, nothing synced or written.
    (Reaching into the store: the object itself is simply dropped, as a killed process is.)"""
    store = spool._store
    if store is not None and store._fd is not None:
        os.close(store._fd)
        store._fd = None


SpoolModel.TestCase.settings = settings(max_examples=50, stateful_step_count=50, deadline=None)
test_spool_model = SpoolModel.TestCase
