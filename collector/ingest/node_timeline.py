"""What the fleet page draws of a node's recent past, kept in memory beside its detector.

One point per ``POINT_SECONDS`` of the node's reports (its detector's verdict when the window
advanced): state, starvation ratio, the busy share of its GPUs and the highways' rates. Bounded
(``MAX_POINTS``, two hours), so 10,000 nodes cost tens of megabytes. It also counts the GPU time
lost since midnight UTC, across detector restarts (a new agent epoch starts the detector's own
count from zero) and, with a history, across collector restarts: the count then starts from what
the history stored of the day (``seed_lost_today``), and adds only the verdicts of detectors made
after the restart, which the history had not seen (docs/views.md).

Days are the reports' own (their ``time_unix_seconds``), as the history's minutes are; only what
the page shows is judged by the collector's clock (``lost_today_seconds_at``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.collector.history.minutes import DAY_SECONDS
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

    def seed_lost_today(self, day_start_unix_seconds: float, lost_seconds: float) -> None:
        """Start the day's count from ``lost_seconds`` already lost on the UTC day that starts at
        ``day_start_unix_seconds``: at start-up, before any report of the node is counted."""
        self._day = int(day_start_unix_seconds // DAY_SECONDS)
        self.lost_today_seconds = lost_seconds

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
