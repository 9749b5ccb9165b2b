"""Seqs the spool dropped after they may have been sent: stored by the collector, or lost?

A report the collector committed but never acknowledged (it was killed between the two) looks,
to the agent, like one still waiting; when the spool drops it, counting it as dropped would
count a report the collector has. So such drops wait here, as runs of seqs, until the agent
knows: the ack a collector sends first on every stream says what it had stored before the
stream began, and an ack on the stream that sent a report covers it (reports arrive in order).
Only then are the lost ones counted.

``DropLedger`` decides what each drop counts as. A report no stream can have sent is lost at
once. One the current stream sent waits for that stream's acks, or, once it ends, for the next
stream's first ack; one that only an earlier stream (or agent run) may have sent waits for the
next first ack, or is settled by the current stream's if that came already.

Memory stays bounded: at most ``MAX_RANGES`` runs (drops come oldest first, so they are long
runs); past that the oldest run is settled at once as lost (never too few counted).
"""

from __future__ import annotations

from collections.abc import Iterable

# The spool keeps two sets of runs and the state file holds both: 2 x 8 runs of 20-digit seqs fit it.
MAX_RANGES = 8


class DropLedger:
    """The spool's drop count, and the drops that wait for the collector's word.

    Not locked: the spool calls it under its own lock."""

    def __init__(self, dropped_total: int = 0, unresolved: Iterable[int] = (), sent_before: int = 0) -> None:
        self.dropped_total = dropped_total
        # Drops to settle at the next stream's first ack, and drops of reports the current stream sent.
        self._unresolved = SeqRanges(unresolved)
        self._unresolved_stream = SeqRanges()
        self._sent_before = sent_before  # the highest seq an earlier stream (or agent run) may have sent
        self._sent_now = 0  # the highest seq the current stream sent
        self._streaming = False
        self._attach_seq: int | None = None  # what the current stream's first ack said is stored

    def __len__(self) -> int:
        """How many drops wait for the collector's word."""
        return len(self._unresolved) + len(self._unresolved_stream)

    def stream_started(self) -> None:
        self._end_stream()
        self._streaming = True

    def stream_ended(self) -> None:
        self._end_stream()
        self._streaming = False

    def sending(self, seq: int) -> None:
        self._sent_now = max(self._sent_now, seq)

    def dropped(self, seq: int) -> None:
        """The spool dropped the report ``seq`` (the oldest it held)."""
        if self._streaming and seq <= self._sent_now:
            # Sent on this stream: its acks, or the next stream's first one, will say.
            self.dropped_total += self._unresolved_stream.add(seq)
        elif seq <= self._sent_before:
            if self._streaming and self._attach_seq is not None:
                # Not sent on this stream, whose first ack said what earlier ones delivered.
                self.dropped_total += 0 if seq <= self._attach_seq else 1
            else:
                self.dropped_total += self._unresolved.add(seq)
        else:
            self.dropped_total += 1  # never sent: lost

    def dropped_unsent(self) -> None:
        """A report dropped before it could be sent (larger than the whole spool): lost."""
        self.dropped_total += 1

    def acked(self, acked_seq: int) -> bool:
        """The current stream's collector stored everything up to ``acked_seq``: True when that
        settled a drop (reports arrive in order, so the ones this stream sent are stored)."""
        return bool(self._unresolved_stream.take_through(acked_seq))

    def attached(self, stored_seq: int) -> int:
        """The current stream's first ack: the collector had everything up to ``stored_seq``.

        Settles every drop that waited for it; returns how many of them were lost (now counted)."""
        self._attach_seq = stored_seq
        self._unresolved.take_through(stored_seq)
        lost = self._unresolved.take_all()
        self.dropped_total += lost
        return lost

    def flat(self) -> list[int]:
        """Both kinds, for the state file: after a restart every one waits for the next first ack."""
        runs = self._unresolved.flat() + self._unresolved_stream.flat()
        pairs = sorted(zip(runs[::2], runs[1::2], strict=True))
        return [seq for pair in pairs for seq in pair]

    def _end_stream(self) -> None:
        # What the ended stream sent and the spool dropped is settled by the next stream's first ack.
        self.dropped_total += self._unresolved.merge(self._unresolved_stream)
        self._sent_before = max(self._sent_before, self._sent_now)
        self._sent_now = 0
        self._attach_seq = None


class SeqRanges:
    """Disjoint runs of seqs, ascending, each ``[first, last]``."""

    def __init__(self, flat: Iterable[int] = ()) -> None:
        values = list(flat)
        self._ranges: list[list[int]] = [
            [first, last] for first, last in zip(values[::2], values[1::2], strict=False) if 0 < first <= last
        ]
        self._ranges.sort()

    def __len__(self) -> int:
        """How many seqs are held."""
        return sum(last - first + 1 for first, last in self._ranges)

    def add(self, seq: int) -> int:
        """Hold one seq (above every one held); returns how many fell out of the bound."""
        if self._ranges and self._ranges[-1][1] + 1 == seq:
            self._ranges[-1][1] = seq
            return 0
        self._ranges.append([seq, seq])
        return self._trim()

    def merge(self, other: SeqRanges) -> int:
        """Take every run of ``other`` (which is emptied); returns how many fell out of the bound."""
        runs = sorted(self._ranges + other._ranges)
        other._ranges = []
        self._ranges = []
        for first, last in runs:
            if self._ranges and self._ranges[-1][1] + 1 >= first:
                self._ranges[-1][1] = max(self._ranges[-1][1], last)
            else:
                self._ranges.append([first, last])
        return self._trim()

    def take_through(self, seq: int) -> int:
        """Forget every seq up to ``seq``; returns how many there were."""
        taken = 0
        while self._ranges and self._ranges[0][0] <= seq:
            first, last = self._ranges[0]
            if last <= seq:
                taken += last - first + 1
                self._ranges.pop(0)
            else:
                taken += seq - first + 1
                self._ranges[0][0] = seq + 1
        return taken

    def take_all(self) -> int:
        taken = len(self)
        self._ranges = []
        return taken

    def flat(self) -> list[int]:
        """``[first, last, first, last, ...]``, for the state file."""
        return [seq for run in self._ranges for seq in run]

    def _trim(self) -> int:
        lost = 0
        while len(self._ranges) > MAX_RANGES:
            first, last = self._ranges.pop(0)
            lost += last - first + 1
        return lost
