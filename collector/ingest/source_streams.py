"""Streams held per source (the peer's address without its port), and the bound on them.

Each node keeps one stream; a source with many more is many nodes behind one address (NAT) or a
flood. The collector's ingest and a front's redirect hold the same bound the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator

import grpc

from nodeagent.collector.ingest.hello import Context, Refuse
from nodeagent.core.transport.security import peer_source


class SourceStreams:
    """Streams each source holds now (an entry goes when it reaches 0)."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}

    def over(self, source: str, limit: int) -> int | None:
        """The streams ``source`` holds when that is already ``limit`` or more; None when one more may open."""
        held = self.held.get(source, 0)
        return held if held >= limit else None

    @contextlib.contextmanager
    def holding(self, source: str) -> Iterator[None]:
        """Count one stream of ``source`` while the block runs."""
        self.held[source] = self.held.get(source, 0) + 1
        try:
            yield
        finally:
            left = self.held.get(source, 1) - 1
            if left > 0:
                self.held[source] = left
            else:
                self.held.pop(source, None)

    async def serve(
        self, context: Context, limit: int, refuse: Refuse, stream: Callable[[Context], Awaitable[None]]
    ) -> None:
        """``stream(context)`` held as one stream of the peer's source, or refused with
        RESOURCE_EXHAUSTED when that source already holds ``limit``."""
        source = peer_source(context.peer())
        held = self.over(source, limit)
        if held is not None:
            await refuse(
                context, grpc.StatusCode.RESOURCE_EXHAUSTED, "streams_per_source",
                f"{source} holds {held} streams, the limit (--max-streams-per-source)",
            )  # fmt: skip
        with self.holding(source):
            await stream(context)
