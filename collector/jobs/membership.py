"""The job stage's members: which nodes, GPUs and ranks belong to each job key, from the
nodes' ``JobStep``s; what the ranks claim; and nodes that leave.

A node joins a job with its first step for the job key (its node stage sends one per job its
reports name, ``node_stage``), with the GPUs the job's processes use there (a node in two jobs
gives each only its own GPUs), its ranks, node rank and the world size its processes claim. It
leaves when its node stage says so (``JobLeave``: the reports no longer name the key, or the node
was retired), or when it is silent (no step) for longer than the detector's window; the job's
verdict notes either for a window.

Bounds: at most ``max_jobs`` jobs (a new key past it is not followed, ``refused_jobs_total``), at
most ``max_nodes_per_job`` nodes per job (a node past it is left out of that job and counted in
its notes), ``max_ranks_per_node`` ranks kept per node (and, on the node's side, at most
``max_jobs_per_node`` keys read from a report). So memory is bounded by the nodes of the jobs
this owner holds, whatever the reports claim.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.messages import Home
from nodeagent.collector.tenants import raw_key, tenant_of

if TYPE_CHECKING:
    from nodeagent.collector.jobs.messages import JobStep
    from nodeagent.collector.jobs.node_values import NodeValues
    from nodeagent.collector.jobs.straggler import Standing

_log = structlog.get_logger("nodeagent.collector.jobs")

# Leave notes stay on the verdict this long after the node left (in windows).
_NOTE_WINDOWS = 1.0
# A node whose first step for a job comes more steps than this after the job's first joined late
# (one step: the nodes of a job that start together cross a step boundary at different times).
LATE_JOIN_STEPS = 1
# Log a refused job key at most this often.
_REFUSAL_LOG_SECONDS = 60.0


@dataclass(slots=True)
class Member:
    """One node's part in one job."""

    node_id: str
    job: Job
    gpus: tuple[int, ...]
    ranks: tuple[int, ...]
    ranks_count: int
    world_size: int
    node_rank: int | None
    last_report: float
    # The job step its values are for (-1: none yet), and the values.
    step: int = -1
    values: NodeValues | None = None
    # Its standing over the last window steps (straggler.py), and whether it waits on a straggler.
    history: deque[Standing] = field(default_factory=deque)
    waiting: bool = False
    # Per GPU index: the detector's cumulative GPU time lost last seen (the job's loss adds deltas).
    lost_seen: dict[int, float] = field(default_factory=dict)
    # Where its node's stage lives (its waits go there), and when its last step arrived (this
    # process's clock: a job whose nodes all fell silent ends by time, not by their reports).
    home: Home = field(default_factory=Home)
    heard_at: float = 0.0


@dataclass(slots=True)
class Job:
    key: str
    source: str
    members: dict[str, Member] = field(default_factory=dict)
    # (time, note) of nodes that left, kept for a window.
    left: list[tuple[float, str]] = field(default_factory=list)
    # Nodes that named the job past max_nodes_per_job, and when they last did.
    refused_nodes: dict[str, float] = field(default_factory=dict)
    # The step being gathered (-1: none), the last judged, how many members stepped into it.
    gathering: int = -1
    judged: int = -1
    stepped: int = 0
    # When the step being gathered is judged even if some node has not stepped into it.
    due: float = math.inf
    last_judged_time: float | None = None
    gpu_seconds_lost: float = 0.0
    # What its nodes' ranks claim (None: to be worked out again, after a change).
    claims: Claims | None = None
    # The stragglers it names, and whether its alert is critical (the roll-up's memory between steps).
    stragglers: tuple[str, ...] = ()
    critical: bool = False
    # Its tenant and its key as its nodes named it (``collector/tenants.py``), and when it opened.
    tenant: str = ""
    raw_key: str = ""
    opened_at: float = 0.0
    opened_step: int = 0
    # Nodes that joined after its first steps, and when (kept for a window, noted, alerted).
    late_joins: dict[str, float] = field(default_factory=dict)


