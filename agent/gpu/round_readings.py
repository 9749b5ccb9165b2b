"""What a GPU's tick reads in turn: one of these readings a tick, the others kept from their turn.

A tick makes at most four NVML calls per GPU (issue 44): the batched field values (every counter,
and how long each throttling clock-event reason has held the clocks, ``fields.CLOCK_EVENT_DURATIONS``),
the SM clock, utilization on a GPU without GPM (GPM's sample on one with it), and one call of the
round. The round's readings change on a scale of seconds or slower, or are read as counters since
their last read, so reading each every few seconds loses nothing but freshness:

- ``memory``: memory used, free and reserved;
- ``processes``: the compute processes and their memory (a job starts or ends a round late);
- ``utilization``: on a GPU with GPM only, whose computing share comes from GPM's SM activity
  every tick;
- ``reasons``: the clock-event reasons' bitmask, for the reasons without a duration counter
  (GPU idle, application and display clock settings, board limit, reliability); the throttling
  reasons come from their counters every tick, set when their time grew during the tick;
- ``shares``: each process's share of a shared GPU (``process_share``), while a process runs: the
  driver keeps its samples, so a late read still covers the whole interval.

A round is three to five ticks (seconds at 1 Hz). A scan, and the first tick after it, read
everything. Memory or processes that NVML did not give (a call that failed, or was abandoned by
a GPU that stopped answering) are read again at the next tick, in place of the round's turn. A
driver without the duration counters (before nvml.h 13's fields 269-271) has the bitmask read
every tick instead, one call more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from nodeagent.agent.gpu.fields import CLOCK_EVENT_DURATIONS, FieldKey
from nodeagent.agent.gpu.nvml_types import MemoryInfo, ProcessUsage, Utilization

EVERYTHING: Final = "everything"  # the first tick after a scan
LONGEST_ROUND: Final = 5  # ticks: memory, processes, utilization, reasons, shares
HW_SLOWDOWN: Final = 0x008  # set by the driver with either HW slowdown below
_HW_CAUSES: Final = 0x040 | 0x080  # HW thermal, HW power brake
# The bits a tick takes from the counters, not from the last bitmask.
COUNTED_BITS: Final = HW_SLOWDOWN | sum(bit for _field, bit in CLOCK_EVENT_DURATIONS)


class RoundReadings:
    """One GPU's round: whose turn it is, and the last of each reading."""

    __slots__ = ("_durations", "_turn", "due", "fresh", "memory", "processes", "rest_bits", "retry", "utilization")

    def __init__(self) -> None:
        self._turn = 0
        self.fresh = True  # the next tick reads everything
        self.due = EVERYTHING  # what this tick reads
        self.memory: MemoryInfo | None = None
        self.processes: list[ProcessUsage] | None = None
        self.utilization: Utilization | None = None
        self.rest_bits = 0  # the last bitmask's bits that no counter covers
        self.retry: str | None = None  # a reading that failed: read again at the next tick
        self._durations: tuple[int | float, ...] | None = None

    def make_fresh(self) -> None:
        """Read everything at the next tick (a scan asks it)."""
        self.fresh = True

    def turn(self, *, gpm: bool, counted: bool, shares: bool) -> str:
        """This tick's reading of the round (``EVERYTHING`` after a scan), now in ``due``."""
        if self.fresh:
            self.fresh = False
            self.due = EVERYTHING
            return self.due
        if self.retry is not None:
            self.due, self.retry = self.retry, None
            return self.due
        items = ["memory", "processes"]
        if gpm:
            items.append("utilization")
        if counted:
            items.append("reasons")
        if shares:
            items.append("shares")
        self._turn += 1
        self.due = items[self._turn % len(items)]
        return self.due

    def reads(self, name: str) -> bool:
        """Whether this tick reads ``name``."""
        return self.due in (name, EVERYTHING)

    def counted_reasons(self, values: Mapping[FieldKey, int | float]) -> int | None:
        """The throttling reasons whose time grew since the previous tick's values, as
        nvmlClocksEventReason bits (HW slowdown with either HW cause); None when the GPU lacks a
        counter or this is the first reading (the bitmask is read then)."""
        now = tuple(values.get((field, 0)) for field, _bit in CLOCK_EVENT_DURATIONS)
        before, self._durations = self._durations, None if None in now else now  # type: ignore[assignment]
        if before is None or self._durations is None:
            return None
        bits = 0
        for (_field, bit), was, is_now in zip(CLOCK_EVENT_DURATIONS, before, self._durations, strict=True):
            if is_now > was:  # a counter that went back (a driver reload) says nothing this tick
                bits |= bit
        if bits & _HW_CAUSES:
            bits |= HW_SLOWDOWN
        return bits
