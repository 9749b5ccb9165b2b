"""The one bridge from an HTTP listener's thread to the event loop that asks the shards: a
collector whose page fans out to ``[fleet] collectors`` (``fleet_pages.py``) and a front whose
page asks its workers (``workers/front_http.py``).

The channels live on the loop; the HTTP server answers on its own threads. A page not answered
in time is ``504 Gateway Timeout`` (the shards, not this server, were slow) and its work is
cancelled, on both.
"""

from __future__ import annotations

import asyncio
import http
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

from nodeagent.v1 import nodeagent_pb2 as pb

T = TypeVar("T")
Reply = tuple[str, str, bytes]

GATEWAY_TIMEOUT: Final[Reply] = ("504 Gateway Timeout", "application/json", b'{"error": "no answer in time"}\n')


def page_on_loop(work: Coroutine[Any, Any, pb.PageResponse], loop: asyncio.AbstractEventLoop, timeout: float) -> Reply:
    """The page ``work`` makes on ``loop``, as the HTTP listener answers it; 504 past ``timeout``."""
    try:
        page = wait_on_loop(work, loop, timeout)
    except TimeoutError:
        return GATEWAY_TIMEOUT
    return http_reply(page)


def wait_on_loop(work: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop, timeout: float) -> T:
    """``work``'s result from ``loop``, waited on from another thread; ``TimeoutError`` past
    ``timeout``, the work cancelled."""
    future = asyncio.run_coroutine_threadsafe(work, loop)
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise


def http_reply(page: pb.PageResponse) -> Reply:
    try:
        phrase = http.HTTPStatus(page.status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{page.status} {phrase}", page.content_type, page.body
