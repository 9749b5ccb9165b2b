"""The ``JobStraggler`` alert: what the roll-up hands the alert book at each job step.

One instance per job and straggler node (``node_id`` the straggler, ``key`` the job), or one per
job for a job-wide cause (``node_id`` empty, as the alert book files an alert about no one node:
there is no node to name; the key, the job, tells the instances apart). Labels ``job``, ``node``
(the straggler, empty for job-wide), ``cause``; annotations the wait share, GPU time lost, the
evidence and, for a data cause, the bandwidth needed. Severity ``critical`` while the job waits
``high_ratio`` of its GPU time or more (down to ``high_ratio - tier_margin_ratio`` once
critical), else ``warning``. Jobs of one node raise none: ``GPUDataStarved`` already says it of
that node. An instance that no longer holds gets a signal that does not fire, so the book
resolves it.
"""

from __future__ import annotations

from typing import Final

from nodeagent.collector.jobs.membership import Job
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.states.words import cause_word
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig

ALERT_NAME: Final = "JobStraggler"
# The node id of a job-wide instance: none.
JOB_WIDE: Final = ""


def job_signals(job: Job, verdict: JobVerdict, firing: set[str], config: DetectorConfig) -> list[AlertSignal]:
    """This step's signals for the job; ``firing`` (node ids firing now) is updated in place."""
    now: list[str] = []
    if verdict.state == "slowed" and len(verdict.nodes) >= 2:
        now = list(verdict.straggler_nodes) or ([JOB_WIDE] if verdict.job_wide else [])
    wait = verdict.wait_ratio or 0.0
    if now:
        job.critical = wait >= config.high_ratio or (
            job.critical and wait >= config.high_ratio - config.tier_margin_ratio
        )
    else:
        job.critical = False
    out = [AlertSignal(name=ALERT_NAME, node_id=node, key=job.key, firing=False) for node in sorted(firing - set(now))]
    out.extend(_firing(job, verdict, node) for node in now)
    firing.clear()
    firing.update(now)
    return out


def resolved(job: Job, firing: set[str]) -> list[AlertSignal]:
    """A job no longer followed: its instances resolve."""
    out = [AlertSignal(name=ALERT_NAME, node_id=node, key=job.key, firing=False) for node in sorted(firing)]
    firing.clear()
    return out


def _firing(job: Job, verdict: JobVerdict, node: str) -> AlertSignal:
    cause = cause_word(verdict.cause)
    wait = verdict.wait_ratio
    share = f"{wait:.0%}" if wait is not None else "an unknown share"
    nodes = len(verdict.nodes)
    if verdict.job_wide:
        summary = f"job {job.key}: every node held back by {cause}; its GPUs wait {share} of their time"
    else:
        summary = (
            f"job {job.key}: {node} holds back {nodes - 1} other nodes ({cause}); its GPUs wait {share} of their time"
        )
    evidence = " ".join(f"{k}={v if isinstance(v, str) else f'{v:g}'}" for k, v in sorted(verdict.evidence.items()))
    annotations = {
        "summary": summary,
        # The ledger's split of the job's GPUs, settled a window behind: said once there is some.
        "description": f"{verdict.gpus} GPUs on {nodes} nodes"
        + (f"; {verdict.gpu_seconds_lost / 3600:.2f} GPU-hours lost so far" if verdict.gpu_seconds_lost >= 36 else ""),
        "wait_ratio": "" if wait is None else f"{wait:.3f}",
        "gpu_seconds_lost": f"{verdict.gpu_seconds_lost:.0f}",
        "evidence": evidence,
    }
    if verdict.needed_bytes_per_second is not None:
        annotations["needed_bytes_per_second"] = f"{verdict.needed_bytes_per_second:.0f}"
    return AlertSignal(
        name=ALERT_NAME,
        node_id=node,
        key=job.key,
        firing=True,
        severity="critical" if job.critical else "warning",
        labels={"job": job.key, "node": node, "cause": cause},
        annotations=annotations,
    )
