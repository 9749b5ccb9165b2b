"""A minute being built: its columns' sums and counts by index, its held seconds and their split.

``rollup.NodeHistory`` keeps one per GPU and one for the node while the minute is open, adds
each report's values (the ingest path's hot loop) and makes the ``MinuteRow`` a flush writes.
"""

from __future__ import annotations

import math
from typing import Final

from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import INDEX, KIND, NODE_ROW, VALUES, MinuteRow

_UTIL_MIN: Final = INDEX["utilization_min"]
_MEAN: Final = tuple(kind == "mean" for kind in KIND)


class OpenMinute:
    """A minute being built: sums and counts by column index."""

    __slots__ = (
        "cause", "counts", "gpu", "held", "jobs", "last_time", "minute", "samples", "split", "state", "sums",
        "waiting_on",
    )  # fmt: skip

    def __init__(self, gpu: int, minute: int) -> None:
        self.gpu, self.minute, self.samples = gpu, minute, 0
        self.sums = [0.0] * len(VALUES)
        self.counts = [0] * len(VALUES)
        self.state, self.cause, self.last_time = "", "", 0.0
        self.jobs: tuple[str, ...] = ()
        self.held: float | None = None
        self.split: list[float] | None = None
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

    def row(self, node_id: str) -> MinuteRow:
        values = {
            name: total / n if mean else total
            for name, mean, total, n in zip(VALUES, _MEAN, self.sums, self.counts, strict=True)
            if n
        }
        held = None if self.gpu == NODE_ROW else self.held or 0.0
        return MinuteRow(
            node_id, self.gpu, self.minute, self.samples, values, self.state, self.cause, self.jobs, self.last_time,
            held, list(self.split) if self.split is not None else split.empty(), self.waiting_on,
        )  # fmt: skip

    def parts(self) -> list[float]:
        if self.split is None:
            self.split = split.empty()
        return self.split
