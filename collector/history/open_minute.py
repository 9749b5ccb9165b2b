"""A minute being built: its columns' sums and counts by index, its held seconds and their split.

``node_history.NodeHistory`` keeps one per GPU and one for the node while the minute is open, adds
each report's values (the ingest path's hot loop) and makes the ``MinuteRow`` a flush writes.
"""

from __future__ import annotations

import math
from typing import Final

from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import INDEX, KIND, NODE_ROW, VALUES, MinuteRow
from nodeagent.core.detector.verdict import GpuVerdict

_UTIL_MIN: Final = INDEX["utilization_min"]
_MEAN: Final = tuple(kind == "mean" for kind in KIND)


class OpenMinute:
    """A minute being built: sums and counts by column index."""

    __slots__ = (
        "cause", "counts", "gpu", "held", "jobs", "last_time", "minute", "provisional", "samples", "split", "state",
        "sums", "waiting_on",
    )  # fmt: skip

    def __init__(self, gpu: int, minute: int) -> None:
        self.gpu, self.minute, self.samples = gpu, minute, 0
        self.sums = [0.0] * len(VALUES)
        self.counts = [0] * len(VALUES)
        self.state, self.cause, self.last_time = "", "", 0.0
        self.jobs: tuple[str, ...] = ()
        self.held: float | None = None
        self.split: list[float] | None = None
        # Of the split, seconds a later verdict may still judge (``forming``): not yet in the counters.
        self.provisional: list[float] | None = None
        self.waiting_on = ""
        self.sums[_UTIL_MIN] = math.inf

    @classmethod
    def seeded(cls, row: MinuteRow) -> OpenMinute:
        acc = cls(row.gpu, row.minute)
        acc.samples, acc.state, acc.cause, acc.jobs, acc.last_time = (
            row.samples,
            row.state,
            row.cause,
            row.jobs,
            row.last_time,
        )
        acc.held = row.held_seconds
        acc.split = None if row.split is None else list(row.split)
        if acc.split is None and row.held_seconds:
            # A minute stored before the split: what its held seconds did is not known.
            acc.split = split.empty()
            acc.split[split.INDEX["unknown"]] = row.held_seconds
        acc.waiting_on = row.waiting_on
        for name, value in row.values.items():
            i = INDEX[name]
            acc.sums[i] = value * row.samples if KIND[i] == "mean" else value
            acc.counts[i] = row.samples
        return acc

    def add(self, i: int, value: float) -> None:
        self.sums[i] += value
        self.counts[i] += 1

    def row(self, node_id: str, settled: bool = False) -> MinuteRow:
        """The minute's row; ``settled``: its split without the seconds a verdict may still judge."""
        values = {
            name: total / n if mean else total
            for name, mean, total, n in zip(VALUES, _MEAN, self.sums, self.counts, strict=True)
            if n
        }
        held = None if self.gpu == NODE_ROW else self.held or 0.0
        return MinuteRow(
            node_id, self.gpu, self.minute, self.samples, values, self.state, self.cause, self.jobs, self.last_time,
            held, self._split(settled), self.waiting_on,
        )  # fmt: skip

    def _split(self, settled: bool) -> list[float]:
        parts = list(self.split) if self.split is not None else split.empty()
        if settled and self.provisional is not None:
            parts = [value - held for value, held in zip(parts, self.provisional, strict=True)]
        return parts

    def hold_provisional(self, verdict: GpuVerdict, seconds: float, unresponsive: bool) -> None:
        """``seconds`` the verdict split here that a later verdict may still judge."""
        self.hold_losses(split.losses(verdict, unresponsive), seconds)

    def hold_losses(self, lost: split.Losses, seconds: float) -> None:
        """``hold_provisional`` with the verdict's losses already read; the same sums as the
        split's own (``split.add_losses``), so the settled part of a minute is exact."""
        if self.provisional is None:
            self.provisional = split.empty()
        split.add_losses(self.provisional, lost, seconds, 0.0)

    def rejudge(self, counted: GpuVerdict, seconds: float, verdict: GpuVerdict, unresponsive: bool, keep: bool) -> None:
        """Provisional ``seconds`` split by ``counted``, split by ``verdict`` instead (``keep``:
        still provisional)."""
        parts = self.parts()
        if self.provisional is None:
            self.provisional = split.empty()
        for i, share in enumerate(split.shares(counted, unresponsive)):
            moved = min(seconds * share, parts[i])
            parts[i] -= moved
            self.provisional[i] = max(0.0, self.provisional[i] - moved)
        split.add(parts, verdict, seconds, 0.0, unresponsive)
        if keep:
            self.hold_provisional(verdict, seconds, unresponsive)

    def settle(self) -> None:
        """No verdict judges this minute's provisional seconds any more: they stay as counted."""
        self.provisional = None

    def parts(self) -> list[float]:
        if self.split is None:
            self.split = split.empty()
        return self.split
