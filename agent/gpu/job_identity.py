"""A GPU process's place in a multi-node job: the job key, the same on every node of the job, and
the ranks its launcher gave it, from the process's environment and cgroup (docs/agent.md, "Job
identity").

Pure functions. ``ProcessReader`` (``processes.py``) reads ``/proc/<pid>/environ`` once per
process and hands the bytes to ``parse_environ``, which keeps the launcher keys in ``KEPT_KEYS``
and nothing else: the rest of the environment (tokens, passwords, cloud keys) is never kept, never
shipped and never logged. A value that is not what its launcher writes (not UTF-8, not printable,
too long, an integer that is not a plain non-negative decimal) is dropped, as if unset.

The job key, first that applies: the Slurm job (the cgroup's ``job_N``, else ``SLURM_JOB_ID``),
``<SLURM_CLUSTER_NAME>/`` before it when set; the torch.distributed rendezvous
(``torch/<TORCHELASTIC_RUN_ID>``, else ``torch/<MASTER_ADDR>:<MASTER_PORT>``); the MPI/PMIx job
(``mpi/<PMIX_NAMESPACE>``). torchrun sets ``TORCHELASTIC_RUN_ID`` to ``none`` without
``--rdzv-id``, so ``none`` names no run. A loopback ``MASTER_ADDR`` is this host: Kubeflow's
PyTorchJob gives its master ``localhost`` and its workers the master's pod name, which is the
master's ``HOSTNAME``, so the host's name stands in for it; without a ``HOSTNAME`` it names no
job (every single-node job would share ``torch/localhost:29500``). A Kubernetes pod alone gives
no key: its UID differs on every node.

Whom the job is billed to: ``SLURM_JOB_ACCOUNT``, the Slurm account of the job's allocation, which
Slurm sets in every step's environment; kept whatever launcher gave the key (torchrun under
``srun`` is still charged to that account), as a name (printable, bounded, else ""). A pod's
Kubernetes namespace is not in its environment: the daemon stamps it on each report from the
kubelet's answer (``agent/exposition/pod_resources.py``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# What the launchers set, and all that is kept of a process's environment.
SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID")
TORCH_KEYS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "HOSTNAME")
TORCH_NODE_KEYS = ("GROUP_RANK", "NODE_RANK")
MPI_KEYS = ("PMIX_NAMESPACE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
ACCOUNT_KEY = "SLURM_JOB_ACCOUNT"  # "Account name associated of the job allocation" (srun(1))
KEPT_KEYS = frozenset((*SLURM_KEYS, *TORCH_KEYS, *TORCH_NODE_KEYS, *MPI_KEYS, ACCOUNT_KEY))

# The most of /proc/<pid>/environ read; keys past it are not seen (a training process's
# environment is a few kilobytes, the kernel allows far more).
MAX_ENVIRON_BYTES = 1 << 20
MAX_VALUE_CHARS = 200
MAX_INT = 2**31 - 1  # the largest rank or world size a launcher can set (a C int)

SLURM, TORCH, MPI = "slurm", "torch", "mpi"

_KEPT_BYTES = frozenset(key.encode() for key in KEPT_KEYS)
_DECIMAL = re.compile(r"[0-9]{1,10}")
_SLURM_JOB_DIR = re.compile(r"/job_\d+(?=/|$)")
_NO_RUN_ID = frozenset({"", "none"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


@dataclass(frozen=True, slots=True)
class Ranks:
    """What the launcher says of this process; None where it said nothing usable."""

    world_size: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    node_rank: int | None = None


@dataclass(frozen=True, slots=True)
class JobIdentity:
    key: str = ""  # JobRef.job_key; "" when nothing names a job that can span nodes
    source: str = ""  # slurm, torch or mpi: where the key came from
    ranks: Ranks = field(default_factory=Ranks)
    # The job's cgroup (v2) path, whose cpu.pressure and io.pressure are the job's own: the
    # ``.../job_N`` level for Slurm, else the process's own cgroup; "" when it has none.
    cgroup: str = ""
    account: str = ""  # JobRef.account: the Slurm account the job is charged to; "" when unset


def parse_environ(data: bytes) -> dict[str, str]:
    """The kept launcher keys of ``/proc/<pid>/environ`` (``KEY=VALUE`` entries separated by NUL).

    ``data`` may be cut at ``MAX_ENVIRON_BYTES``: the entry after the last NUL is then partial
    and is dropped. Values are checked by ``identify``; here only UTF-8 is required."""
    if len(data) >= MAX_ENVIRON_BYTES:
        data = data[:MAX_ENVIRON_BYTES].rpartition(b"\0")[0]
    kept: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name in _KEPT_BYTES and name.decode() not in kept:  # the first, as getenv finds it
            try:
                kept[name.decode()] = value.decode()
            except UnicodeDecodeError:
                continue
    return kept


def identify(env: Mapping[str, str], slurm_job_id: str = "", unified_cgroup: str = "") -> JobIdentity:
    """The job key, its source, the ranks, the job's cgroup and its Slurm account of one process.

    ``slurm_job_id`` is the job the process's cgroup names (``processes.parse_cgroup``), which
    wins over ``SLURM_JOB_ID``; ``unified_cgroup`` its cgroup v2 path (``processes.unified_path``)."""
    key, source = _key(env, slurm_job_id)
    return JobIdentity(
        key=key,
        source=source,
        ranks=ranks(env),
        cgroup=_job_cgroup(source, unified_cgroup),
        account=_text(env, ACCOUNT_KEY),
    )


def ranks(env: Mapping[str, str]) -> Ranks:
    """World size, rank, local rank and node rank from one launcher, the first that set any:
    torch (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK`` else ``NODE_RANK``), then
    MPI (``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK`` else ``PMIX_RANK``,
    ``OMPI_COMM_WORLD_LOCAL_RANK``), then Slurm (``SLURM_NTASKS``, ``SLURM_PROCID``,
    ``SLURM_LOCALID``, ``SLURM_NODEID``). One launcher's numbers are never mixed with another's:
    under ``srun`` + ``torchrun`` Slurm's task is the node's torchrun, not the rank."""
    torch = Ranks(
        world_size=_int(env, "WORLD_SIZE"),
        rank=_int(env, "RANK"),
        local_rank=_int(env, "LOCAL_RANK"),
        node_rank=_first_int(env, "GROUP_RANK", "NODE_RANK"),
    )
    mpi = Ranks(
        world_size=_int(env, "OMPI_COMM_WORLD_SIZE"),
        rank=_first_int(env, "OMPI_COMM_WORLD_RANK", "PMIX_RANK"),
        local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
    )
    slurm = Ranks(
        world_size=_int(env, "SLURM_NTASKS"),
        rank=_int(env, "SLURM_PROCID"),
        local_rank=_int(env, "SLURM_LOCALID"),
        node_rank=_int(env, "SLURM_NODEID"),
    )
    for candidate in (torch, mpi, slurm):
        if candidate != Ranks():
            return candidate
    return Ranks()


def is_loopback(address: str) -> bool:
    name = address.strip("[]").lower()
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# ---- helpers ----


def _key(env: Mapping[str, str], slurm_job_id: str) -> tuple[str, str]:
    job = slurm_job_id if _DECIMAL.fullmatch(slurm_job_id) else ""
    if not job and _int(env, "SLURM_JOB_ID") is not None:
        job = env["SLURM_JOB_ID"]
    if job:
        cluster = _text(env, "SLURM_CLUSTER_NAME")
        return (f"{cluster}/{job}" if cluster else job), SLURM
    run_id = _text(env, "TORCHELASTIC_RUN_ID")
    if run_id and run_id.lower() not in _NO_RUN_ID:
        return f"torch/{run_id}", TORCH
    address, port = _text(env, "MASTER_ADDR"), _int(env, "MASTER_PORT")
    if address and is_loopback(address):
        host = _text(env, "HOSTNAME")
        address = host if host and not is_loopback(host) else ""
    if address and port is not None and 0 < port < 65536:
        return f"torch/{address}:{port}", TORCH
    namespace = _text(env, "PMIX_NAMESPACE")
    if namespace:
        return f"mpi/{namespace}", MPI
    return "", ""


def _job_cgroup(source: str, unified: str) -> str:
    # No job, no job cgroup; a path relative to another cgroup namespace ("/../..") or the root
    # names no cgroup of the job either.
    if not source or not unified.startswith("/") or unified == "/" or "/../" in f"{unified}/":
        return ""
    if source != SLURM:
        return unified
    jobs = list(_SLURM_JOB_DIR.finditer(unified))
    return unified[: jobs[-1].end()] if jobs else ""


def _text(env: Mapping[str, str], key: str) -> str:
    """A name: printable, at most ``MAX_VALUE_CHARS``, not blank; else ""."""
    value = env.get(key, "")
    if len(value) > MAX_VALUE_CHARS or not value.isprintable() or not value.strip():
        return ""
    return value


def _int(env: Mapping[str, str], key: str) -> int | None:
    """A plain non-negative decimal up to ``MAX_INT`` (no sign, no spaces, no ``0x``); else None."""
    value = env.get(key, "")
    if not _DECIMAL.fullmatch(value):
        return None
    number = int(value)
    return number if number <= MAX_INT else None


def _first_int(env: Mapping[str, str], *keys: str) -> int | None:
    for key in keys:
        number = _int(env, key)
        if number is not None:
            return number
    return None
