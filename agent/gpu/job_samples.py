"""The node's multi-node jobs in the report: one ``JobSample`` per job key on the GPUs' processes,
with the pressure of the job's own cgroup.

The processes of a job speak for it, one vote each (a process on two GPUs votes once): the world
size is the one most of them give (a tie goes to the largest), the node rank likewise (a tie goes
to the smallest). Processes that disagree are not hidden by a maximum or silently merged: the
sample carries what most of them say and every rank they hold, and the collector's job roll-up
compares the nodes (docs/agent.md, "Job identity").

Where the job's processes share one cgroup v2 directory (Slurm's ``.../job_N``, or the processes'
own), its ``cpu.pressure`` and ``io.pressure`` are read each tick under ``<sysfs>/fs/cgroup``
(``/unified`` on a hybrid v1/v2 node), parsed as the node-wide ones are
(``sources/pressure.py``): on a shared node they are the job's evidence, not its neighbours'.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from nodeagent.agent.gpu.job_identity import JobIdentity
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.kernel.pressure import parse_pressure
from nodeagent.core.wire.validate import MAX_JOBS, MAX_RANKS
from nodeagent.v1 import nodeagent_pb2 as pb

_Vote = TypeVar("_Vote", int, str)


@dataclass(frozen=True, slots=True)
class JobMember:
    """One process of a job on one GPU of this node."""

    gpu: int
    pid: int
    identity: JobIdentity


def job_samples(members: Iterable[JobMember]) -> list[pb.JobSample]:
    """One sample per job key, in key order; at most ``MAX_JOBS``, each with at most ``MAX_RANKS``."""
    jobs: dict[str, list[JobMember]] = {}
    for member in members:
        if member.identity.key:
            jobs.setdefault(member.identity.key, []).append(member)
    return [_sample(key, jobs[key]) for key in sorted(jobs)[:MAX_JOBS]]


class JobPressure:
    """Each job cgroup's ``cpu.pressure`` and ``io.pressure``, read through the kernel-file cache;
    the descriptors of a cgroup that left the report are closed."""

    __slots__ = ("_files", "_read", "_root", "_sysfs")

    def __init__(self, files: KernelFiles, sysfs: str) -> None:
        self._files = files
        self._sysfs = sysfs
        self._root: str | None = None
        self._read: set[str] = set()

    def locate(self) -> None:
        """Find the cgroup v2 hierarchy (at each scan): ``fs/cgroup``, or ``fs/cgroup/unified`` on a
        hybrid node; none on a v1-only node (no per-cgroup pressure there)."""
        self._root = None
        for root in (os.path.join(self._sysfs, "fs", "cgroup"), os.path.join(self._sysfs, "fs", "cgroup", "unified")):
            if os.path.exists(os.path.join(root, "cgroup.controllers")):
                self._root = root
                return

    def fill(self, samples: Iterable[pb.JobSample]) -> None:
        read: set[str] = set()
        for sample in samples:
            if not sample.cgroup or self._root is None:
                continue
            directory = os.path.join(self._root, sample.cgroup.lstrip("/"))
            read.add(directory)
            for name, target in (("cpu.pressure", sample.cpu_pressure), ("io.pressure", sample.io_pressure)):
                text = self._files.read_text(os.path.join(directory, name))
                parsed = parse_pressure(text) if text is not None else None
                if parsed is not None:
                    target.CopyFrom(parsed)
        for gone in self._read - read:
            self._files.forget(gone + os.sep)
        self._read = read


# ---- helpers ----


def _sample(key: str, members: list[JobMember]) -> pb.JobSample:
    by_pid = {m.pid: m.identity for m in members}  # one vote per process
    identities = list(by_pid.values())
    sample = pb.JobSample(job=key, source=_most_common([i.source for i in identities], prefer_large=False) or "")
    world = _most_common([i.ranks.world_size for i in identities if i.ranks.world_size is not None])
    sample.world_size = world if world is not None else 0
    ranks = sorted({i.ranks.rank for i in identities if i.ranks.rank is not None})
    sample.ranks.extend(ranks[:MAX_RANKS])
    node = _most_common([i.ranks.node_rank for i in identities if i.ranks.node_rank is not None], prefer_large=False)
    if node is not None:
        sample.node_rank = node
    sample.gpus.extend(sorted({m.gpu for m in members}))
    cgroups = {i.cgroup for i in identities}
    if len(cgroups) == 1:
        # Processes in different cgroups have no one cgroup of the job here: no job pressure.
        sample.cgroup = cgroups.pop()
    return sample


def _most_common(values: list[_Vote], *, prefer_large: bool = True) -> _Vote | None:
    if not values:
        return None
    counts = Counter(values)
    top = max(counts.values())
    tied = [value for value, count in counts.items() if count == top]
    return max(tied) if prefer_large else min(tied)
