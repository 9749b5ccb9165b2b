"""Held seconds a later verdict may still judge: the split true to the detector's window.

The detector's verdict at time T judges its window [T - window, T]. Seconds held before a verdict
has formed for them are not known to compute:

- in `warmup` the detector does not judge the GPU: those seconds are **forming**, counted
  `unknown` meanwhile, and take the split of the first verdict that judges them (the first that
  is not `warmup`, when they are inside its window);
- starvation with no cause named is counted `unknown` (its data share), and the first verdict
  in its window that names a cause, or the job roll-up's `waiting`, judges it;
- a `busy` verdict may be a state not yet entered: `starved`, `waiting` and `throttled` need most
  of a window's steps (hysteresis), and the detector's own GPU-seconds lost count the entering
  window's time when they enter (``core/detector/waiting.py``). So `busy` seconds count `computing`,
  but the verdict that enters one of those states re-judges the `busy` seconds inside its window
  by its own split, as the detector's count does; so does the first verdict that carries the
  job roll-up's share of a GPU waiting on no other node (``split.JobShare``: a `link` straggler,
  a job-wide slowdown), which the roll-up measures over the same window, and the first verdict
  whose wait share is unknown (``split.WAIT_UNKNOWN``: the seconds it takes are `unmeasured`). A
  `busy` verdict that carries a share, or an unknown one, is judged: its seconds are not provisional.

Seconds that no verdict re-judged within a window stay as counted: `unknown` (forming) or
`computing` (busy). Each GPU's list is bounded by the window (older entries are dropped as the
GPU's verdicts move on). Moving seconds between categories of one minute keeps its parts adding
up to its held time; ``NodeHistory`` keeps a closed minute's accumulators until no verdict can
judge its seconds any more (``settled_before``) and writes a row again when a verdict changed it.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Final

from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import NODE_ROW
from nodeagent.collector.history.open_minute import OpenMinute
from nodeagent.core.detector.verdict import GpuVerdict

_ENTERED_OVER_A_WINDOW: Final = frozenset({"starved", "waiting", "throttled"})
_NONE: Final[frozenset[int]] = frozenset()


def provisional(g: GpuVerdict, shared: bool) -> bool:
    """Whether the seconds this verdict counts may still be judged by a later one; ``shared``:
    whether it carries the roll-up's share (``split.job_share``, asked once per GPU a report)."""
    if g.state in ("busy", "starved"):
        # Without the roll-up's share: it may still come, over this window (a starved GPU of a
        # job-wide slowdown waits behind the other nodes beyond its own data share).
        return not shared or (g.state == "starved" and split.unnamed(g))
    return g.state == "warmup"


def _judges(g: GpuVerdict, g_shared: bool, p: Provisional) -> bool:
    """Whether verdict ``g`` (``g_shared``: it carries the roll-up's share) judges the seconds
    ``p`` counted: it knows more of them. Each verdict's share is asked once, not per pair."""
    counted = p.verdict
    if counted.state == "warmup":
        return g.state != "warmup"
    shared = g_shared and not p.shared
    if counted.state == "busy":
        return g.state in _ENTERED_OVER_A_WINDOW or shared
    if not split.unnamed(counted):
        return shared  # starved of its own cause: the roll-up's share adds what it waited beyond it
    # Starved with no cause named: a cause named, or the job roll-up's wait, says what it was.
    return g.state == "waiting" or (g.state == "starved" and not split.unnamed(g)) or shared


@dataclass(slots=True)
class Provisional:
    """Seconds of one minute, ending at ``end`` (report time), split by ``verdict`` for now."""

    minute: int
    end: float
    seconds: float
    verdict: GpuVerdict
    shared: bool  # the verdict carries the roll-up's share (``split.job_share``)


# The accumulators of a minute (open or settling) by GPU, None once it is gone.
Accumulators = Callable[[int], dict[int, OpenMinute] | None]


class Forming:
    """Each GPU's provisional seconds, oldest first."""

    __slots__ = ("by_gpu",)

    def __init__(self) -> None:
        self.by_gpu: dict[int, list[Provisional]] = {}

    def judge(
        self, g: GpuVerdict, time: float, window: float, minutes: Accumulators, unresponsive: bool
    ) -> AbstractSet[int]:
        """The GPU's verdict at ``time`` judges its provisional seconds inside [time - window, time];
        returns the minutes whose split changed."""
        pending = self.by_gpu.get(g.index)
        if not pending:
            return _NONE
        since = time - window
        # Judged by the roll-up: its share, or one it could not measure (``split.WAIT_UNKNOWN``).
        shared = split.job_share(g) is not None or split.WAIT_UNKNOWN in g.evidence
        # A busy verdict without the roll-up's share, most of them, judges warm-up seconds only.
        busy_alone = g.state == "busy" and not shared
        for p in pending:
            if p.end <= since or (p.verdict.state == "warmup" if busy_alone else _judges(g, shared, p)):
                break
        else:
            return _NONE  # nothing judged, nothing out of the window: as it was (most reports)
        keeps = provisional(g, shared)
        changed: set[int] = set()
        still: list[Provisional] = []
        for p in pending:
            if p.end <= since:
                continue  # out of every later window: stays as counted
            if not _judges(g, shared, p):
                still.append(p)
                continue
            inside = min(p.seconds, p.end - since)
            accs = minutes(p.minute)
            if accs is None or inside <= 0:
                continue
            for acc in (accs.get(g.index), accs.get(NODE_ROW)):
                if acc is not None:
                    acc.rejudge(p.verdict, inside, g, unresponsive, keep=keeps)
            changed.add(p.minute)
            if keeps:  # judged by a verdict a later one may judge again
                still.append(Provisional(p.minute, p.end, inside, g, shared))
        self.by_gpu[g.index] = still
        return changed

    def note(self, g: GpuVerdict, minute: int, end: float, seconds: float) -> None:
        """Held seconds a provisional verdict counted (the caller has asked ``provisional``: once a
        GPU a report, on the ingest path)."""
        pending = self.by_gpu.setdefault(g.index, [])
        last = pending[-1] if pending else None
        if last is not None and last.minute == minute and last.verdict == g:
            last.seconds, last.end = last.seconds + seconds, end
        else:
            shared = split.job_share(g) is not None or split.WAIT_UNKNOWN in g.evidence
            pending.append(Provisional(minute, end, seconds, g, shared))

    def minutes(self) -> set[int]:
        """The minutes some provisional seconds are in."""
        return {p.minute for pending in self.by_gpu.values() for p in pending}

    def forget_before(self, since: float) -> None:
        """Drop what ended before ``since``: no verdict judges it any more."""
        for index, pending in list(self.by_gpu.items()):
            kept = [p for p in pending if p.end > since]
            if kept:
                self.by_gpu[index] = kept
            else:
                del self.by_gpu[index]
