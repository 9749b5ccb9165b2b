"""Whom a node's jobs are billed to: each job's Slurm account and Kubernetes namespace, as its GPU
processes' identity says (``JobRef.account``, ``JobRef.k8s_namespace``), for the ledger by account
or namespace (docs/ledger.md).

A job's owner is noted when the job first shows in a verdict, again once a minute (its first
report of each minute), so the stored row's minute follows the job for the retention, and when it
changes, as the processes are looked at every ``LOOK_AGAIN_SECONDS`` of reports: an owner that
arrives late (the kubelet answered after the job started) is taken within seconds. A job's name
is the verdict's (``core.detector.gate.job_id``); its owner the first process of the job that
names one.
"""

from __future__ import annotations

import math
from typing import Final

from nodeagent.core.detector.gate import job_id
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

Owner = tuple[str, str]  # (account, namespace)
# How often (report time) a node's processes are looked at again within a minute: an owner the
# agent learns late (the kubelet is asked every 10 s), or one that changed, is noted before a
# short job ends.
LOOK_AGAIN_SECONDS: Final = 5.0


def job_owners(report: pb.NodeReport) -> dict[str, Owner]:
    """Each job on the report's GPUs (and MIG instances) with an account or a namespace."""
    owners: dict[str, Owner] = {}
    for g in report.gpus:
        for process in (*g.processes, *(p for i in g.mig_instances for p in i.processes)):
            ref = process.job
            if not (ref.account or ref.k8s_namespace):
                continue
            name = job_id(ref)
            if name:
                account, namespace = owners.get(name, ("", ""))
                owners[name] = (account or ref.account, namespace or ref.k8s_namespace)
    return owners


class JobOwners:
    """One node's jobs' owners noted, and the rows its next flush writes."""

    __slots__ = ("known", "looked_at", "pending")

    def __init__(self) -> None:
        self.known: dict[str, Owner] = {}
        self.looked_at = -math.inf  # the report time of the last look at the processes
        self.pending: list[tuple[str, str, str, str, int]] = []  # HistoryBatch.owners

    def note(
        self, node_id: str, report: pb.NodeReport, verdict: NodeVerdict | None, minute: int, new_minute: bool
    ) -> None:
        """At a new minute, when the verdict names a job not noted yet, and every
        ``LOOK_AGAIN_SECONDS`` of reports: an owner that changed is noted then."""
        jobs = verdict.jobs if verdict is not None else ()
        time = report.time_unix_seconds
        if not new_minute and time - self.looked_at < LOOK_AGAIN_SECONDS and all(j in self.known for j in jobs):
            return
        self.looked_at = time
        owners = job_owners(report)
        for name, owner in owners.items():
            if new_minute or self.known.get(name) != owner:
                self.pending.append((node_id, name, owner[0], owner[1], minute))
        # Jobs gone from the node are forgotten when the minute turns.
        before = {} if new_minute else self.known
        self.known = {**dict.fromkeys(jobs, ("", "")), **before, **owners}
