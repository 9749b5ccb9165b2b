"""``[tenants]`` of ``collector.toml``: which node credentials belong to which tenant, and the job
names scoped by it.

    [tenants.acme]
    token_file = "/etc/nodeagent/tenants/acme.token"   # a node token of this tenant
    nodes = ["acme-gpu-*"]                              # certificate names (globs) of its nodes

A stream's tenant is its credential's: the tenant whose ``token_file`` holds the bearer token it
sent, or, with mutual TLS, the tenant whose ``nodes`` match the node id its certificate names
(the first that matches). A stream whose token and certificate name two different tenants is
refused. The node token of ``--token-file`` and certificates no tenant names belong to none.

Every name by which a tenant's node names a job (``JobSample.job`` and the ``JobRef`` name that
``job_id`` picks) is scoped as the collector receives it: ``acme:torch/run``. So the job stage,
the history, the ledger, the alerts and every view know the job by its tenant, and nodes of two
tenants never make one job. The names of a node of no tenant stay as they are, unless they would
fall in a tenant's scope (``acme:...``) or begin with ``:``; those get a ``:`` in front, so no
name of one tenant is ever another's. Without ``[tenants]`` nothing is rewritten.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.core.detector.gate import job_id
from nodeagent.core.settings.tables import check_table
from nodeagent.core.transport.channel import read_token
from nodeagent.v1 import nodeagent_pb2 as pb

# A tenant's name: no ':' (the scope's separator), short, safe in every output.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
SEPARATOR = ":"
_KEYS: dict[str, tuple[type, object]] = {"token_file": (str, ""), "nodes": (list, [])}


class TenantsConfigError(ValueError):
    """One line naming the file and the key."""


class TenantConflictError(ValueError):
    """The stream's token and certificate belong to different tenants."""


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    token_file: Path | None = None
    # Certificate names (node ids) of its nodes: globs.
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Tenants:
    tenants: tuple[Tenant, ...] = ()

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, source: str) -> Tenants:
        if not isinstance(raw, Mapping):
            raise TenantsConfigError(f"{source}: tenants: expected a table of tenants, got {raw!r}")
        out = []
        for name, table in raw.items():
            where = f"tenants.{name}"
            if not _NAME.match(name):
                raise TenantsConfigError(
                    f"{source}: {where}: a tenant's name is letters, digits, '_', '.' or '-' (at most 64), no ':'"
                )
            values = check_table(table, _KEYS, source=source, table=where, error=TenantsConfigError)
            nodes = values["nodes"]
            if not all(isinstance(n, str) and n for n in nodes):
                raise TenantsConfigError(f"{source}: {where}.nodes: expected certificate names (globs), got {nodes!r}")
            if not values["token_file"] and not nodes:
                raise TenantsConfigError(f"{source}: {where}: give token_file, nodes or both (its node credentials)")
            token_file = Path(values["token_file"]) if values["token_file"] else None
            out.append(Tenant(name, token_file, tuple(nodes)))
        return cls(tuple(out))

    def to_plain(self) -> dict[str, Any]:
        return {
            t.name: {"token_file": str(t.token_file) if t.token_file else "", "nodes": list(t.nodes)}
            for t in self.tenants
        }

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tenants)

    @property
    def token_files(self) -> tuple[Path, ...]:
        return tuple(t.token_file for t in self.tenants if t.token_file is not None)

    def read_tokens(self) -> dict[str, str]:
        """token -> tenant, read once at start (``ValueError`` for a file that is not one token,
        or a token two tenants share)."""
        out: dict[str, str] = {}
        for t in self.tenants:
            if t.token_file is None:
                continue
            token = read_token(t.token_file)
            if out.setdefault(token, t.name) != t.name:
                raise ValueError(f"tenants {out[token]} and {t.name} hold the same token: each needs its own")
        return out

    def certificate_tenant(self, node_id: str) -> str:
        """The tenant whose ``nodes`` match a node id its certificate names ("" for none)."""
        return next((t.name for t in self.tenants if any(fnmatch.fnmatchcase(node_id, g) for g in t.nodes)), "")


def stream_tenant(tenants: Tenants, token_tenant: str, node_id: str, *, mutual: bool) -> str:
    """The tenant of a stream whose token belongs to ``token_tenant`` ("" none) and, with mutual TLS,
    whose certificate names ``node_id``; ``TenantConflictError`` when they name two tenants."""
    by_certificate = tenants.certificate_tenant(node_id) if mutual else ""
    if token_tenant and by_certificate and token_tenant != by_certificate:
        raise TenantConflictError(
            f"the bearer token is tenant {token_tenant}'s, the certificate of {node_id!r} tenant {by_certificate}'s"
        )
    return token_tenant or by_certificate


class Scope:
    """The names of one tenant's jobs (``tenant`` "": of no tenant) as the collector knows them."""

    __slots__ = ("_prefixes", "tenant")

    def __init__(self, tenants: Tenants, tenant: str) -> None:
        self.tenant = tenant
        self._prefixes = tuple(f"{name}{SEPARATOR}" for name in sorted(tenants.names))

    def name(self, name: str) -> str:
        if not name:
            return name
        if self.tenant:
            return f"{self.tenant}{SEPARATOR}{name}"
        if name.startswith((SEPARATOR, *self._prefixes)):
            return SEPARATOR + name  # out of every tenant's scope
        return name

    def report(self, report: pb.NodeReport) -> None:
        """Scope, in place, every name the report gives a job: each ``JobSample.job`` and, on every
        process, the ``JobRef`` field that names its job (``job_id``)."""
        for sample in report.jobs:
            sample.job = self.name(sample.job)
        for gpu in report.gpus:
            for process in (*gpu.processes, *(p for i in gpu.mig_instances for p in i.processes)):
                _scope_ref(process.job, self)


def tenant_of(name: str, tenants: frozenset[str]) -> str:
    """The tenant of a scoped job name ("" for a job of no tenant)."""
    tenant, sep, _rest = name.partition(SEPARATOR)
    return tenant if sep and tenant in tenants else ""


def _scope_ref(ref: pb.JobRef, scope: Scope) -> None:
    name = job_id(ref)
    if not name:
        return
    for field in ("job_key", "slurm_job_id", "k8s_pod_uid", "container_id"):
        if getattr(ref, field) == name:
            setattr(ref, field, scope.name(name))
            return


def raw_key(name: str, tenants: frozenset[str]) -> str:
    """The key a scoped job name was given by its nodes (its tenant's scope, or the escape, taken
    off): what routes a job to its owner, so that the jobs of every tenant with one key meet there."""
    tenant = tenant_of(name, tenants)
    if tenant:
        return name[len(tenant) + 1 :]
    return name[1:] if tenants and name.startswith(SEPARATOR) else name
