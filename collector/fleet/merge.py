"""Several shards' answers made into one, as one collector would give them.

The Query streams' items (CONTRACTS "Merged views"; the ranks and orders are ``winning_copy.py``'s)
are merged one key at a time as ``stream_merge.py`` meets them (``one_key``): a node's copies by
freshness, the freshest ``last_seen`` winning and the shards that still hold an older copy listed
in ``stale_shards`` (a node that moved leaves its old row behind until it is retired there); an
alert's firing over resolved, then the newest; a job's verdict the one judged over most nodes,
then the newest; a job's totals summed; history rows all kept.

Of several copies of one key the winner is picked in one place, ``pick_winners`` (and
``pick_winner`` for one key), for these streams and for the fleet page's JSON
(``page_merge.py``): a copy wins by its greater rank, an equal rank going to the shard first by
name (``winning_copy.wins``), so that the winner never depends on which shard answered first.
The copies that lose are kept beside the winner: a node's stale shards are named from them, and
the fleet page takes them out of its counts.

The ledger (a unary answer) merges its rows by key, summed. Every merged item names its shard
(``shard``), and every answer lists every shard asked (``shards``), answered or not.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from nodeagent.collector.alerts.alert import record_alert
from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.winning_copy import node_rank, record_job_rank, stale_shards, wins
from nodeagent.collector.views.ledger_page import LedgerUnavailableError
from nodeagent.v1 import nodeagent_pb2 as pb

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
M = TypeVar("M", bound=Message)
# The copies of one key: (shard, item), one per shard that holds it.
Copies = Sequence[tuple[str, Any]]


def one_key(method: str, copies: Copies) -> list[Message]:
    """The copies of one key in ``method``'s stream (StreamNodes, StreamAlerts, StreamJobs,
    StreamJobTotals, StreamHistory) made what the merged stream sends for it."""
    return _ONE_KEY[method](copies)


def shard_answers(answers: Sequence[Answer]) -> list[pb.ShardAnswer]:
    return [pb.ShardAnswer(shard=a.shard, answered=not a.error, error=a.error) for a in answers]


@dataclass(slots=True)
class Pick(Generic[T]):
    """The winning copy of one key, its shard and rank, and the copies it beat (shard, item)."""

    shard: str
    item: T
    rank: Any
    losers: list[tuple[str, T]] = field(default_factory=list)

    def offer(self, shard: str, item: T, rank: Any) -> None:
        """Another copy of the key: it replaces the winner when it ranks first."""
        if wins(rank, shard, self.rank, self.shard):
            self.losers.append((self.shard, self.item))
            self.shard, self.item, self.rank = shard, item, rank
        else:
            self.losers.append((shard, item))


def pick_winners(copies: Iterable[tuple[str, T]], key: Callable[[T], K], rank: Callable[[T], Any]) -> dict[K, Pick[T]]:
    """The winner of each key among ``copies`` (shard, item), the keys in the order first seen."""
    picks: dict[K, Pick[T]] = {}
    for shard, item in copies:
        k = key(item)
        held = picks.get(k)
        if held is None:
            picks[k] = Pick(shard, item, rank(item))
        else:
            held.offer(shard, item, rank(item))
    return picks


def pick_winner(copies: Iterable[tuple[str, T]], rank: Callable[[T], Any]) -> Pick[T]:
    """The winner among ``copies`` of one item (at least one)."""
    (pick,) = pick_winners(copies, lambda _item: 0, rank).values()
    return pick


def one_node(copies: Sequence[tuple[str, pb.NodeSummary]]) -> list[pb.NodeSummary]:
    won = pick_winner(copies, lambda n: node_rank(n.last_seen_unix_seconds))
    node = _tagged(won.item, won.shard)
    del node.stale_shards[:]
    node.stale_shards.extend(stale_shards(won.shard, [shard for shard, _node in won.losers]))
    return [node]


def one_alert(copies: Sequence[tuple[str, pb.AlertRecord]]) -> list[pb.AlertRecord]:
    won = pick_winner(copies, lambda a: record_alert(a).rank)
    return [_tagged(won.item, won.shard)]


def one_job(copies: Sequence[tuple[str, pb.JobVerdict]]) -> list[pb.JobVerdict]:
    won = pick_winner(copies, record_job_rank)
    return [_tagged(won.item, won.shard)]


def one_job_total(copies: Sequence[tuple[str, pb.JobTotal]]) -> list[pb.JobTotal]:
    """A job's totals summed over the shards that hold minutes of it; its nodes joined."""
    first = copies[0][1]
    total = pb.JobTotal(
        job=first.job, first_unix_seconds=first.first_unix_seconds, last_unix_seconds=first.last_unix_seconds
    )
    nodes: set[str] = set()
    for _shard, job in copies:
        total.gpu_hours += job.gpu_hours
        total.gpu_hours_lost += job.gpu_hours_lost
        total.gpu_hours_unmeasured += job.gpu_hours_unmeasured
        for cause, hours in job.gpu_hours_lost_by_cause.items():
            total.gpu_hours_lost_by_cause[cause] = total.gpu_hours_lost_by_cause.get(cause, 0.0) + hours
        total.first_unix_seconds = min(total.first_unix_seconds, job.first_unix_seconds)
        total.last_unix_seconds = max(total.last_unix_seconds, job.last_unix_seconds)
        nodes.update(job.nodes)
    total.nodes.extend(sorted(nodes))
    return [total]


