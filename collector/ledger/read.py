"""``Query.Ledger`` on a reader thread: the history's split summed per job, node, the fleet, or the
jobs' Slurm account or Kubernetes namespace (as their nodes named them, ``history/owners.py``;
"" for the jobs without one), and priced.

The store gives each node's held GPU time grouped by (jobs, nodes waited on), from its hours
summed in ``history_ledger`` and its minutes for the rest (``store/ledger_tables.py``), as SQLite
yields the groups; they are folded here into one total per answer row (a job, a node, the
fleet): a GPU shared by n jobs counts 1/n to each, each node's hours priced at that node's price
(``prices.py``), and the hours a job's GPUs waited are put on the nodes they waited on (its
stragglers). The `unmeasured` hours (``history/split.py``) are neither computing nor lost: their own hours
and cost (``gpu_hours_unmeasured``, ``cost_unmeasured``), the upper end of the money lost. With
``[tenants]`` a job's name carries its nodes' tenant (``collector/tenants.py``), and so does its
account or namespace: ``acme:research``, billed within tenant acme only (a job of acme without one:
``acme:``). An answer of more rows than the bound's, or larger than one message, is refused with a
line that says to ask for less; the read is within the query bounds' time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from nodeagent.collector.history import split
from nodeagent.collector.history.minutes import MINUTE_SECONDS
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.store.job_lists import jobs_of
from nodeagent.collector.store.reader import ReadContext
from nodeagent.collector.tenants import SEPARATOR, Scope, Tenants, tenant_of
from nodeagent.core.transport.refused import QueryRefusedError
from nodeagent.v1 import nodeagent_pb2 as pb

BY = ("job", "node", "fleet", "account", "namespace")
# The rows made of jobs: a job's own, or the jobs billed to one Slurm account or Kubernetes namespace.
_OF_JOBS = ("job", "account", "namespace")
DEFAULT_LEDGER_SECONDS = 30 * 86400.0
FLEET = "fleet"
_WAITING = split.INDEX["waiting"]
_UNMEASURED = split.INDEX["unmeasured"]


@dataclass
class _Total:
    seconds: list[float] = field(default_factory=split.empty)
    cost: float = 0.0
    cost_lost: float = 0.0
    cost_unmeasured: float = 0.0
    first: float = float("inf")
    last: float = 0.0
    nodes: set[str] = field(default_factory=set)
    waited_on: dict[str, float] = field(default_factory=dict)
    gpu_model: str = ""
    jobs: set[str] = field(default_factory=set)

    def add(self, parts: list[float], price: float, first: float, last: float) -> None:
        for i, value in enumerate(parts):
            self.seconds[i] += value
        held = sum(parts)
        self.cost += held / 3600 * price
        self.cost_lost += (held - parts[0] - parts[_UNMEASURED]) / 3600 * price
        self.cost_unmeasured += parts[_UNMEASURED] / 3600 * price
        self.first = min(self.first, first)
        self.last = max(self.last, last + MINUTE_SECONDS)


def ledger_answer(
    reads: ReadContext, request: pb.LedgerRequest, prices: Prices, max_rows: int, max_bytes: int,
    tenants: Tenants | None = None,
) -> pb.LedgerResponse:  # fmt: skip
    """The ledger's rows, the most money lost first."""
    models = gpu_models(reads.node_infos())
    by = request.by or "job"
    until = request.until_unix_seconds or None
    totals: dict[str, _Total] = {}
    owner = reads.history.ledger.owners()
    owner_of = {"account": 0, "namespace": 1}.get(by)
    billed_to = _billed_to(owner, owner_of, tenants or Tenants())
    groups = reads.history.ledger.groups(request.since_unix_seconds, until, check=reads.check)
    try:
        for group in groups:
            if len(totals) > max_rows:
                raise QueryRefusedError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"more than {max_rows} rows (jobs or nodes) in the history asked for: ask a shorter --since",
                )
            _add_group(totals, group, by, models, prices, billed_to)
    finally:
        groups.close()  # the read ends here, not when the generator is collected
    return _ledger_rows(totals, by, prices, owner, max_bytes)


