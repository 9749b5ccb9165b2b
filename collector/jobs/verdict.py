"""What the job roll-up says about one multi-node job.

States: ``busy`` (the job's GPUs compute), ``slowed`` (its GPUs wait: for one node, the
straggler, or for a cause every node shares, ``job_wide``), ``idle`` (no GPU of it assigned),
``warmup`` (too little window yet to judge). A slowed job's cause: a data cause on the straggler
(``network``, ``storage``, ``cpu``, ``h2d``), ``throttled``, ``link`` (a degraded NVLink, PCIe
or NIC of the straggler), or ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.collector.payoff.model import IfFixed
from nodeagent.v1 import nodeagent_pb2 as pb

JOB_STATES: Final = ("busy", "slowed", "idle", "warmup")
JOB_CAUSES: Final = ("network", "storage", "cpu", "h2d", "throttled", "link", "unknown")


@dataclass(frozen=True, slots=True)
class JobVerdict:
    job: str
    source: str
    state: str
    time_unix_seconds: float
    nodes: tuple[str, ...]
    gpus: int
    world_size: int
    ranks_reported: int
    straggler_nodes: tuple[str, ...] = ()
    cause: str | None = None
    job_wide: bool = False
    # Share of the job's GPU time spent waiting over the window; None until there is a window.
    wait_ratio: float | None = None
    gpu_seconds_lost: float = 0.0
    needed_bytes_per_second: float | None = None
    evidence: dict[str, float | str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # With a straggler or a job-wide cause: what lifting it is worth (collector/payoff/).
    if_fixed: IfFixed | None = None

    def to_plain(self) -> dict[str, Any]:
        """The JSON of ``nodeagent-collector jobs --json`` and the fleet page's job view."""
        return {
            "job": self.job,
            "source": self.source,
            "state": self.state,
            "time_unix_seconds": self.time_unix_seconds,
            "nodes": list(self.nodes),
            "gpus": self.gpus,
            "world_size": self.world_size,
            "ranks_reported": self.ranks_reported,
            "straggler_nodes": list(self.straggler_nodes),
            "cause": self.cause,
            "job_wide": self.job_wide,
            "wait_ratio": self.wait_ratio,
            "gpu_hours_lost": self.gpu_seconds_lost / 3600,
            "needed_bytes_per_second": self.needed_bytes_per_second,
            "evidence": dict(self.evidence),
            "notes": list(self.notes),
            "if_fixed": self.if_fixed.to_plain() if self.if_fixed is not None else None,
        }

    def to_proto(self) -> pb.JobVerdict:
        message = pb.JobVerdict(
            job=self.job,
            source=self.source,
            state=self.state,
            nodes=self.nodes,
            gpus=self.gpus,
            world_size=self.world_size,
            ranks_reported=self.ranks_reported,
            straggler_nodes=self.straggler_nodes,
            cause=self.cause or "",
            job_wide=self.job_wide,
            gpu_seconds_lost=self.gpu_seconds_lost,
            evidence={k: v if isinstance(v, str) else f"{v:g}" for k, v in self.evidence.items()},
            time_unix_seconds=self.time_unix_seconds,
            notes=self.notes,
        )
        if self.wait_ratio is not None:
            message.wait_ratio = self.wait_ratio
        if self.needed_bytes_per_second is not None:
            message.needed_bytes_per_second = self.needed_bytes_per_second
        if self.if_fixed is not None:
            message.if_fixed.CopyFrom(self.if_fixed.to_proto())
        return message
