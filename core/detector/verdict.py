"""What the detector says about a node and each of its GPUs.

States: ``busy``, ``idle`` (not assigned to a job), ``throttled``, ``warmup``, ``lost``,
``starved``, ``waiting`` (the GPU waits on another node of its multi-node job: the collector's job
roll-up says so through ``NodeDetector.wait_on``; never on its own). A starved GPU has a cause:
``network``, ``storage``, ``cpu``, ``h2d``, ``interconnect`` or ``unknown``; all but
``interconnect`` are data causes, which the starvation ratio counts. Ratios are shares (0..1) of
the GPU's assigned time over the detector's window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

STATES: Final = ("busy", "idle", "throttled", "warmup", "lost", "starved", "waiting")
CAUSES: Final = ("network", "storage", "cpu", "h2d", "interconnect", "unknown")
DATA_CAUSES: Final = frozenset({"network", "storage", "cpu", "h2d", "unknown"})

Evidence = Mapping[str, float | str]


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    index: int
    uuid: str
    state: str
    cause: str | None
    # "moderate" or "high" while starved, else None.
    tier: str | None
    # Share of assigned time lost to data causes over the window; None until there is a window.
    starvation_ratio: float | None
    # Share of assigned time spent waiting for the collective (interconnect).
    interconnect_ratio: float | None
    idle_ratio: float | None
    # GPU time lost to data causes while starved, since the detector started.
    gpu_seconds_lost: float
    jobs: tuple[str, ...]
    # The values that decided the verdict (ratios, rates), by name.
    evidence: Evidence
    # A MIG instance's GPU instance id and profile ("1g.10gb"); a MIG-split GPU's verdict carries
    # its instances' (``core/detector/mig.py``), and is their roll-up.
    gpu_instance_id: int | None = None
    mig_profile: str = ""
    instances: tuple[GpuVerdict, ...] = ()

    @property
    def cause_ratio(self) -> float | None:
        """The ratio of the GPU's own cause: interconnect waiting for ``interconnect``, else data."""
        return self.interconnect_ratio if self.cause == "interconnect" else self.starvation_ratio

    def to_plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "state": self.state,
            "cause": self.cause,
            "tier": self.tier,
            "starvation_ratio": self.starvation_ratio,
            "interconnect_ratio": self.interconnect_ratio,
            "idle_ratio": self.idle_ratio,
            "gpu_seconds_lost": self.gpu_seconds_lost,
            "jobs": list(self.jobs),
            "evidence": dict(self.evidence),
        }
        if self.gpu_instance_id is not None:
            out["gpu_instance_id"], out["mig_profile"] = self.gpu_instance_id, self.mig_profile
        if self.instances:
            out["instances"] = [i.to_plain() for i in self.instances]
        return out


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node_id: str
    time_unix_seconds: float
    # Rolled up: starved if any GPU is, else throttled, waiting, busy, warmup, idle, lost (in that order).
    state: str
    # The cause most starved GPUs share.
    cause: str | None
    tier: str | None
    # Over the node's assigned GPU time.
    starvation_ratio: float | None
    interconnect_ratio: float | None
    gpu_seconds_lost: float
    jobs: tuple[str, ...]
    # For network and storage causes: the ingest that would keep the GPUs busy (observed
    # ingest divided by the share of time not spent waiting for data).
    needed_ingest_bytes_per_second: float | None
    evidence: Evidence
    gpus: tuple[GpuVerdict, ...]
    # While GPUs of the node wait on other nodes of their job (state `waiting`): those nodes, and
    # the job (the first by name when GPUs of several jobs wait).
    waiting_on: tuple[str, ...] = ()
    waiting_job: str = ""

    @property
    def starved_gpus(self) -> tuple[GpuVerdict, ...]:
        return tuple(g for g in self.gpus if g.state == "starved")

    def to_plain(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "time_unix_seconds": self.time_unix_seconds,
            "state": self.state,
            "cause": self.cause,
            "tier": self.tier,
            "starvation_ratio": self.starvation_ratio,
            "interconnect_ratio": self.interconnect_ratio,
            "gpu_seconds_lost": self.gpu_seconds_lost,
            "jobs": list(self.jobs),
            "needed_ingest_bytes_per_second": self.needed_ingest_bytes_per_second,
            "evidence": dict(self.evidence),
            "gpus": [g.to_plain() for g in self.gpus],
            "waiting_on": list(self.waiting_on),
            "waiting_job": self.waiting_job,
        }


# Waiting after the node's own problems: a node that is starved or throttled itself says so first.
_NODE_STATE_ORDER: Final = ("starved", "throttled", "waiting", "busy", "warmup", "idle", "lost")


def node_state(gpus: tuple[GpuVerdict, ...]) -> str:
    present = {g.state for g in gpus}
    return next((s for s in _NODE_STATE_ORDER if s in present), "idle")


def majority_cause(votes: Mapping[str, int], latest: str | None = None, order: Sequence[str] = CAUSES) -> str | None:
    """The cause with the most votes, None without any.

    The one tie rule of the detector, for a GPU's window steps, for a node's GPUs and for a job's
    straggler's steps (``order``: the job roll-up's causes) alike: a tie goes to ``latest`` (the
    cause of the most recent step) when it is among the tied, else to the earlier cause in ``order``.
    """
    top = max(votes.values(), default=0)
    if top <= 0:
        return None
    tied = [c for c in order if votes.get(c, 0) == top]
    return latest if latest in tied else tied[0]


def starved_causes(gpus: tuple[GpuVerdict, ...]) -> dict[str, int]:
    """How many starved GPUs show each cause: the votes of a node's roll-up."""
    votes: dict[str, int] = {}
    for g in gpus:
        if g.state == "starved" and g.cause is not None:
            votes[g.cause] = votes.get(g.cause, 0) + 1
    return votes
