"""How far a report's own time may be from the collector's clock, and what becomes of one past it.

A report says when it was made (``time_unix_seconds``); minutes of the history, the timeline and
the detector's windows are that time. A node whose clock is wrong (or a simulation sped up past
the wall clock) would put its history hours ahead or behind. So a new report more than
``ahead_seconds`` ahead of the collector's clock, or more than ``behind_seconds`` behind it, is
refused: acknowledged like a stored one (the agent must not send it again forever), but handed
to no stage and stored nowhere; counted per reason and per node, and logged at most once a
minute per node. Each node's clock skew (its newest report's time minus the collector's clock
when it arrived) is kept for ``nodes`` and ``/metrics``, refused or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import structlog

from nodeagent.collector.ingest.node_state import NodeState

log = structlog.get_logger("nodeagent.collector")

# NTP keeps clocks within milliseconds; five minutes is far past any honest drift, and catches a
# clock set hours off (a time zone taken for UTC) or a simulation run ahead of the wall clock.
DEFAULT_MAX_CLOCK_AHEAD_SECONDS: Final = 300.0
# Reports wait in the agent's spool for at most its --spool-max-age, 24 h by default (older ones it
# drops itself): one so old is still a good report. An hour more covers draining a day's spool and
# a node clock somewhat behind. Raise it with the agents' --spool-max-age.
DEFAULT_MAX_CLOCK_BEHIND_SECONDS: Final = 25 * 3600.0
# The ``reason`` label of ``nodeagent_ingest_reports_refused_total``.
CLOCK_AHEAD: Final = "clock_ahead"
CLOCK_BEHIND: Final = "clock_behind"
# A node's refusals are logged at most this often (the first at once), with the count meanwhile.
LOG_EVERY_SECONDS: Final = 60.0


@dataclass(frozen=True, slots=True)
class ClockBounds:
    ahead_seconds: float = DEFAULT_MAX_CLOCK_AHEAD_SECONDS
    behind_seconds: float = DEFAULT_MAX_CLOCK_BEHIND_SECONDS

    def judge(self, skew_seconds: float) -> str | None:
        """Why a report ``skew_seconds`` off the collector's clock is refused; None: it is not."""
        if skew_seconds > self.ahead_seconds:
            return CLOCK_AHEAD
        if -skew_seconds > self.behind_seconds:
            return CLOCK_BEHIND
        return None


class ClockRefusals:
    """Reports refused for their time: the counts, and a log line per node now and then."""

    def __init__(self, bounds: ClockBounds | None) -> None:
        # None: every time is taken (an ingest fed recorded or made-up reports).
        self.bounds = bounds
        self.totals: dict[str, int] = {CLOCK_AHEAD: 0, CLOCK_BEHIND: 0}

    def judge(self, node: NodeState, report_time: float, now: float) -> bool:
        """Note the node's skew; True when its report is refused (counted, and maybe logged)."""
        skew = report_time - now
        node.clock_skew_seconds = skew
        reason = None if self.bounds is None else self.bounds.judge(skew)
        if reason is None:
            return False
        self.totals[reason] += 1
        node.clock_refused_total += 1
        node.clock_unlogged += 1
        if now - node.clock_logged_at >= LOG_EVERY_SECONDS:
            assert self.bounds is not None
            bound = self.bounds.ahead_seconds if reason == CLOCK_AHEAD else self.bounds.behind_seconds
            log.warning(
                "reports refused for their time (acknowledged, not stored)", node=node.row.node_id, reason=reason,
                skew_seconds=round(skew, 3), bound_seconds=bound, refused=node.clock_unlogged,
                refused_total=node.clock_refused_total,
            )  # fmt: skip
            node.clock_logged_at, node.clock_unlogged = now, 0
        return True
