"""What the fleet page draws of a node's recent past, kept in memory beside its detector.

One point per ``POINT_SECONDS`` of the node's reports (its detector's verdict when the window
advanced): state, starvation ratio, the busy share of its GPUs and the highways' rates. Bounded
(``MAX_POINTS``, two hours), so 10,000 nodes cost tens of megabytes. It also counts the GPU time
lost since midnight UTC. With a history it is the ledger's split (``history/split.py``), the
figure ``ledger``, ``jobs`` and ``/metrics`` give: the node's history counts it (``NodeHistory.lost_on``),
and ``split_base`` keeps what that history does not hold of the day, what the store held at start
(``seed_lost_today``) or a history let go when its node rested, less the minute a new history
reopens (``reopened``), so that no minute counts twice. Without a history (``--no-history``: no
split) it is the detector's own count, since this collector started, across detector restarts (a
new agent epoch starts the detector's count from zero) (docs/views.md).

Days are the reports' own (their ``time_unix_seconds``), as the history's minutes are; only what
the page shows is judged by the collector's clock (``lost_today_seconds_at``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import DAY_SECONDS, NODE_ROW, MinuteRow
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.quantities.rates import increase_across_reset

POINT_SECONDS: Final = 60.0
MAX_POINTS: Final = 120


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    time_unix_seconds: float
    state: str
    starvation_ratio: float | None
    gpu_busy_ratio: float | None
    network_rx_bytes_per_second: float | None
    disk_read_bytes_per_second: float | None
    cpu_busy_ratio: float | None

    def to_plain(self) -> dict[str, Any]:
        return {
            "time_unix_seconds": self.time_unix_seconds,
            "state": self.state,
            "starvation_ratio": self.starvation_ratio,
            "gpu_busy_ratio": self.gpu_busy_ratio,
            "network_rx_bytes_per_second": self.network_rx_bytes_per_second,
            "disk_read_bytes_per_second": self.disk_read_bytes_per_second,
            "cpu_busy_ratio": self.cpu_busy_ratio,
        }


@dataclass(slots=True)
class NodeTimeline:
    points: deque[TimelinePoint] = field(default_factory=lambda: deque(maxlen=MAX_POINTS))
    lost_today_seconds: float = 0.0
    _day: int = -1
    _last_lost: float = 0.0
    _next_point: float = -math.inf
    # With a history: the split's seconds lost on ``split_day`` that the node's history does not hold.
    by_split: bool = False
    split_day: int = -1
    split_base: float = 0.0

    def seed_lost_today(self, day_start_unix_seconds: float, lost_seconds: float) -> None:
        """Start the day's count from ``lost_seconds`` (the split's, as the store holds them) already
        lost on the UTC day that starts at ``day_start_unix_seconds``: at start-up, before any
        report of the node is counted."""
        self._day = self.split_day = int(day_start_unix_seconds // DAY_SECONDS)
        self.lost_today_seconds = self.split_base = lost_seconds
        self.by_split = True

    def reopened(self, rows: list[MinuteRow]) -> None:
        """A new history of the node reopens these stored rows (its newest minute): they are its own
        now, no longer part of the base."""
        self.by_split = True
        for row in rows:
            if row.gpu == NODE_ROW and row.split is not None and row.minute // DAY_SECONDS == self.split_day:
                self.split_base -= split.lost_seconds(list(row.split))

    def let_go(self, history: NodeHistory) -> None:
        """The node's history goes (its node rests): what it held of its newest day joins the base."""
        day = history.minute // DAY_SECONDS
        if day != self.split_day:
            self.split_day, self.split_base = day, 0.0
        self.split_base += history.lost_on(day)

    def split_lost_today_at(self, now_unix_seconds: float, history: NodeHistory | None) -> float:
        """The split's GPU-seconds lost on the collector's day of ``now``: the base, and the history's."""
        day = int(now_unix_seconds // DAY_SECONDS)
        base = self.split_base if day == self.split_day else 0.0
        return max(0.0, base + (history.lost_on(day) if history is not None else 0.0))

    def lost_today_seconds_at(self, now_unix_seconds: float) -> float:
        """The day's count as of ``now``: 0 once the node's counted day is over (a node that has not
        reported since before midnight UTC lost nothing today that anyone saw)."""
        return self.lost_today_seconds if int(now_unix_seconds // DAY_SECONDS) <= self._day else 0.0

    def record(self, detector: NodeDetector) -> None:
        """Called when the detector's window advanced."""
        verdict = detector.verdict
        t = verdict.time_unix_seconds
        day = int(t // DAY_SECONDS)
        if day != self._day:
            self._day, self.lost_today_seconds = day, 0.0
        lost = verdict.gpu_seconds_lost
        # A new detector (a restarted agent) counts from zero again.
        self.lost_today_seconds += increase_across_reset(self._last_lost, lost)
        self._last_lost = lost
        if t < self._next_point:
            return
        self._next_point = t + POINT_SECONDS
        idle = [g.idle_ratio for g in verdict.gpus if g.idle_ratio is not None]
        evidence = detector.evidence
        cpu = evidence.values.get("cpu_busy_ratio")
        self.points.append(
            TimelinePoint(
                t,
                verdict.state,
                verdict.starvation_ratio,
                round(1.0 - sum(idle) / len(idle), 4) if idle else None,
                evidence.network_rx_bytes_per_second,
                evidence.disk_read_bytes_per_second,
                float(cpu) if isinstance(cpu, int | float) else None,
            )
        )
