"""The messages between the two stages of the job roll-up, re-keyed between them.

The node stage (``node_stage``, where a node's reports land, keyed by node id) sends, at each of
the node's window steps, one ``JobStep`` per job it runs (its values for that step) and a
``JobLeave`` when it stops naming a job or is retired; the job stage (``job_stage``, on the job's
owner, keyed by job) answers each member with a ``JobWait``: wait on these stragglers, or no
longer. Within one process they are handed over as they are; between processes they travel as
``nodeagent.v1`` messages (``wire``).

``Home`` says where a node's stage lives, so that the job's owner can send its waits back: the
collector (its entry in ``[fleet] collectors``; "" for the owner's own collector) and the worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.collector.jobs.node_values import NodeValues


@dataclass(frozen=True, slots=True)
class Home:
    collector: str = ""
    worker: int = 0


@dataclass(frozen=True, slots=True)
class JobStep:
    """One node's values for one job at one of the node's window steps."""

    job: str
    source: str
    node_id: str
    step: int
    time_unix_seconds: float
    gpus: tuple[int, ...]
    ranks: tuple[int, ...]
    ranks_count: int
    world_size: int
    node_rank: int | None
    values: NodeValues
    # The job's GPUs on the node: GPU time lost so far, the ledger's split of the job's GPUs where the
    # node keeps a history (``NodeHistory.job_lost``: settled seconds), else as its detector counts it.
    gpu_seconds_lost: Mapping[int, float] = field(default_factory=dict)
    home: Home = Home()


@dataclass(frozen=True, slots=True)
class JobLeave:
    """The node no longer names the job (``note`` says why), or was retired (``note`` "")."""

    job: str
    node_id: str
    time_unix_seconds: float
    note: str = ""
    home: Home = Home()


@dataclass(frozen=True, slots=True)
class JobWait:
    """The job's owner to one member: its GPUs of ``job`` wait on ``stragglers`` (``clear``: no longer).

    ``own``: the member waits on no other node, but the roll-up measures its GPUs of the job waiting
    ``wait_ratio`` of their time (a `link` straggler waiting in the collective over its own link,
    ``stragglers`` naming it; a node of a job-wide slowdown, ``stragglers`` empty). Its detector is
    not told (its verdict stays its own); the ledger's split counts the wait (``ledger_shares``)."""

    job: str
    node_id: str
    stragglers: tuple[str, ...] = ()
    wait_ratio: float | None = None
    echo: bool = False
    clear: bool = False
    home: Home = Home()
    own: bool = False
    # The wait share is unknown (``wait_ratio`` None): the reason's code (``computing_source``).
    unknown: str = ""


NodeMessage = JobStep | JobLeave
