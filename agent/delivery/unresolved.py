"""Seqs the spool dropped after they may have been sent: stored by the collector, or lost?

A report the collector committed but never acknowledged (it was killed between the two) looks,
to the agent, like one still waiting; when the spool drops it, counting it as dropped would
count a report the collector has. So such drops wait here, as runs of seqs, until the agent
knows: the ack a collector sends first on every stream says what it had stored before the
stream began, and an ack on the stream that sent a report covers it (reports arrive in order).
Only then are the lost ones counted.

Memory stays bounded: at most ``MAX_RANGES`` runs (drops come oldest first, so they are long
runs); past that the oldest run is settled at once as lost (never too few counted).
"""

from __future__ import annotations

from collections.abc import Iterable

# The spool keeps two sets of runs and the state file holds both: 2 x 8 runs of 20-digit seqs fit it.
MAX_RANGES = 8


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
