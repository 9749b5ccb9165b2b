"""A streamed answer within its time bound: a reader that stops reading is cut off with
``RESOURCE_EXHAUSTED`` once the stream's time is up (one helper for a collector and a front)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from nodeagent.collector.query.bounds import BoundedStream


class _Aborted(Exception):
    pass


class _Reader:
    """A caller that takes ``takes`` pages, then stops reading."""

    def __init__(self, takes: int) -> None:
        self.takes = takes
        self.pages: list[Any] = []
        self.status: tuple[grpc.StatusCode, str] | None = None

    async def write(self, page: Any) -> None:
        if len(self.pages) >= self.takes:
            await asyncio.Event().wait()  # never read: the write waits for ever
        self.pages.append(page)

    async def abort(self, code: grpc.StatusCode, detail: str) -> None:
        self.status = (code, detail)
        raise _Aborted


def test_a_reader_that_stops_reading_is_cut_off_with_resource_exhausted() -> None:
    reader = _Reader(takes=2)

    async def send() -> None:
        stream = BoundedStream(reader, 0.2)  # type: ignore[arg-type]
        for page in range(5):
            await stream.write(page)

    with pytest.raises(_Aborted):
        asyncio.run(send())
    assert reader.pages == [0, 1]
    assert reader.status is not None
    code, detail = reader.status
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert detail == "the answer's stream ran past its 0.2 s bound: read it faster, or ask for less"


def test_a_reader_that_keeps_up_takes_every_page() -> None:
    reader = _Reader(takes=10)

    async def send() -> None:
        stream = BoundedStream(reader, 5.0)  # type: ignore[arg-type]
        for page in range(10):
            await stream.write(page)

    asyncio.run(send())
    assert reader.pages == list(range(10)) and reader.status is None
