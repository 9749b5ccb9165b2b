"""``Query.StreamJobTotals``: the history's GPU minutes totalled per job, on a reader thread.

A job's GPU-hours are the seconds its GPUs were held (each minute row counts them, not the
minute), so a 5-minute job on 8 GPUs is 0.67 GPU-hours whichever minutes it straddles, and what
it lost is the ledger's split of those seconds (``history/split.py``): the same hours lost, by the
same categories, as ``ledger --by job`` over the same minutes; the unmeasured hours apart
(``gpu_hours_unmeasured``), as the ledger gives them. Minutes stored before the split
count the detector's GPU-seconds lost, by the minute's cause.

The store groups the minutes by (jobs, cause, node); the totals are summed here as the groups
come, so what is held is one total per job, never the groups. A read that yields more than the
bound's rows is refused (``RESOURCE_EXHAUSTED``) with a line that says to ask for less; the
answer goes out in pages, however many jobs it holds.
"""

from __future__ import annotations

import grpc

from nodeagent.collector.history.minutes import MINUTE_SECONDS
from nodeagent.collector.history.split import INDEX, LOST_CATEGORIES
from nodeagent.collector.store.job_lists import jobs_of
from nodeagent.collector.store.reader import ReadContext
from nodeagent.core.transport.refused import QueryRefusedError
from nodeagent.v1 import nodeagent_pb2 as pb

DEFAULT_JOBS_SECONDS = 86400.0
_UNMEASURED = INDEX["unmeasured"]


def job_totals(reads: ReadContext, request: pb.JobsRequest, max_rows: int) -> pb.JobsResponse:
    """GPU-hours held and lost per job (a GPU's time shared by n jobs counts 1/n to each), the
    hours lost by category, the nodes; the jobs that lost most first."""
    totals: dict[str, pb.JobTotal] = {}
    nodes: dict[str, set[str]] = {}
    groups = reads.history.job_minutes(request.last_seconds or DEFAULT_JOBS_SECONDS)
    try:
        for count, (jobs, cause, node_id, held_seconds, unsplit_lost, first, last, *parts) in enumerate(groups, 1):
            if count > max_rows:
                raise QueryRefusedError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"more than {max_rows} (job, cause, node) groups in the history asked for: ask a shorter --since",
                )
            if count % 1000 == 0:
                reads.check()
            names = jobs_of(jobs)
            lost_by = {c: s for c, s in zip(LOST_CATEGORIES, parts[1 : 1 + len(LOST_CATEGORIES)], strict=True) if s}
            unmeasured = parts[_UNMEASURED]
            if unsplit_lost:
                key = cause or "unknown"
                lost_by[key] = lost_by.get(key, 0.0) + unsplit_lost
            for name in names:
                total = totals.get(name)
                if total is None:
                    total = totals[name] = pb.JobTotal(job=name, first_unix_seconds=first, last_unix_seconds=last)
                share = 1.0 / len(names)
                total.gpu_hours += held_seconds / 3600 * share
                total.gpu_hours_unmeasured += unmeasured / 3600 * share
                by_cause = total.gpu_hours_lost_by_cause
                for category, seconds in lost_by.items():
                    lost = seconds / 3600 * share
                    total.gpu_hours_lost += lost
                    by_cause[category] = by_cause.get(category, 0.0) + lost
                total.first_unix_seconds = min(total.first_unix_seconds, first)
                total.last_unix_seconds = max(total.last_unix_seconds, last + MINUTE_SECONDS)
                nodes.setdefault(name, set()).add(node_id)
    finally:
        groups.close()  # the read ends here, not when the generator is collected
    response = pb.JobsResponse()
    for name in sorted(totals, key=lambda n: -totals[n].gpu_hours_lost):
        totals[name].nodes.extend(sorted(nodes[name]))
        response.jobs.append(totals[name])
    return response
