"""The ``Query`` service of ``nodeagent.v1``: what the collector knows, served from memory, to operators only.

``StreamNodes`` and ``StreamJobs`` answer from memory (each node's row and verdict; the job
roll-up's snapshot of verdicts, ``Ingest.jobs``) without touching SQLite or taking a query slot.
Every answer that can be long is streamed in pages (``fleet/answer_pages.py``), each write within
the stream's time bound (``bounds.BoundedStream``).

Reports name processes, users and jobs: a node's credentials do not read them (see
``nodeagent.core.transport.security``).

History and jobs are read from the store by ``StoreReader``, never on the writer's thread: the
flush's commit gates every acknowledgement. Each reading query takes a slot (``bounds.InFlight``:
per caller and in all), its store time is bounded (``QueryBounds.read_seconds``) and so are its
rows; the merging and the totals run on the reader's thread, not on the event loop.

``Page`` answers what the HTTP listener would (``/metrics``, the fleet page's JSON), on a thread.
A call that carries ``LOCAL_HEADER`` (``collector/fleet/fanout.py``) is answered with this
collector's own nodes; without it, a collector with ``[fleet] collectors`` merges the others'
pages into its own, as its fleet page does. The other methods always answer with this
collector's own: the query commands merge several collectors themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc
from google.protobuf.message import Message

from nodeagent.collector.fleet.answer_pages import KINDS, page_bytes, pages_of
from nodeagent.collector.fleet.fanout import UNIX_MESSAGE_BYTES, is_local_call
from nodeagent.collector.fleet.fleet_pages import FleetPages
from nodeagent.collector.history.minutes import MINUTE_SECONDS
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.retire import RetireRefusedError
from nodeagent.collector.ingest.shown_state import down_after_seconds, is_silent, node_shown_state
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import BY, ledger_answer
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.collector.payoff.worth import gpu_models, job_worth, node_worth
from nodeagent.collector.query.bounds import BoundedStream, InFlight, QueryBounds, authorize_operator, query_slot
from nodeagent.collector.query.history_pages import PAGE_ROWS, HistoryPages
from nodeagent.collector.query.jobs import job_totals
from nodeagent.collector.query.worker_port import refuse_unless_front
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.collector.store.reader import ReadContext, ReadDeadlineError, StoreReader
from nodeagent.collector.tenants import Tenants
from nodeagent.collector.views.local_pages import LocalPages
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.transport.refused import QueryRefusedError
from nodeagent.core.transport.security import AccessPolicy
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

T = TypeVar("T")
P = ParamSpec("P")
# What one message may take of the message limit (the response's own framing).
_ANSWER_MARGIN_BYTES = 64
# A streamed answer is cut into pages: the whole of it is bounded by rows, not bytes.
UNBOUNDED_ANSWER_BYTES = 1 << 62


class QueryService(pb_grpc.QueryServicer):
    def __init__(
        self, ingest: Ingest, policy: AccessPolicy, reader: StoreReader, *,
        bounds: QueryBounds | None = None, max_message_bytes: int = 1024 * 1024, pages: LocalPages | None = None,
        prices: Prices | None = None, tenants: Tenants | None = None, payoff: PayoffConfig | None = None,
        fleet_pages: FleetPages | None = None, worker_index: int | None = None, front_listen: str | None = None,
    ) -> None:  # fmt: skip
        self.ingest = ingest
        self.prices = prices or Prices()
        self.payoff = payoff or PayoffConfig()
        self.tenants = tenants or Tenants()
        self.policy = policy
        self.reader = reader
        self.bounds = bounds or QueryBounds()
        self.in_flight = InFlight(self.bounds)
        self.max_answer_bytes = max_message_bytes - _ANSWER_MARGIN_BYTES
        self.pages = pages
        self.fleet_pages = fleet_pages
        # Behind a front: this worker's index and the front's --listen (queries are the front's).
        self.worker_index = worker_index
        self.front_listen = front_listen

    async def StreamNodes(self, request: pb.ListNodesRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Every node's row, in pages by node id (``fleet/answer_pages.py``)."""
        await self._authorize(context)
        await self._send_pages(context, "StreamNodes", self._node_summaries())

    def _node_summaries(self) -> list[pb.NodeSummary]:
        summaries = []
        now, window = self.ingest.clock(), self.ingest.detector_config.window_seconds
        down = down_after_seconds(self.ingest)
        # A store that cannot commit freezes every node's totals and last seen: each row says why.
        store_failing_seconds, store_error = self.ingest.flusher.failing_store() or (0.0, "")
        for node_id in sorted(self.ingest.nodes):
            node = self.ingest.nodes[node_id]
            # Totals as committed: the in-memory row counts reports that may not be durable yet.
            row = node.committed or NodeRow(node_id=node_id)
            live = node.row
            summary = pb.NodeSummary(
                node_id=row.node_id, hostname=live.hostname, agent_version=live.agent_version,
                reports_total=row.reports_total, duplicates_total=row.duplicates_total,
                first_seen_unix_seconds=row.first_seen, last_seen_unix_seconds=row.last_seen,
                epoch=row.epoch, last_seq=row.last_seq, connected=node.stream is not None,
                gpu_count=live.gpu_count, spool_dropped_reports_total=row.spool_dropped_total,
                gap_reports_total=row.gap_reports_total, clock_skew_seconds=node.clock_skew_seconds,
                clock_refused_reports_total=node.clock_refused_total,
                store_error=store_error, store_failing_seconds=store_failing_seconds,
            )  # fmt: skip
            summary.state = node_shown_state(node, now, down)
            summary.window_seconds = window
            detector = node.detector
            # Today's, the ledger's split (the detector's count without a history): as the page's.
            summary.gpu_seconds_lost = node.lost_today_seconds(now)
            if detector is not None:
                summary.window_seen_seconds = detector.seen_seconds
                if not is_silent(node, now, down) and not node.stopped:  # a down node's verdict is of the past
                    _verdict_into(summary, detector.verdict)
                    fixed = node_worth(
                        detector.verdict, detector.evidence.values, node.topology, self.prices, self.payoff
                    )
                    if fixed is not None:
                        summary.if_fixed.CopyFrom(fixed.to_proto())
            summaries.append(summary)
        return summaries

    async def StreamJobs(self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Every multi-node job's live verdict, from the roll-up's snapshot (replaced whole, so read
        as it is), in pages by job: however many jobs the roll-up follows."""
        await self._authorize(context)
        await self._send_pages(context, "StreamJobs", [self._job_message(v) for v in self.ingest.jobs.verdicts()])

    async def StreamAlerts(self, request: pb.ListAlertsRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """The alert book's alerts (firing, and recently resolved when asked), in pages by (name,
        node, key)."""
        await self._authorize(context)
        await self._send_pages(context, "StreamAlerts", await self._alert_records(request, context))

    async def _alert_records(
        self, request: pb.ListAlertsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> list[pb.AlertRecord]:
        writer = self.ingest.writer
        async with query_slot(
            self.in_flight, self.policy, context
        ):  # the alert book is the writer's: bounded, not moved
            alerts = await writer.call(self.ingest.alerting.recent, request.include_resolved)
        records = []
        for alert in alerts:
            record = pb.AlertRecord(
                name=alert.name, node_id=alert.node_id, key=alert.key, severity=alert.severity,
                starts_at_unix_seconds=alert.starts_at,
            )  # fmt: skip
            record.labels.update(alert.labels)
            record.annotations.update(alert.annotations)
            if alert.ends_at is not None:
                record.ends_at_unix_seconds = alert.ends_at
            records.append(record)
        return records

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

    async def StreamHistory(
        self, request: pb.HistoryRequest, context: grpc.aio.ServicerContext[pb.HistoryRequest, pb.HistoryResponse]
    ) -> None:
        """A node's history in pages, each read from the store as the one before it is sent."""
        await self._authorize(context)
        await _check_step(request, context)
        async with query_slot(self.in_flight, self.policy, context):
            pages = HistoryPages(request)
            stream = BoundedStream(context, self.bounds.stream_seconds)
            size = page_bytes(self._answer_bytes(context))  # under a lower --max-message-bytes too
            while (page := await self._read(context, pages.next_page, PAGE_ROWS, size)) is not None:
                await stream.write(page)

    async def Ledger(self, request: pb.LedgerRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.LedgerResponse:
        """The history's split per job, node or the fleet over [since, until), priced (``ledger/read.py``)."""
        await self._authorize(context)
        if request.by and request.by not in BY:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"by: expected one of {', '.join(BY)}")
        async with query_slot(self.in_flight, self.policy, context):
            answer = await self._read(
                context,
                ledger_answer,
                request,
                self.prices,
                self.bounds.max_rows,
                self._answer_bytes(context),
                self.tenants,
            )
        self._worth_into(answer, request.by or "job")
        return answer

    def _worth_into(self, answer: pb.LedgerResponse, by: str) -> None:
        """By job or node: each row's "worth fixing", what lifting its live bottleneck would save a
        day (the live predictions: a job this process judges, a node starved here now)."""
        if by not in ("job", "node"):
            return
        now, down = self.ingest.clock(), down_after_seconds(self.ingest)
        for row in answer.rows:
            fixed = None
            if by == "job":
                verdict = self.ingest.jobs.verdict(row.key)
                if verdict is not None:
                    models = gpu_models(self.ingest.nodes, verdict.nodes)
                    fixed = job_worth(verdict.if_fixed, verdict.gpus, models, self.prices, self.payoff)
            else:
                node = self.ingest.nodes.get(row.key)
                detector = node.detector if node is not None else None
                if node is not None and detector is not None and not is_silent(node, now, down) and not node.stopped:
                    fixed = node_worth(
                        detector.verdict, detector.evidence.values, node.topology, self.prices, self.payoff
                    )
            if fixed is not None and fixed.gpu_hours_per_day is not None:
                row.worth_gpu_hours_per_day = fixed.gpu_hours_per_day
                if fixed.money_per_day is not None:
                    row.worth_money_per_day = fixed.money_per_day

    async def StreamJobTotals(self, request: pb.JobsRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """The history's totals per job, in pages by job: as many jobs as the history's row bound
        allows."""
        await self._authorize(context)
        async with query_slot(self.in_flight, self.policy, context):
            totals = await self._read(context, job_totals, request, self.bounds.max_rows)
        await self._send_pages(context, "StreamJobTotals", totals.jobs)

    async def _send_pages(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str, items: Sequence[Message]
    ) -> None:
        """``items`` in pages under the message limit, each write within the stream's time bound."""
        stream = BoundedStream(context, self.bounds.stream_seconds)
        for page in pages_of(KINDS[method], items, page_bytes(self._answer_bytes(context))):
            await stream.write(page)

    async def _read(
        self, context: grpc.aio.ServicerContext[Any, Any], func: Callable[Concatenate[ReadContext, P], T],
        *args: P.args, **kwargs: P.kwargs,
    ) -> T:  # fmt: skip
        """``func`` on a reader thread within the query's time bound (or the client's deadline,
        when nearer); a bound passed, or a refusal, ends the call with its status."""
        remaining = context.time_remaining()
        seconds = self.bounds.read_seconds if remaining is None else min(self.bounds.read_seconds, remaining)
        try:
            return await self.reader.call(seconds, func, *args, **kwargs)
        except ReadDeadlineError as err:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the query {err} in the store: ask for less (a shorter range, a larger step, one GPU)",
            )
        except QueryRefusedError as refused:
            await context.abort(refused.code, refused.detail)
        raise AssertionError("abort returned")

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

    async def Page(
        self, request: pb.PageRequest, context: grpc.aio.ServicerContext[pb.PageRequest, pb.PageResponse]
    ) -> pb.PageResponse:
        """What the HTTP listener answers for ``path?query``: this collector's own with
        ``LOCAL_HEADER``, else merged with ``[fleet] collectors`` where those are set."""
        await self._authorize(context)
        if self.pages is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this collector serves no pages")
        assert self.pages is not None
        if self.fleet_pages is not None and not is_local_call(context.invocation_metadata()):
            reply = await self.fleet_pages.answer(request.path, request.query)
        else:
            reply = await asyncio.to_thread(self.pages.answer, request.path, request.query)
        if reply.ByteSize() > self._answer_bytes(context):
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the page {request.path[:64]!r} is more than one message holds ({self.max_answer_bytes} bytes): "
                "raise serve's --max-message-bytes",
            )
        return reply

    def _job_message(self, verdict: JobVerdict) -> pb.JobVerdict:
        """A job's verdict for the wire, its ``if_fixed`` at the ``[payoff]`` target and priced."""
        message = verdict.to_proto()
        if verdict.if_fixed is not None:
            nodes = gpu_models(self.ingest.nodes, verdict.nodes)
            fixed = job_worth(verdict.if_fixed, verdict.gpus, nodes, self.prices, self.payoff)
            if fixed is not None:
                message.if_fixed.CopyFrom(fixed.to_proto())
        return message

    def _answer_bytes(self, context: grpc.aio.ServicerContext[Any, Any]) -> int:
        """The largest answer: one message of --max-message-bytes, or, to the front of this
        worker on its unix socket, what that socket carries (a worker's whole /metrics)."""
        if context.peer().startswith("unix:"):
            return UNIX_MESSAGE_BYTES - _ANSWER_MARGIN_BYTES
        return self.max_answer_bytes

    async def _authorize(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await authorize_operator(self.policy, context)
        await refuse_unless_front(context, self.worker_index, self.front_listen)


async def _check_step(request: pb.HistoryRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    if request.step_seconds % MINUTE_SECONDS:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {request.step_seconds} s is not whole minutes")


def _verdict_into(summary: pb.NodeSummary, verdict: NodeVerdict) -> None:
    summary.cause = verdict.cause or ""
    summary.tier = verdict.tier or ""
    summary.starved_gpus = ",".join(str(g.index) for g in verdict.starved_gpus)
    summary.jobs.extend(verdict.jobs)
    summary.waiting_on.extend(verdict.waiting_on)
    summary.waiting_job = verdict.waiting_job
    for key, value in verdict.evidence.items():
        summary.evidence[key] = value if isinstance(value, str) else f"{value:.6g}"
    if verdict.starvation_ratio is not None:
        summary.starvation_ratio = verdict.starvation_ratio
    if verdict.interconnect_ratio is not None:
        summary.interconnect_ratio = verdict.interconnect_ratio
    if verdict.needed_ingest_bytes_per_second is not None:
        summary.needed_ingest_bytes_per_second = verdict.needed_ingest_bytes_per_second