def _add_group(
    totals: dict[str, _Total], group: tuple[Any, ...], by: str, models: Mapping[str, str], prices: Prices,
    billed_to: Callable[[str], str],
) -> None:  # fmt: skip
    """One group of a node's held GPU time (its jobs, the nodes they waited on) added to the rows
    it counts in: its node's or the fleet's, else each of its jobs' (a share each)."""
    keys = group[:3]  # jobs, node, nodes waited on
    parts = [float(v) for v in group[3 : 3 + len(split.COLUMNS)]]
    first, last = float(group[-2]), float(group[-1])
    node_id = str(keys[1])
    model = models.get(node_id, "")
    price = prices.per_gpu_hour(node_id, model)
    if by not in _OF_JOBS:
        total = totals.setdefault(FLEET if by == "fleet" else node_id, _Total())
        total.add(parts, price, first, last)
        total.nodes.add(node_id)
        total.gpu_model = model if by == "node" else ""
        return
    names = jobs_of(str(keys[0]))
    waited_on = [n for n in str(keys[2]).split(",") if n]
    for name in names:
        share = [v / len(names) for v in parts]
        total = totals.setdefault(billed_to(name), _Total())
        total.add(share, price, first, last)
        total.nodes.add(node_id)
        total.jobs.add(name)
        for straggler in waited_on:
            total.waited_on[straggler] = total.waited_on.get(straggler, 0.0) + share[_WAITING] / len(waited_on)


def _ledger_rows(
    totals: Mapping[str, _Total], by: str, prices: Prices, owner: Callable[[str], tuple[str, str]], max_bytes: int
) -> pb.LedgerResponse:
    """The rows that held GPU time, the most money lost first; refused past ``max_bytes``."""
    response = pb.LedgerResponse()
    held = {key: total for key, total in totals.items() if sum(total.seconds) > 0}  # a node with no GPU held none
    for key in sorted(held, key=lambda k: (-held[k].cost_lost, -split.lost_seconds(held[k].seconds), k)):
        # No [prices]: no currency, and the ledger leaves its money out rather than print 0.00.
        row = ledger_row(key, held[key], prices.currency if prices.configured else "", with_nodes=by in _OF_JOBS)
        if by == "job":
            row.account, row.namespace = owner(key)
        elif by in _OF_JOBS:
            row.jobs.extend(sorted(held[key].jobs))
        response.rows.append(row)
    if response.ByteSize() > max_bytes:
        raise QueryRefusedError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{len(totals)} rows are more than one message holds ({max_bytes} bytes): ask a shorter --since",
        )
    return response


def _billed_to(owner: Callable[[str], tuple[str, str]], owner_of: int | None, tenants: Tenants) -> Callable[[str], str]:
    """A job's row key: its name, or its account or namespace within its tenant (scoped as its name is)."""
    if owner_of is None:
        return lambda name: name
    names = tenants.names
    if not names:
        return lambda name: owner(name)[owner_of]
    scopes = {t: Scope(tenants, t) for t in ("", *names)}

    def billed(name: str) -> str:
        tenant = tenant_of(name, names)
        claimed = owner(name)[owner_of]
        return scopes[tenant].name(claimed) if claimed else (f"{tenant}{SEPARATOR}" if tenant else "")

    return billed


def ledger_row(key: str, total: _Total, currency: str, *, with_nodes: bool) -> pb.LedgerRow:
    seconds = total.seconds
    row = pb.LedgerRow(
        key=key, gpu_hours_held=sum(seconds) / 3600, gpu_hours_computing=seconds[0] / 3600, cost=total.cost,
        cost_lost=total.cost_lost, currency=currency, gpu_model=total.gpu_model,
        first_unix_seconds=total.first if total.first < float("inf") else 0.0, last_unix_seconds=total.last,
        gpu_hours_unmeasured=seconds[_UNMEASURED] / 3600, cost_unmeasured=total.cost_unmeasured,
    )  # fmt: skip
    for name, value in zip(split.LOST_CATEGORIES, seconds[1 : 1 + len(split.LOST_CATEGORIES)], strict=True):
        if value > 0:
            row.gpu_hours_lost[name] = value / 3600
    if with_nodes:
        row.nodes.extend(sorted(total.nodes))
    for node_id, waited in sorted(total.waited_on.items(), key=lambda item: (-item[1], item[0])):
        if waited > 0:
            row.stragglers.add(node_id=node_id, gpu_hours_waited=waited / 3600)
    return row


def gpu_models(infos: Mapping[str, bytes]) -> dict[str, str]:
    """Each node's GPU model, as its hello named its first GPU ("" when none or unreadable)."""
    out = {}
    for node_id, info in infos.items():
        try:
            gpus = pb.NodeInfo.FromString(info).gpu.gpus
        except DecodeError:  # a row that does not parse is priced by its name alone
            continue
        if gpus:
            out[node_id] = gpus[0].name
    return out
