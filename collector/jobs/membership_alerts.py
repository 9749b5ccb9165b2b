"""Who joined a job, as the alert book hears it: ``JobNodeJoinedLate`` and ``JobRankClaimedTwice``
(info: a node whose agent started late does both honestly, and so does a node that claims
another's job) and ``JobTenantMismatch`` (warning: a node of one tenant names a job key another
tenant's nodes run; the key is scoped by tenant, so it was kept out of that job).

Each job's instances are worked out again at every judged step (``membership_signals``), as
``JobStraggler``'s are: one per (alert, node), firing while it holds, resolved once it no longer
does or the job ends. A late join holds for as long as the job's notes keep it (a window)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from nodeagent.collector.jobs.membership import Job
from nodeagent.core.detector.alert_signals import AlertSignal

LATE_JOIN: Final = "JobNodeJoinedLate"
RANK_TWICE: Final = "JobRankClaimedTwice"
TENANT_MISMATCH: Final = "JobTenantMismatch"
NAMES: Final = frozenset({LATE_JOIN, RANK_TWICE, TENANT_MISMATCH})

Instance = tuple[str, str, str]  # (alert name, node, key: the job the alert is about)


def membership_signals(
    job: Job, t: float, window_seconds: float, rivals: Iterable[Job], firing: set[Instance]
) -> list[AlertSignal]:
    """The job's membership alerts at this step; ``rivals``: the jobs of other tenants with the same
    key, opened before this one. ``firing`` is updated in place."""
    now: dict[Instance, AlertSignal] = {}
    for node, at in job.late_joins.items():
        if t - at <= window_seconds:
            summary = f"job {job.key}: {node} joined after the job's first step"
            now[(LATE_JOIN, node, job.key)] = _signal(LATE_JOIN, node, job.key, "info", summary, job.key)
    for node in job.claims.claimed_twice if job.claims is not None else ():
        summary = f"job {job.key}: {node} claims a rank another node of the job holds"
        now[(RANK_TWICE, node, job.key)] = _signal(RANK_TWICE, node, job.key, "info", summary, job.key)
    for rival in rivals:
        if not rival.members:
            continue
        for node in job.members:
            summary = (
                f"{node} (tenant {job.tenant or 'none'}) names job {rival.raw_key} that tenant "
                f"{rival.tenant or 'none'} runs ({rival.key}): kept out of it, judged as {job.key}"
            )
            signal = _signal(TENANT_MISMATCH, node, rival.key, "warning", summary, rival.key)
            now[(TENANT_MISMATCH, node, rival.key)] = signal
    out = [AlertSignal(name=n, node_id=node, key=key, firing=False) for n, node, key in sorted(firing - set(now))]
    out.extend(now[i] for i in sorted(now))
    firing.clear()
    firing.update(now)
    return out


def resolved(firing: set[Instance]) -> list[AlertSignal]:
    """A job no longer followed: its instances resolve."""
    out = [AlertSignal(name=n, node_id=node, key=key, firing=False) for n, node, key in sorted(firing)]
    firing.clear()
    return out


def _signal(name: str, node: str, key: str, severity: str, summary: str, job: str) -> AlertSignal:
    return AlertSignal(
        name=name, node_id=node, key=key, firing=True, severity=severity, labels={"job": job, "node": node},
        annotations={"summary": summary},
    )  # fmt: skip
