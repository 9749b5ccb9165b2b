"""Several shards' streams merged page by page: a front's workers, or the collectors a query
command asks.

Each shard streams its items in the order of their key (``answer_pages.KINDS``), so the merge is
a k-way merge: the smallest key at the head of any shard's stream goes out next, and the items of
one key held by several shards (a node that moved, a job judged on two) are made one by the rules
of ``merge.py`` (``one_key``; ``StreamHistory``'s rows are all kept). What is held at once is one
page per shard and the page being filled: memory does not grow with the answer.

A shard that fails, or does not send its next page within the timeout, is named in the last
page's ``shards`` with why, and the merge goes on with the others.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from nodeagent.collector.fleet.answer_pages import AnswerKind, PageFiller
from nodeagent.collector.fleet.fanout import Answer, Shard, ShardClients, one_line
from nodeagent.collector.fleet.merge import one_key, shard_answers


class ShardStream:
    """One shard's stream, read a page at a time as the merge takes its items."""

    def __init__(
        self, clients: ShardClients, shard: Shard, kind: AnswerKind, request: Message, timeout: float, local: bool
    ) -> None:
        self.clients = clients
        self.shard = shard
        self.kind = kind
        self.request = request
        self.timeout = timeout
        self.local = local
        self.pending: deque[Any] = deque()
        self.error = ""
        self._call: Any = None
        self._done = False

    async def fill(self) -> None:
        """Read pages until one holds an item, or the stream ended (or failed)."""
        if self._call is None and not self._done:
            down = self.clients.down_reason(self.shard)
            if down:  # known not to serve now (a front's worker that is restarting): not asked
                self._fail(f"UNAVAILABLE: {down}")
                return
            self._call = self.clients.open_stream(self.shard, self.kind.method, self.request, local=self.local)
        while not self.pending and not self._done:
            try:
                page = await asyncio.wait_for(self._call.read(), self.timeout)
            except TimeoutError:
                self._fail(f"DEADLINE_EXCEEDED: no answer within {self.timeout:g} s")
                return
            except grpc.aio.AioRpcError as err:
                self._fail(one_line(err, self.timeout))
                return
            except (OSError, ValueError) as err:  # a CA or token file that cannot be read
                self._fail(f"{type(err).__name__}: {err}")
                return
            if page is grpc.aio.EOF:
                self._done = True
                return
            self.pending.extend(getattr(page, self.kind.field))

    def cancel(self) -> None:
        if self._call is not None and not self._done:
            self._call.cancel()
        self._done = True

    def _fail(self, error: str) -> None:
        self.error = error
        self.pending.clear()
        self.cancel()


async def merged_pages(
    clients: ShardClients, kind: AnswerKind, request: Message, timeout: float, max_bytes: int, *, local: bool = True
) -> AsyncGenerator[Message, None]:
    """Every shard's stream of ``kind`` merged, in pages of at most ``max_bytes``; the last page
    (always sent, possibly without items) lists every shard asked in ``fleet``. ``timeout``
    bounds each shard's wait for each page."""
    streams = [ShardStream(clients, shard, kind, request, timeout, local) for shard in clients.shards]
    try:
        await asyncio.gather(*(stream.fill() for stream in streams))
        filler = PageFiller(kind, max_bytes)
        while live := [stream for stream in streams if stream.pending]:
            if len(live) == 1:
                head = [live[0]]
            else:
                low = min(kind.key(stream.pending[0]) for stream in live)
                head = [stream for stream in live if kind.key(stream.pending[0]) == low]
            for item in _one_of(kind, [(stream.shard.name, stream.pending.popleft()) for stream in head]):
                full = filler.add(item)
                if full is not None:
                    yield full
            emptied = [stream for stream in head if not stream.pending]
            if emptied:
                await asyncio.gather(*(stream.fill() for stream in emptied))
        last: Any = filler.take()
        last.shards.extend(shard_answers([Answer(s.shard.name, None, s.error) for s in streams]))
        yield last
    finally:
        for stream in streams:
            stream.cancel()


def _one_of(kind: AnswerKind, items: Sequence[tuple[str, Message]]) -> list[Any]:
    """The items of one key from several shards (or one) made one (``merge.one_key``)."""
    return one_key(kind.method, items)
