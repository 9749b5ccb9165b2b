"""How the store's flushes go: their duration and size, as cumulative histograms.

The flusher records one observation per flush (every ``flush_seconds``, never per report); the
metrics endpoint reads the counts from another thread at scrape time. A flush with nothing to
write (most of them on a quiet shard: 703 of 739 in 30 s) is only counted: in the histograms
it would pull every quantile toward zero, and the slow-flush alert would judge empty commits. The counters are plain
ints and lists updated by one writer, so a reader sees at worst a flush half counted, which
the next scrape corrects.
"""

from __future__ import annotations

import bisect
import time
from typing import Final

# A commit with synchronous=FULL costs about a device flush: sub-millisecond on NVMe, tens of
# milliseconds on a network disk. Past a second, acks (and agents' spools) wait visibly.
DURATION_BUCKETS_SECONDS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Nodes written per flush: at 1 Hz and 50 ms flushes, a 10,000-node shard writes about 500.
ROWS_BUCKETS: Final = (0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0)


class Histogram:
    """Cumulative-ready bucket counts (``counts[i]``: observations in bucket i only) and a sum."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """(upper bound as Prometheus writes it, observations at or below it), +Inf last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), list(self.counts), strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return out


class FlushStats:
    def __init__(self) -> None:
        self.duration_seconds = Histogram(DURATION_BUCKETS_SECONDS)
        self.rows = Histogram(ROWS_BUCKETS)
        self.failures_total = 0
        # Flushes that had neither reports nor alert changes to write.
        self.empty_total = 0
        # time.monotonic() when the last flush completed, empty or not; 0 before the first.
        self.last_monotonic = 0.0

    def observe(self, seconds: float, rows: int, *, wrote: bool | None = None) -> None:
        """One completed flush; ``wrote`` (default: ``rows > 0``) says whether it wrote anything."""
        self.last_monotonic = time.monotonic()
        if not (rows > 0 if wrote is None else wrote):
            self.empty_total += 1
            return
        self.duration_seconds.observe(seconds)
        self.rows.observe(rows)