class Membership:
    def __init__(self, window_seconds: float, window_steps: int, config: JobRollupConfig) -> None:
        self.window_seconds = window_seconds
        self.window_steps = window_steps
        self.config = config
        self.jobs: dict[str, Job] = {}
        # A key as nodes named it -> the jobs (one per tenant) of that key.
        self.by_raw_key: dict[str, set[str]] = {}
        # node -> job key -> its member there.
        self.by_node: dict[str, dict[str, Member]] = {}
        self.refused_jobs_total = 0
        self._refusal_logged = -_REFUSAL_LOG_SECONDS

    def update(self, step: JobStep, heard_at: float) -> Member | None:
        """A node's step for one job: the member joined or updated; None when the job or the
        node is past its bound (not followed)."""
        t = step.time_unix_seconds
        config = self.config
        key, node_id = step.job, step.node_id
        job = self.jobs.get(key)
        if job is None:
            if len(self.jobs) >= config.max_jobs:
                self._refuse(key, t)
                return None
            tenants = config.tenants
            job = Job(
                key, step.source, tenant=tenant_of(key, tenants), raw_key=raw_key(key, tenants), opened_at=t,
                opened_step=step.step,
            )  # fmt: skip
            self.jobs[key] = job
            self.by_raw_key.setdefault(job.raw_key, set()).add(key)
        member = job.members.get(node_id)
        if member is None:
            if len(job.members) >= config.max_nodes_per_job:
                job.refused_nodes[node_id] = t
                return None
            if step.step > job.opened_step + LATE_JOIN_STEPS:  # judged without it: late, or claiming the job
                job.late_joins[node_id] = t
            member = Member(node_id, job, (), (), 0, 0, None, t, history=deque(maxlen=self.window_steps))
            job.members[node_id] = member
            job.claims = None
            self.by_node.setdefault(node_id, {})[key] = member
        job.source = step.source or job.source
        kept = step.ranks[: config.max_ranks_per_node]
        if (step.gpus, kept, step.ranks_count, step.world_size) != (
            member.gpus, member.ranks, member.ranks_count, member.world_size,
        ):  # fmt: skip
            member.gpus, member.ranks, member.ranks_count = step.gpus, kept, step.ranks_count
            member.world_size = step.world_size
            job.claims = None
        member.node_rank = step.node_rank
        member.last_report = t
        member.home = step.home
        member.heard_at = heard_at
        return member

    def leave(self, job: Job, node_id: str, t: float, note: str) -> Member | None:
        member = job.members.pop(node_id, None)
        mine = self.by_node.get(node_id)
        if mine is not None:
            mine.pop(job.key, None)
            if not mine:
                del self.by_node[node_id]
        if member is None:
            return None
        job.claims = None
        job.left.append((t, note))
        if member.step >= job.gathering >= 0:
            job.stepped = max(0, job.stepped - 1)
        return member

    def drop_silent(self, job: Job, t: float) -> list[Member]:
        """Members silent for longer than the window leave the job."""
        silent = [m for m in job.members.values() if t - m.last_report > self.window_seconds]
        for member in silent:
            self.leave(job, member.node_id, t, f"{member.node_id} left: silent {t - member.last_report:.0f} s")
        return silent

    def forget(self, node_id: str) -> list[Job]:
        """A retired node: out of every job (no note: it is gone from the collector)."""
        jobs = [self.jobs[key] for key in self.by_node.get(node_id, {})]
        for job in jobs:
            self.leave(job, node_id, 0.0, "")
            job.left = [(at, note) for at, note in job.left if note]
            job.refused_nodes.pop(node_id, None)
        return jobs

    def end(self, job: Job) -> None:
        """A job without nodes is no longer followed."""
        self.jobs.pop(job.key, None)
        same = self.by_raw_key.get(job.raw_key)
        if same is not None:
            same.discard(job.key)
            if not same:
                del self.by_raw_key[job.raw_key]

    def rivals(self, job: Job) -> list[Job]:
        """The jobs of other tenants with the job's key, opened before it."""
        others = (self.jobs[k] for k in self.by_raw_key.get(job.raw_key, ()) if k != job.key and k in self.jobs)
        return [o for o in others if o.tenant != job.tenant and (o.opened_at, o.key) < (job.opened_at, job.key)]

    def notes(self, job: Job, t: float) -> list[str]:
        """What limits the job's verdict beside the ranks' claims: nodes left out or gone."""
        job.left = [(at, note) for at, note in job.left if t - at <= _NOTE_WINDOWS * self.window_seconds]
        notes = []
        window = self.window_seconds
        job.refused_nodes = {node: at for node, at in job.refused_nodes.items() if t - at <= window}
        if job.refused_nodes:
            more = len(job.refused_nodes)
            notes.append(
                f"{more} more node{'s name' if more > 1 else ' names'} the job, past the bound of "
                f"{self.config.max_nodes_per_job} nodes per job: not followed"
            )
        notes.extend(note for _, note in job.left)
        job.late_joins = {node: at for node, at in job.late_joins.items() if t - at <= window}
        notes.extend(f"{node} joined after the job's first step" for node in sorted(job.late_joins))
        return notes

    def _refuse(self, key: str, t: float) -> None:
        self.refused_jobs_total += 1
        if t - self._refusal_logged >= _REFUSAL_LOG_SECONDS:
            self._refusal_logged = t
            _log.warning(
                "job not followed: too many jobs", job=key[:64], max_jobs=self.config.max_jobs,
                refused_jobs_total=self.refused_jobs_total,
            )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Claims:
    """What the ranks of a job's nodes claim, and whether the nodes can be compared."""

    world_size: int
    ranks_reported: int
    notes: tuple[str, ...]
    # False when the claims contradict each other (a job key two jobs share, most likely): the
    # job is judged node by node, and no straggler is named.
    comparable: bool
    # Nodes that claim a rank another node of the job holds.
    claimed_twice: tuple[str, ...] = ()


def claims(members: Iterable[Member]) -> Claims:
    """The world size most nodes claim (0 when none does), the ranks reported, and notes."""
    members = list(members)
    notes = []
    comparable = True
    sizes = Counter(m.world_size for m in members if m.world_size)
    if len(sizes) > 1:
        said = ", ".join(f"{size} on {count} node{'s' if count > 1 else ''}" for size, count in sizes.most_common())
        notes.append(f"the ranks disagree on the world size ({said}): the nodes are not compared")
        comparable = False
    owners: dict[int, str] = {}
    twice: list[str] = []
    claimants: set[str] = set()
    for m in members:
        for rank in m.ranks:
            other = owners.setdefault(rank, m.node_id)
            if other != m.node_id:
                claimants.add(m.node_id)
                if len(twice) < 3:
                    twice.append(f"rank {rank} on {other} and {m.node_id}")
    if twice:
        notes.append(f"ranks claimed twice ({'; '.join(twice)}): the nodes are not compared")
        comparable = False
    world = sizes.most_common(1)[0][0] if sizes else 0
    reported = sum(m.ranks_count for m in members)
    if world and reported != world:
        nodes = len(members)
        notes.append(f"{nodes} node{'s' if nodes != 1 else ''} report {reported} of {world} ranks")
    return Claims(world, reported, tuple(notes), comparable, tuple(sorted(claimants)))
