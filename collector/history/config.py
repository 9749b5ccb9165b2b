"""How much history is kept and how often it is written: the retention of full-resolution reports
and per-minute rows (``serve --history-*``, `HistoryConfig`), and the timings one node's history
(``node_history.py``) writes, prunes and takes rates by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Full-resolution reports kept per node, and per-minute rows (``serve --history-*``).
DEFAULT_REPORTS_SECONDS: Final = 3600.0
DEFAULT_RETENTION_SECONDS: Final = 14 * 86400.0
# Old rows of a node are deleted at most this often (in its report time): each delete is a
# range scan in the flush transaction.
PRUNE_EVERY_SECONDS: Final = 30.0
# The open minute is written at most this often (report time); see NodeHistory.
OPEN_WRITE_SECONDS: Final = 5.0
# ... or once its node went quiet: no report for this long (wall clock) past its usual gap between
# reports (at most OPEN_WRITE_SECONDS of it). A node on time is never quiet: at 1 Hz, a silence
# of 1 s is the next report on its way, and writing then would write the minute with every report.
QUIET_MARGIN_SECONDS: Final = 0.5
# NIC, RDMA, disk and CPU rates are taken over at least this many seconds of reports.
RATE_EVERY_SECONDS: Final = 5.0
# The ledger sums a node's minutes per hour once its reports moved past the hour.
HOUR_SECONDS: Final = 3600
# A report stands for the time since the one before it, at most this long (the detector's
# ``max_interval_seconds``): after a silence, one report is not minutes of a job.
MAX_HELD_INTERVAL_SECONDS: Final = 10.0
# Past that, the rest of a silence within one epoch is a gap: held (the GPU names a job again after
# it), but no report says what it did, so it counts ``unknown`` in the split, for at most this long
# (a longer silence is a node that was down, not a job's time).
MAX_GAP_SECONDS: Final = 900.0


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    reports_seconds: float = DEFAULT_REPORTS_SECONDS
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    enabled: bool = True