def every_row(copies: Sequence[tuple[str, pb.HistoryRow]]) -> list[pb.HistoryRow]:
    """History rows: a node's minute on two shards (it moved between them) is kept from each."""
    return [row for _shard, row in copies]


def merge_ledger(answers: Sequence[Answer]) -> pb.LedgerResponse:
    """Rows by key (a job, a node, the fleet, an account, a namespace) summed over the shards: hours
    by category, costs, the hours waited on each straggler; nodes and jobs joined. Shards that price
    in other currencies make the row's currency their codes joined by "+" (its costs then add
    unlike units, said so)."""
    rows: dict[str, pb.LedgerRow] = {}
    waited: dict[str, dict[str, float]] = {}
    nodes: dict[str, set[str]] = {}
    jobs: dict[str, set[str]] = {}
    for reply in _answered(answers):
        for row in reply.rows:
            total = rows.get(row.key)
            if total is None:
                total = rows[row.key] = pb.LedgerRow(
                    key=row.key, currency=row.currency, first_unix_seconds=row.first_unix_seconds,
                    last_unix_seconds=row.last_unix_seconds,
                )  # fmt: skip
            total.gpu_hours_held += row.gpu_hours_held
            total.gpu_hours_computing += row.gpu_hours_computing
            for category, hours in row.gpu_hours_lost.items():
                total.gpu_hours_lost[category] = total.gpu_hours_lost.get(category, 0.0) + hours
            total.cost += row.cost
            total.cost_lost += row.cost_lost
            total.gpu_hours_unmeasured += row.gpu_hours_unmeasured
            total.cost_unmeasured += row.cost_unmeasured
            # A live prediction is the one shard's that judges the job or holds the node: summed, others unset.
            if row.HasField("worth_gpu_hours_per_day"):
                total.worth_gpu_hours_per_day = total.worth_gpu_hours_per_day + row.worth_gpu_hours_per_day
            if row.HasField("worth_money_per_day"):
                total.worth_money_per_day = total.worth_money_per_day + row.worth_money_per_day
            if row.currency and row.currency not in total.currency.split("+"):  # "": that shard set no prices
                total.currency = "+".join(sorted({*total.currency.split("+"), row.currency} - {""}))
            total.gpu_model = total.gpu_model or row.gpu_model
            total.first_unix_seconds = min(total.first_unix_seconds, row.first_unix_seconds)
            total.last_unix_seconds = max(total.last_unix_seconds, row.last_unix_seconds)
            for straggler in row.stragglers:
                by_node = waited.setdefault(row.key, {})
                by_node[straggler.node_id] = by_node.get(straggler.node_id, 0.0) + straggler.gpu_hours_waited
            nodes.setdefault(row.key, set()).update(row.nodes)
            jobs.setdefault(row.key, set()).update(row.jobs)
            total.account, total.namespace = total.account or row.account, total.namespace or row.namespace
    response = pb.LedgerResponse(shards=shard_answers(answers))
    for key in sorted(rows, key=lambda k: (-rows[k].cost_lost, -sum(rows[k].gpu_hours_lost.values()), k)):
        row = rows[key]
        row.nodes.extend(sorted(nodes[key]))
        row.jobs.extend(sorted(jobs[key]))
        for node_id, hours in sorted(waited.get(key, {}).items(), key=lambda item: (-item[1], item[0])):
            row.stragglers.add(node_id=node_id, gpu_hours_waited=hours)
        response.rows.append(row)
    return response


def merged_ledger(answers: Sequence[Answer]) -> pb.LedgerResponse:
    """The ledger rows of the shards that answered, merged; ``LedgerUnavailableError`` with the
    first shard's reason when none did (a page has nothing to show)."""
    if answers and all(a.error for a in answers):
        raise LedgerUnavailableError(f"no answer: {answers[0].shard}: {answers[0].error}")
    return merge_ledger(answers)


def _tagged(item: M, shard: str) -> M:
    """A copy of ``item`` that names its shard (the shard's own message is left as it is)."""
    copy: Any = type(item)()
    copy.CopyFrom(item)
    copy.shard = shard
    return copy  # type: ignore[no-any-return]


def _answered(answers: Sequence[Answer]) -> list[pb.LedgerResponse]:
    return [a.reply for a in answers if not a.error and isinstance(a.reply, pb.LedgerResponse)]


_ONE_KEY: dict[str, Callable[[Copies], list[Any]]] = {
    "StreamNodes": one_node,
    "StreamAlerts": one_alert,
    "StreamJobs": one_job,
    "StreamJobTotals": one_job_total,
    "StreamHistory": every_row,
}
