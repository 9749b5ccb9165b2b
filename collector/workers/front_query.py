"""The front's Query service: every call asked of every worker at once, the answers merged.

Operators only, as on a single collector (``authorize_operator``); the workers are asked on
their unix sockets (the front's calls). StreamNodes, StreamAlerts, StreamJobs, StreamJobTotals
and StreamHistory merge the workers' streams page by page (``fleet/stream_merge.py``, by the
rules of ``fleet/merge.py``): an answer of any size, a page per worker held at a time, and pages
under ``--max-message-bytes``; a worker that does not answer in time is named in the last page's
``shards`` and the merge goes on without it. Ledger merges the workers' rows by key
(``merge_ledger``). LatestReport and ForgetNode go to every worker: a node is on one, which
answers; the others do not hold it (NOT_FOUND). Page is the HTTP listener's merged page over gRPC.
"""

from __future__ import annotations

import contextlib
from typing import Any

import grpc
from google.protobuf.message import Message

from nodeagent.collector.fleet.answer_pages import KINDS, page_bytes
from nodeagent.collector.fleet.fanout import Answer, ShardClients
from nodeagent.collector.fleet.merge import merge_ledger
from nodeagent.collector.fleet.page_merge import merge_page
from nodeagent.collector.fleet.stream_merge import merged_pages
from nodeagent.collector.query.bounds import BoundedStream, InFlight, QueryBounds, authorize_operator, query_slot
from nodeagent.collector.service.server_config import DEFAULT_MAX_MESSAGE_BYTES
from nodeagent.core.transport.security import AccessPolicy
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

# How long the front waits for a worker (less when the caller's own deadline is nearer).
WORKER_TIMEOUT_SECONDS = 10.0

Context = grpc.aio.ServicerContext[Any, Any]


class FrontQueries(pb_grpc.QueryServicer):
    def __init__(
        self, policy: AccessPolicy, clients: ShardClients, bounds: QueryBounds, *,
        timeout: float = WORKER_TIMEOUT_SECONDS, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:  # fmt: skip
        self.policy = policy
        self.clients = clients
        self.timeout = timeout
        self.bounds = bounds
        self.page_bytes = page_bytes(max_message_bytes)
        # Each caller's share of the store queries, kept here: the workers see the front as one caller.
        self.in_flight = InFlight(bounds)

    async def Ledger(self, request: pb.LedgerRequest, context: Context) -> pb.LedgerResponse:
        """Every worker's rows, merged by key; within the caller's share of the store queries."""
        await authorize_operator(self.policy, context)
        async with query_slot(self.in_flight, self.policy, context):
            return merge_ledger(await self._ask("Ledger", request, context))

    async def StreamHistory(self, request: pb.HistoryRequest, context: Context) -> None:
        """Every worker's pages, merged as they come (a node's rows are on one worker, or on two
        when it moved between them)."""
        await self._streamed("StreamHistory", request, context, store=True)

    async def StreamNodes(self, request: pb.ListNodesRequest, context: Context) -> None:
        await self._streamed("StreamNodes", request, context)

    async def StreamAlerts(self, request: pb.ListAlertsRequest, context: Context) -> None:
        await self._streamed("StreamAlerts", request, context, store=True)

    async def StreamJobs(self, request: pb.ListJobsRequest, context: Context) -> None:
        await self._streamed("StreamJobs", request, context)

    async def StreamJobTotals(self, request: pb.JobsRequest, context: Context) -> None:
        await self._streamed("StreamJobTotals", request, context, store=True)

    async def LatestReport(self, request: pb.LatestReportRequest, context: Context) -> pb.NodeReport:
        return await self._one("LatestReport", request, context, f"no report from node {request.node_id[:64]!r}")  # type: ignore[return-value]

    async def ForgetNode(self, request: pb.ForgetNodeRequest, context: Context) -> pb.ForgetNodeResponse:
        return await self._one("ForgetNode", request, context, f"no node {request.node_id[:64]!r} here")  # type: ignore[return-value]

    async def Page(self, request: pb.PageRequest, context: Context) -> pb.PageResponse:
        await authorize_operator(self.policy, context)
        return merge_page(request.path, request.query, await self._ask("Page", request, context))

    # ---- helpers ----

    async def _streamed(self, method: str, request: Message, context: Context, *, store: bool = False) -> None:
        """The workers' streams merged page by page, each page written as it fills; the whole
        stream within the query bounds' ``stream_seconds`` (a caller that stops reading would
        hold every worker's stream open)."""
        await authorize_operator(self.policy, context)
        async with contextlib.AsyncExitStack() as slot:
            if store:
                await slot.enter_async_context(query_slot(self.in_flight, self.policy, context))
            stream = BoundedStream(context, self.bounds.stream_seconds)
            pages = merged_pages(self.clients, KINDS[method], request, self._timeout(context), self.page_bytes)
            try:
                async for page in pages:
                    await stream.write(page)
            finally:
                await pages.aclose()

    async def _one(self, method: str, request: Message, context: Context, not_found: str) -> Message:
        """The answer of the worker that holds the node; else the first refusal that is not NOT_FOUND."""
        await authorize_operator(self.policy, context)
        answers = await self._ask(method, request, context)
        for answer in answers:
            if answer.reply is not None:
                return answer.reply
        refusal = _first_refusal(answers)
        if refusal is not None:
            code, detail = refusal
            await context.abort(code, detail)
        await context.abort(grpc.StatusCode.NOT_FOUND, not_found)
        raise AssertionError("abort returned")

    async def _ask(self, method: str, request: Message, context: Context) -> list[Answer]:
        return await self.clients.ask_all(method, request, self._timeout(context))

    def _timeout(self, context: Context) -> float:
        remaining = context.time_remaining()
        return self.timeout if remaining is None else max(0.05, min(self.timeout, remaining - 0.05))


def _first_refusal(answers: list[Answer]) -> tuple[grpc.StatusCode, str] | None:
    """A worker's status other than NOT_FOUND (``CODE: detail`` in its error), e.g. a connected
    node's FAILED_PRECONDITION for ForgetNode; a worker that did not answer is UNAVAILABLE."""
    for answer in answers:
        name, _, detail = answer.error.partition(": ")
        if name == "NOT_FOUND":
            continue
        code = grpc.StatusCode.__members__.get(name, grpc.StatusCode.UNAVAILABLE)
        return code, f"{answer.shard}: {detail or answer.error}"
    return None
