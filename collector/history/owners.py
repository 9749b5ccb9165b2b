"""Whom a node's jobs are billed to: each job's Slurm account and Kubernetes namespace, as its GPU
processes' identity says (``JobRef.account``, ``JobRef.k8s_namespace``), for the ledger by account
or namespace (docs/ledger.md).

A job's owner is noted when the job first shows in a verdict and again once a minute (its first
report of each minute), so the stored row's minute follows the job for the retention, and an
owner that arrives late (the kubelet answered after the job started) is taken then. A job's name
is the verdict's (``core.detector.gate.job_id``); its owner the first process of the job that
names one.
"""

from __future__ import annotations

from nodeagent.core.detector.gate import job_id
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

Owner = tuple[str, str]  # (account, namespace)


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

    __slots__ = ("known", "pending")

    def __init__(self) -> None:
        self.known: dict[str, Owner] = {}
        self.pending: list[tuple[str, str, str, str, int]] = []  # HistoryBatch.owners

    def note(
        self, node_id: str, report: pb.NodeReport, verdict: NodeVerdict | None, minute: int, new_minute: bool
    ) -> None:
        """At a new minute, or when the verdict names a job not noted yet."""
        jobs = verdict.jobs if verdict is not None else ()
        if not new_minute and all(name in self.known for name in jobs):
            return
        owners = job_owners(report)
        for name, owner in owners.items():
            if new_minute or self.known.get(name) != owner:
                self.pending.append((node_id, name, owner[0], owner[1], minute))
        # A job seen without an owner is looked at again when the minute turns; jobs gone from
        # the node are forgotten then.
        before = {} if new_minute else self.known
        self.known = {**dict.fromkeys(jobs, ("", "")), **before, **owners}
