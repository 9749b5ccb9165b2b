"""What queries may take of a collector: how many run at once (per caller and in all), how long
a store read may run, how many rows one read may hold, which caller a call is, and whether it
holds an operator's credential (``authorize_operator``: the Query service's, a front's and the
JobRelay service's gate).

A caller over its share, or a collector at its cap, is answered ``RESOURCE_EXHAUSTED`` at once:
a query that waited instead would hold its client and its memory for nothing, and a flood of
them would pile up behind the readers. A streamed answer is written within its own time bound
(``BoundedStream``), on a collector and on a front alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from nodeagent.core.transport.refused import QueryRefusedError
from nodeagent.core.transport.security import Access, AccessPolicy, certificate_names, peer_source, presented_token

# Queries (StreamHistory, StreamJobTotals, StreamAlerts, Ledger) one caller may have running at once.
DEFAULT_MAX_QUERIES_PER_CALLER = 2
# ... and every caller together.
MAX_QUERIES_IN_FLIGHT = 8
# The most a query may spend reading the store (for a stream: each page).
QUERY_SECONDS = 10.0
# The most a streamed answer may take from its first page to its last, the client's reading included.
STREAM_SECONDS = 300.0
# Rows one read may gather before it answers (Jobs: groups of (job, cause, node)).
MAX_QUERY_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class QueryBounds:
    """The bounds above, as one collector holds them (``serve --max-queries-per-caller``; tests)."""

    max_per_caller: int = DEFAULT_MAX_QUERIES_PER_CALLER
    max_in_flight: int = MAX_QUERIES_IN_FLIGHT
    read_seconds: float = QUERY_SECONDS
    stream_seconds: float = STREAM_SECONDS
    max_rows: int = MAX_QUERY_ROWS


@dataclass(slots=True)
class InFlight:
    """Queries running now, by caller and in all."""

    bounds: QueryBounds
    by_caller: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def take(self, caller: str) -> None:
        """One more query of ``caller``; ``QueryRefusedError`` beyond its share or the cap."""
        held = self.by_caller.get(caller, 0)
        # A front (serve --workers N) asks on a unix socket for all its operators, each held to
        # their own share there: it may use the whole cap here.
        share = self.bounds.max_in_flight if caller.startswith("unix:") else self.bounds.max_per_caller
        if held >= share:
            raise QueryRefusedError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{caller} has {held} queries running, the limit (--max-queries-per-caller): retry when one is done",
            )
        if self.total >= self.bounds.max_in_flight:
            raise QueryRefusedError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the collector runs {self.total} queries, its limit: retry in a moment",
            )
        self.by_caller[caller] = held + 1
        self.total += 1

    def give_back(self, caller: str) -> None:
        self.total -= 1
        left = self.by_caller.get(caller, 1) - 1
        if left > 0:
            self.by_caller[caller] = left
        else:
            self.by_caller.pop(caller, None)


@contextlib.asynccontextmanager
async def query_slot(
    in_flight: InFlight, policy: AccessPolicy, context: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[None]:
    """Hold one of the caller's query slots while the block runs; ``RESOURCE_EXHAUSTED`` at once
    when none is free (the query service and a front's alike)."""
    caller = caller_of(policy, context)
    try:
        in_flight.take(caller)
    except QueryRefusedError as refused:
        await context.abort(refused.code, refused.detail)
    try:
        yield
    finally:
        in_flight.give_back(caller)


class BoundedStream:
    """A streamed answer's pages written to the caller, the whole stream within ``seconds`` of its
    start, the caller's reading included.

    A reader that stops reading would hold the answer's memory, its query slot and, on a front,
    every worker's stream, for ever. Past the bound the call ends with ``RESOURCE_EXHAUSTED``, as
    the store's own read bound does: in gRPC's status codes that is the code of a server resource
    used up, and the one gRPC itself gives when flow control's limits are reached (a reader too
    slow leaves its window full). Not ``DEADLINE_EXCEEDED``: that says the caller's own deadline
    passed (gRPC generates it then, on either side), which a caller without one could not act on.
    """

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any], seconds: float) -> None:
        self.context = context
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    async def write(self, page: Any) -> None:
        """Send ``page``; abort the call when the stream's time is up before the caller takes it."""
        try:
            await asyncio.wait_for(self.context.write(page), max(0.0, self.deadline - time.monotonic()))
        except TimeoutError:
            await self.context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the answer's stream ran past its {self.seconds:g} s bound: read it faster, or ask for less",
            )


def caller_of(policy: AccessPolicy, context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """Who is asking: the names of the client certificate when there is one; else the peer
    address (without its port), with a digest of the bearer token when one is sent, so two
    operators sharing the token from two machines are two callers."""
    names = certificate_names(context.auth_context()) if policy.enabled else frozenset()
    if names:
        return f"certificate {','.join(sorted(names))}"
    source = peer_source(context.peer())
    token = presented_token(context.invocation_metadata()) if policy.enabled else None
    if token:
        return f"{source} (token {hashlib.sha256(token.encode()).hexdigest()[:8]})"
    return source


_STATUS = {Access.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED, Access.DENIED: grpc.StatusCode.PERMISSION_DENIED}


async def authorize_operator(policy: AccessPolicy, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Abort the call unless the caller holds an operator credential.

    A call on a unix socket is the front's (``serve --workers N``): only a worker listens on
    one, in its front's private (0700) runtime directory; the front checked its caller."""
    if context.peer().startswith("unix:"):
        return
    names = certificate_names(context.auth_context()) if policy.enabled else frozenset()
    decision = policy.query(presented_token(context.invocation_metadata()), names)
    if decision.access is not Access.ALLOWED:
        await context.abort(_STATUS[decision.access], decision.detail)
