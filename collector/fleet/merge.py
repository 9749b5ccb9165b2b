"""Several shards' answers to one Query method made into one answer, as one collector would give it.

The rules (CONTRACTS "Merged views"; the ranks and orders are ``fleet/winning_copy.py``'s): nodes by node id, the
freshest ``last_seen`` wins and the shards that still hold an older copy are listed in
``stale_shards`` (a node that moved leaves its old row behind until it is retired there); alerts by
(name, node, key), firing over resolved, then the newest; job verdicts by job, the one judged over
most nodes, then the newest; history's job totals by job, summed; ledger rows by key, summed;
history rows concatenated and sorted by (minute, GPU). Every answer names the shard of each item
(``shard``) and lists every shard asked (``fleet``), answered or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from nodeagent.collector.alerts.alert import alert_order, record_alert
from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.winning_copy import job_verdict_order, node_rank, record_job_rank, stale_shards, wins
from nodeagent.collector.views.ledger_page import LedgerUnavailableError
from nodeagent.v1 import nodeagent_pb2 as pb

M = TypeVar("M", bound=Message)


def merge(method: str, answers: Sequence[Answer]) -> Message:
    """One answer of ``method`` (ListNodes, ListAlerts, ListJobs, Jobs, Ledger, History or StreamHistory's
    pages) from the shards' answers; ``KeyError`` for another method."""
    return _MERGERS[method](answers)


def shard_answers(answers: Sequence[Answer]) -> list[pb.ShardAnswer]:
    return [pb.ShardAnswer(shard=a.shard, answered=not a.error, error=a.error) for a in answers]


def merge_nodes(answers: Sequence[Answer]) -> pb.ListNodesResponse:
    best: dict[str, pb.NodeSummary] = {}
    stale: dict[str, list[str]] = {}
    for answer, reply in _answered(answers, pb.ListNodesResponse):
        for node in reply.nodes:
            held = best.get(node.node_id)
            rank = node_rank(node.last_seen_unix_seconds)
            if held is None or wins(rank, answer.shard, node_rank(held.last_seen_unix_seconds), held.shard):
                if held is not None:
                    stale.setdefault(node.node_id, []).append(held.shard)
                copy = pb.NodeSummary()
                copy.CopyFrom(node)
                copy.shard = answer.shard
                del copy.stale_shards[:]
                best[node.node_id] = copy
            else:
                stale.setdefault(node.node_id, []).append(answer.shard)
    response = pb.ListNodesResponse(shards=shard_answers(answers))
    for node_id in sorted(best):
        node = best[node_id]
        node.stale_shards.extend(stale_shards(node.shard, stale.get(node_id, [])))
        response.nodes.append(node)
    return response


def merge_alerts(answers: Sequence[Answer]) -> pb.ListAlertsResponse:
    best: dict[tuple[str, str, str], pb.AlertRecord] = {}
    for answer, reply in _answered(answers, pb.ListAlertsResponse):
        for alert in reply.alerts:
            facts = record_alert(alert)
            held = best.get(facts.identity)
            if held is None or wins(facts.rank, answer.shard, record_alert(held).rank, held.shard):
                copy = pb.AlertRecord()
                copy.CopyFrom(alert)
                copy.shard = answer.shard
                best[facts.identity] = copy
    response = pb.ListAlertsResponse(shards=shard_answers(answers))
    # As the fleet page orders them: firing first, then the newest.
    response.alerts.extend(sorted(best.values(), key=alert_order))
    return response


def merge_list_jobs(answers: Sequence[Answer]) -> pb.ListJobsResponse:
    best: dict[str, pb.JobVerdict] = {}
    for answer, reply in _answered(answers, pb.ListJobsResponse):
        for job in reply.jobs:
            held = best.get(job.job)
            if held is None or wins(record_job_rank(job), answer.shard, record_job_rank(held), held.shard):
                copy = pb.JobVerdict()
                copy.CopyFrom(job)
                copy.shard = answer.shard
                best[job.job] = copy
    response = pb.ListJobsResponse(shards=shard_answers(answers))
    # As the service orders them: the jobs that lost most first.
    response.jobs.extend(sorted(best.values(), key=lambda v: job_verdict_order(v.gpu_seconds_lost, v.job)))
    return response


def merge_job_totals(answers: Sequence[Answer]) -> pb.JobsResponse:
    totals: dict[str, pb.JobTotal] = {}
    nodes: dict[str, set[str]] = {}
    for _answer, reply in _answered(answers, pb.JobsResponse):
        for job in reply.jobs:
            total = totals.get(job.job)
            if total is None:
                total = totals[job.job] = pb.JobTotal(
                    job=job.job, first_unix_seconds=job.first_unix_seconds, last_unix_seconds=job.last_unix_seconds
                )
            total.gpu_hours += job.gpu_hours
            total.gpu_hours_lost += job.gpu_hours_lost
            total.gpu_hours_unmeasured += job.gpu_hours_unmeasured
            for cause, hours in job.gpu_hours_lost_by_cause.items():
                total.gpu_hours_lost_by_cause[cause] = total.gpu_hours_lost_by_cause.get(cause, 0.0) + hours
            total.first_unix_seconds = min(total.first_unix_seconds, job.first_unix_seconds)
            total.last_unix_seconds = max(total.last_unix_seconds, job.last_unix_seconds)
            nodes.setdefault(job.job, set()).update(job.nodes)
    response = pb.JobsResponse(shards=shard_answers(answers))
    for name in sorted(totals, key=lambda n: (-totals[n].gpu_hours_lost, n)):
        totals[name].nodes.extend(sorted(nodes[name]))
        response.jobs.append(totals[name])
    return response


def merge_ledger(answers: Sequence[Answer]) -> pb.LedgerResponse:
    """Rows by key (a job, a node, the fleet, an account, a namespace) summed over the shards: hours
    by category, costs, the hours waited on each straggler; nodes and jobs joined. Shards that price
    in other currencies make the row's currency their codes joined by "+" (its costs then add
    unlike units, said so)."""
    rows: dict[str, pb.LedgerRow] = {}
    waited: dict[str, dict[str, float]] = {}
    nodes: dict[str, set[str]] = {}
    jobs: dict[str, set[str]] = {}
    for _answer, reply in _answered(answers, pb.LedgerResponse):
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


def merge_history(answers: Sequence[Answer]) -> pb.HistoryResponse:
    """A node's rows from every shard that holds some (one it moved from holds the minutes before
    the move), sorted by (minute, GPU); a streamed answer's pages are taken whole."""
    rows: list[pb.HistoryRow] = []
    for answer in answers:
        if answer.error:
            continue
        for page in _pages(answer):
            if isinstance(page, pb.HistoryResponse):
                rows.extend(page.rows)
    response = pb.HistoryResponse(shards=shard_answers(answers))
    response.rows.extend(sorted(rows, key=lambda r: (r.time_unix_seconds, r.gpu)))
    return response


def _pages(answer: Answer) -> list[Message]:
    pages = getattr(answer, "pages", None)
    if pages:
        return list(pages)
    return [answer.reply] if answer.reply is not None else []


def _answered(answers: Sequence[Answer], kind: type[M]) -> list[tuple[Answer, M]]:
    return [(a, a.reply) for a in answers if not a.error and isinstance(a.reply, kind)]


_MERGERS: dict[str, Callable[[Sequence[Answer]], Message]] = {
    "ListNodes": merge_nodes,
    "ListAlerts": merge_alerts,
    "ListJobs": merge_list_jobs,
    "Jobs": merge_job_totals,
    "Ledger": merge_ledger,
    "History": merge_history,
    "StreamHistory": merge_history,
}
