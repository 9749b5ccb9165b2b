"""The split as counters: each node's GPU-seconds by job and category since the collector started,
for ``nodeagent_gpu_seconds_total`` on ``/metrics`` and through remote write.

The same numbers as the history's minutes, never counted twice: a minute's GPU rows are added
to the totals when the minute closes (each GPU's seconds to the jobs its row names, 1/n to each
of n), and the open minute's rows are added at reading time. So a counter only grows, and its
increase over a span is the ledger of that span. A job none of the node's minutes has named for
``JOB_KEPT_SECONDS`` of report time is dropped (its series end; ``rate`` and ``increase`` over
them stay true).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import NODE_ROW, MinuteRow

JOB_KEPT_SECONDS: Final = 3600.0


class SplitCounters:
    """One node's totals by job: a list of seconds per ``split.CATEGORIES``."""

    def __init__(self) -> None:
        self.closed: dict[str, list[float]] = {}
        # The seconds lost of each job's GPUs (by GPU index): what the job roll-up adds up (``job_lost``).
        self.closed_lost: dict[str, dict[int, float]] = {}
        self._seen: dict[str, float] = {}
        # Bumped each time closed minutes are added: remote write sends the totals when it moves.
        self.version = 0

    def close(self, rows: Iterable[MinuteRow]) -> None:
        """Add the rows of minutes that closed."""
        newest = 0.0
        for row in rows:
            if row.gpu == NODE_ROW or row.split is None or not row.jobs:
                continue
            _add(self.closed, row)
            _add_lost(self.closed_lost, row)
            for job in row.jobs:
                self._seen[job] = max(self._seen.get(job, 0.0), row.minute)
            newest = max(newest, row.minute)
            self.version += 1
        if newest:
            for job in [j for j, seen in self._seen.items() if newest - seen > JOB_KEPT_SECONDS]:
                del self._seen[job]
                self.closed.pop(job, None)
                self.closed_lost.pop(job, None)

    def totals(self, open_rows: Iterable[MinuteRow] = ()) -> dict[str, list[float]]:
        """The totals by job, with the open minute's ``open_rows`` added."""
        out = {job: list(values) for job, values in list(self.closed.items())}  # list(): one C-level copy
        for row in open_rows:
            if row.gpu != NODE_ROW and row.split is not None and row.jobs:
                _add(out, row)
        return out

    def job_lost(self, job: str, open_rows: Iterable[MinuteRow] = ()) -> dict[int, float]:
        """The job's GPU-seconds lost by the split on each of its GPUs of the node since the start,
        with the open minute's ``open_rows`` (a GPU shared by n jobs: 1/n to each)."""
        out = dict(self.closed_lost.get(job, {}))
        _add_lost({job: out}, *(r for r in open_rows if r.gpu != NODE_ROW and r.split is not None and job in r.jobs))
        return out


def _add_lost(totals: dict[str, dict[int, float]], *rows: MinuteRow) -> None:
    for row in rows:
        assert row.split is not None
        lost = split.lost_seconds(row.split) / len(row.jobs)
        for job in row.jobs:
            by_gpu = totals.get(job)
            if by_gpu is None:
                by_gpu = totals[job] = {}
            by_gpu[row.gpu] = by_gpu.get(row.gpu, 0.0) + lost


def _add(totals: dict[str, list[float]], row: MinuteRow) -> None:
    assert row.split is not None
    share = 1.0 / len(row.jobs)
    for job in row.jobs:
        values = totals.get(job)
        if values is None:
            values = totals[job] = split.empty()
        for i, value in enumerate(row.split):
            values[i] += value * share
