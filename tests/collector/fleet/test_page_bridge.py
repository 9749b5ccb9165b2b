"""The HTTP thread's bridge to the loop that asks the shards: a page answered in time is its
status; one that is not is 504 and its work cancelled, on a collector's fanned-out page and a
front's page alike (they were a 504 on one and a 500 on the other)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.collector.fleet.page_bridge import GATEWAY_TIMEOUT, page_on_loop
from nodeagent.collector.workers.front_http import FrontHttp
from nodeagent.core.transport.security import AccessPolicy, ServerSecurity
from nodeagent.v1 import nodeagent_pb2 as pb


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


async def _page(status: int) -> pb.PageResponse:
    return pb.PageResponse(status=status, content_type="application/json", body=b"{}")


def test_a_page_in_time_is_its_status(loop: asyncio.AbstractEventLoop) -> None:
    assert page_on_loop(_page(404), loop, 10.0) == ("404 Not Found", "application/json", b"{}")
    assert page_on_loop(_page(599), loop, 10.0)[0] == "599 Unknown"


def test_a_page_not_in_time_is_504_and_its_work_cancelled(loop: asyncio.AbstractEventLoop) -> None:
    cancelled = threading.Event()

    async def never() -> pb.PageResponse:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    assert page_on_loop(never(), loop, 0.05) == GATEWAY_TIMEOUT
    assert cancelled.wait(10)


class SilentWorkers:
    """Workers that never answer a ``Page``."""

    async def ask_all(self, *_args: Any) -> list[Any]:
        await asyncio.Event().wait()
        return []


def test_a_fronts_page_its_workers_do_not_answer_in_time_is_504(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("nodeagent.collector.workers.front_http.ASK_MARGIN_SECONDS", 0.0)
    security = ServerSecurity()
    front = FrontHttp(
        "127.0.0.1:0", security, AccessPolicy(security), SilentWorkers(), loop,  # type: ignore[arg-type]
        own_metrics=lambda: b"", health=lambda: (True, "ok"), timeout=0.05,
    )  # fmt: skip
    assert front.route("/api/fleet", "") == GATEWAY_TIMEOUT
