"""``nodeagent.v1.Query``: what the collector knows, served from memory, to operators only.

Reports name processes, users and jobs: a node's credentials do not read them (see
``nodeagent.core.transport.security``)."""

from __future__ import annotations

from typing import Any

import grpc

from nodeagent.collector.history.minutes import MINUTE_SECONDS, MinuteRow, resample
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.retire import RetireRefusedError
from nodeagent.collector.store.history_tables import HistoryTables
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.transport.security import Access, AccessPolicy, certificate_names, presented_token
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc


class QueryService(pb_grpc.QueryServicer):
    def __init__(self, ingest: Ingest, policy: AccessPolicy) -> None:
        self.ingest = ingest
        self.policy = policy

    async def ListNodes(
        self, request: pb.ListNodesRequest, context: grpc.aio.ServicerContext[pb.ListNodesRequest, pb.ListNodesResponse]
    ) -> pb.ListNodesResponse:
        await self._authorize(context)
        response = pb.ListNodesResponse()
        for node_id in sorted(self.ingest.nodes):
            node = self.ingest.nodes[node_id]
            # Totals as committed: the in-memory row counts reports that may not be durable yet.
            row = node.committed or NodeRow(node_id=node_id)
            live = node.row
            response.nodes.add(
                node_id=row.node_id, hostname=live.hostname, agent_version=live.agent_version,
                reports_total=row.reports_total, duplicates_total=row.duplicates_total,
                first_seen_unix_seconds=row.first_seen, last_seen_unix_seconds=row.last_seen,
                epoch=row.epoch, last_seq=row.last_seq, connected=node.stream is not None,
                gpu_count=live.gpu_count, spool_dropped_reports_total=row.spool_dropped_total,
                gap_reports_total=row.gap_reports_total, clock_skew_seconds=node.clock_skew_seconds,
                clock_refused_reports_total=node.clock_refused_total,
            )  # fmt: skip
            if node.detector is not None:
                _verdict_into(response.nodes[-1], node.detector.verdict)
        return response

    async def ListAlerts(
        self,
        request: pb.ListAlertsRequest,
        context: grpc.aio.ServicerContext[pb.ListAlertsRequest, pb.ListAlertsResponse],
    ) -> pb.ListAlertsResponse:
        await self._authorize(context)
        writer = self.ingest.writer
        alerts = await writer.call(self.ingest.alerting.recent, request.include_resolved)
        response = pb.ListAlertsResponse()
        for alert in alerts:
            record = response.alerts.add(
                name=alert.name, node_id=alert.node_id, key=alert.key, severity=alert.severity,
                starts_at_unix_seconds=alert.starts_at,
            )  # fmt: skip
            record.labels.update(alert.labels)
            record.annotations.update(alert.annotations)
            if alert.ends_at is not None:
                record.ends_at_unix_seconds = alert.ends_at
        return response

    async def LatestReport(
        self, request: pb.LatestReportRequest, context: grpc.aio.ServicerContext[pb.LatestReportRequest, pb.NodeReport]
    ) -> pb.NodeReport:
        await self._authorize(context)
        node = self.ingest.nodes.get(request.node_id)
        if node is None or node.latest is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no report from node {request.node_id[:64]!r}")
        assert node is not None
        assert node.latest is not None
        return pb.NodeReport.FromString(node.latest)

    async def History(
        self, request: pb.HistoryRequest, context: grpc.aio.ServicerContext[pb.HistoryRequest, pb.HistoryResponse]
    ) -> pb.HistoryResponse:
        await self._authorize(context)
        if request.step_seconds % MINUTE_SECONDS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {request.step_seconds} s is not whole minutes")
        rows = await self.ingest.writer.call(history_rows, self.ingest.writer.store.history, request)
        response = pb.HistoryResponse()
        for row in rows:
            out = response.rows.add(
                time_unix_seconds=row.minute, gpu=row.gpu, samples=row.samples, state=row.state, cause=row.cause
            )
            out.values.update(row.values)
            out.jobs.extend(row.jobs)
        return response

    async def Jobs(
        self, request: pb.JobsRequest, context: grpc.aio.ServicerContext[pb.JobsRequest, pb.JobsResponse]
    ) -> pb.JobsResponse:
        await self._authorize(context)
        history = self.ingest.writer.store.history
        groups = await self.ingest.writer.call(history.job_minutes, request.last_seconds or 86400.0)
        totals: dict[str, pb.JobTotal] = {}
        nodes: dict[str, set[str]] = {}
        for jobs, cause, node_id, minutes, lost_seconds, first, last in groups:
            names = [j for j in jobs.split(",") if j]
            for name in names:
                total = totals.get(name)
                if total is None:
                    total = totals[name] = pb.JobTotal(job=name, first_unix_seconds=first, last_unix_seconds=last)
                share = 1.0 / len(names)
                total.gpu_hours += minutes * MINUTE_SECONDS / 3600 * share
                lost = lost_seconds / 3600 * share
                total.gpu_hours_lost += lost
                if lost:
                    key = cause or "unknown"
                    total.gpu_hours_lost_by_cause[key] = total.gpu_hours_lost_by_cause.get(key, 0.0) + lost
                total.first_unix_seconds = min(total.first_unix_seconds, first)
                total.last_unix_seconds = max(total.last_unix_seconds, last + MINUTE_SECONDS)
                nodes.setdefault(name, set()).add(node_id)
        response = pb.JobsResponse()
        for name in sorted(totals, key=lambda n: -totals[n].gpu_hours_lost):
            totals[name].nodes.extend(sorted(nodes[name]))
            response.jobs.append(totals[name])
        return response

    async def ForgetNode(
        self,
        request: pb.ForgetNodeRequest,
        context: grpc.aio.ServicerContext[pb.ForgetNodeRequest, pb.ForgetNodeResponse],
    ) -> pb.ForgetNodeResponse:
        """Retire a node now (``collector/ingest/retire.py``); a connected or unknown one is refused."""
        await self._authorize(context)
        try:
            deleted = await self.ingest.forget(request.node_id)
        except RetireRefusedError as refused:
            await context.abort(grpc.StatusCode[refused.code], refused.detail)
        return pb.ForgetNodeResponse(reports_deleted=deleted)

    async def _authorize(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await authorize_operator(self.policy, context)


_STATUS = {Access.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED, Access.DENIED: grpc.StatusCode.PERMISSION_DENIED}


async def authorize_operator(policy: AccessPolicy, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Abort the call unless the caller holds an operator credential."""
    names = certificate_names(context.auth_context()) if policy.enabled else frozenset()
    decision = policy.query(presented_token(context.invocation_metadata()), names)
    if decision.access is not Access.ALLOWED:
        await context.abort(_STATUS[decision.access], decision.detail)


def history_rows(history: HistoryTables, request: pb.HistoryRequest) -> list[MinuteRow]:
    """On the store's thread: the rows a ``HistoryRequest`` asks for."""
    since = request.since_unix_seconds
    if request.last_seconds > 0:
        newest = history.newest_minute(request.node_id)
        if newest is None:
            return []
        since = newest + MINUTE_SECONDS - request.last_seconds
    until = request.until_unix_seconds or None
    gpu = request.gpu if request.HasField("gpu") else None
    return resample(history.minutes(request.node_id, gpu, since, until), request.step_seconds)


def _verdict_into(summary: pb.NodeSummary, verdict: NodeVerdict) -> None:
    summary.state = verdict.state
    summary.cause = verdict.cause or ""
    summary.tier = verdict.tier or ""
    summary.gpu_seconds_lost = verdict.gpu_seconds_lost
    summary.starved_gpus = ",".join(str(g.index) for g in verdict.starved_gpus)
    summary.jobs.extend(verdict.jobs)
    for key, value in verdict.evidence.items():
        summary.evidence[key] = value if isinstance(value, str) else f"{value:.6g}"
    if verdict.starvation_ratio is not None:
        summary.starvation_ratio = verdict.starvation_ratio
    if verdict.interconnect_ratio is not None:
        summary.interconnect_ratio = verdict.interconnect_ratio
    if verdict.needed_ingest_bytes_per_second is not None:
        summary.needed_ingest_bytes_per_second = verdict.needed_ingest_bytes_per_second
