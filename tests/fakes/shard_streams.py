"""Shards whose Query streams are held in memory: what ``stream_merge.merged_pages`` reads, without
a server. Each shard's items are streamed as one collector streams them (by the method's key, in
pages of ``page_bytes``); a shard given an error string answers with that error instead."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from nodeagent.collector.fleet.answer_pages import KINDS, PAGE_BYTES, pages_of
from nodeagent.collector.fleet.fanout import Shard
from nodeagent.collector.fleet.stream_merge import merged_pages
from nodeagent.v1 import nodeagent_pb2 as pb


class _Call:
    def __init__(self, pages: list[Message]) -> None:
        self.pages = list(pages)

    async def read(self) -> Any:
        return self.pages.pop(0) if self.pages else grpc.aio.EOF

    def cancel(self) -> None:
        self.pages.clear()


class HeldShards:
    """``ShardClients`` as ``merged_pages`` uses it: ``held`` is (shard, its items, or "" and an
    error to answer with, "UNAVAILABLE: why")."""

    def __init__(self, held: Sequence[tuple[str, Sequence[Message] | str]], page_bytes: int = PAGE_BYTES) -> None:
        self.shards = tuple(Shard(name, name) for name, _items in held)
        self.held = dict(held)
        self.page_bytes = page_bytes

    def down_reason(self, shard: Shard) -> str:
        held = self.held[shard.name]
        return held.partition(": ")[2] if isinstance(held, str) else ""

    def open_stream(self, shard: Shard, method: str, request: Message, *, local: bool = True) -> _Call:
        items = self.held[shard.name]
        assert not isinstance(items, str)
        return _Call(list(pages_of(KINDS[method], items, self.page_bytes)))


def merged(
    method: str, held: Sequence[tuple[str, Sequence[Message] | str]], *, page_bytes: int = PAGE_BYTES
) -> tuple[list[Any], list[pb.ShardAnswer]]:
    """Every item of the merged stream of ``method`` over ``held``, and its last page's shards."""

    async def run() -> list[Message]:
        shards: Any = HeldShards(held, page_bytes)
        request = pb.ListNodesRequest()  # not read: the held shards answer what they hold
        return [page async for page in merged_pages(shards, KINDS[method], request, 5.0, page_bytes)]

    pages: list[Any] = asyncio.run(run())
    field = KINDS[method].field
    return [item for page in pages for item in getattr(page, field)], list(pages[-1].shards)
