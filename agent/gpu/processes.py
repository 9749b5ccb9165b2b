"""Who runs on a GPU: a process's name, user and job, read from procfs.

The job comes from ``<procfs>/<pid>/cgroup``: a Slurm job id (``.../job_1234/...``), a Kubernetes
pod UID (``pod<uid>`` with ``-`` or, under the systemd cgroup driver, ``_`` separators) and a
container id (64 hex digits, as docker, containerd and cri-o name their scopes). The process's place
in a multi-node job comes from its launcher's environment, ``<procfs>/<pid>/environ``, of which
only the launcher keys are kept (``job_identity.py``). Parsers are pure functions;
``ProcessReader`` reads and caches per pid, since a training process keeps its name, user, cgroup
and environment for its whole life.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Set
from dataclasses import dataclass, field
from functools import lru_cache

from nodeagent.agent.gpu.job_identity import MAX_ENVIRON_BYTES, JobIdentity, identify, parse_environ

_SLURM_JOB = re.compile(r"/job_(\d+)(?=/|$)")
_K8S_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER = re.compile(r"(?:^|[/:-])([0-9a-f]{64})(?:\.scope)?(?=/|$)")


@dataclass(frozen=True, slots=True)
class JobInfo:
    slurm_job_id: str = ""
    k8s_pod_uid: str = ""
    container_id: str = ""
    cgroup: str = ""  # the cgroup path the ids were read from


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    name: str  # comm, e.g. "python"; "" when unreadable (another pid namespace)
    user: str  # the real uid's name, or the number when it has no name here
    job: JobInfo
    # Its multi-node job; without the right to read its environment (another user's process and
    # no root), only what the cgroup names.
    identity: JobIdentity = field(default_factory=JobIdentity)


def parse_cgroup(text: str) -> JobInfo:
    """The job a process belongs to, from the content of /proc/<pid>/cgroup (v1 or v2)."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        hierarchy, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not sep or not sep2:
            continue
        (unified if hierarchy == "0" and controllers == "" else legacy).append(path)
    # The unified (v2) hierarchy is authoritative; v1 hierarchies in file order after it.
    paths = unified + legacy
    for path in paths:
        job = parse_cgroup_path(path)
        if job.slurm_job_id or job.k8s_pod_uid or job.container_id:
            return job
    return JobInfo(cgroup=paths[0] if paths else "")


def unified_path(text: str) -> str:
    """The cgroup v2 path of /proc/<pid>/cgroup (its ``0::PATH`` line); "" on a v1-only node."""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return ""


def parse_cgroup_path(path: str) -> JobInfo:
    slurm = _SLURM_JOB.findall(path)
    pod = _K8S_POD.findall(path)
    container = _CONTAINER.findall(path)
    return JobInfo(
        slurm_job_id=slurm[-1] if slurm else "",
        k8s_pod_uid=pod[-1].replace("_", "-") if pod else "",
        container_id=container[-1] if container else "",
        cgroup=path,
    )


def parse_status_uid(text: str) -> int | None:
    """The real uid from /proc/<pid>/status (``Uid:  real effective saved fs``)."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            if len(parts) > 1 and parts[1].isdigit():
                return int(parts[1])
            return None
    return None


@lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class ProcessReader:
    """Name, user and job of GPU processes, cached by pid until the pid leaves the GPUs."""

    __slots__ = ("_cache", "_procfs")

    def __init__(self, procfs: str) -> None:
        self._procfs = procfs
        self._cache: dict[int, ProcessInfo] = {}

    def info(self, pid: int) -> ProcessInfo:
        cached = self._cache.get(pid)
        if cached is None:
            cached = self._cache[pid] = self._read(pid)
        return cached

    def retain(self, pids: Set[int]) -> None:
        """Forget pids no longer on any GPU (a reused pid is then read afresh)."""
        for pid in [p for p in list(self._cache) if p not in pids]:  # list(): GPU threads may add
            del self._cache[pid]

    def _read(self, pid: int) -> ProcessInfo:
        base = os.path.join(self._procfs, str(pid))
        name = (_read_text(os.path.join(base, "comm")) or "").strip()
        uid = parse_status_uid(_read_text(os.path.join(base, "status")) or "")
        cgroup = _read_text(os.path.join(base, "cgroup")) or ""
        job = parse_cgroup(cgroup) if cgroup else JobInfo()
        environ = _read_environ(os.path.join(base, "environ"))
        env = parse_environ(environ) if environ else {}  # the launcher keys; the rest is not kept
        return ProcessInfo(
            name=name,
            user="" if uid is None else user_name(uid),
            job=job,
            identity=identify(env, job.slurm_job_id, unified_path(cgroup)),
        )


def _read_environ(path: str) -> bytes | None:
    """At most ``MAX_ENVIRON_BYTES`` of a process's environment; None without the right to read it
    (the kernel asks for the process's own user or root) or when the process is gone."""
    try:
        with open(path, "rb", buffering=0) as f:
            parts: list[bytes] = []
            left = MAX_ENVIRON_BYTES
            while left > 0:
                chunk = f.read(left)
                if not chunk:
                    break
                parts.append(chunk)
                left -= len(chunk)
            return b"".join(parts)
    except OSError:
        return None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
