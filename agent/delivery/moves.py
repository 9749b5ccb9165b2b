"""What the sender needs to move a node between collectors: probes of the preferred ones, the
front's redirect, and the count of reports that may be stored on two of them.

A node moves only around a failover: its collector fails and it goes to the next (no goodbye:
the stream broke), and a *move* (``sender.py``) takes it home, leaving a collector that still
works, when a collector ranked above the one it fell back to answers again. The sender stops
writing reports, says ``Goodbye``, waits (at most ``MOVE_ACK_WAIT_SECONDS``) for the acks of
what it sent, half-closes and connects to the new first choice at once. While it is not on its
first choice it asks the collectors ranked above the current one for their gRPC health every
``PREFERRED_PROBE_SECONDS``. A job starting or ending never moves a node.

``ResentCount`` counts reports sent on a stream that ended without their ack and then sent again
to a different collector: what a collector may have committed without acknowledging and another
then stores as well, the upper bound of what is stored twice across shards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health_pb2

from nodeagent.agent.delivery.stream_status import HEALTH_METHOD, describe
from nodeagent.core.transport.channel import ClientSecurity, open_channel
from nodeagent.core.wire.framing import OWNER_PORT_TRAILER

# While not on its first choice, how often the sender asks the preferred collectors' health.
PREFERRED_PROBE_SECONDS = 5.0
# How long a move waits for the acks of what it sent before it closes the stream anyway.
MOVE_ACK_WAIT_SECONDS = 5.0
# How long a move waits for the collector to end the stream after the half-close.
MOVE_CLOSE_WAIT_SECONDS = 3.0
# One health question's deadline.
PROBE_TIMEOUT_SECONDS = 2.0

log = structlog.get_logger("nodeagent.sender")


async def leave(
    call: grpc.aio.StreamStreamCall[bytes, Any], writer: asyncio.Task[Any], reader: asyncio.Task[Any],
    lock: asyncio.Lock, goodbye: bytes, unacked: Callable[[], int], ack_wait_seconds: float,
) -> None:  # fmt: skip
    """End a stream that works: stop ``writer`` between two writes (it holds ``lock`` around
    each), write ``goodbye``, wait up to ``ack_wait_seconds`` while ``unacked()`` reports are
    waiting for their acks (``reader`` takes them), half-close, and let the collector end it."""
    started = time.monotonic()
    try:
        # A write the collector never takes (flow control) holds the writer only so long; then
        # the stream is cancelled, and what it sent is sent again elsewhere.
        await asyncio.wait_for(lock.acquire(), ack_wait_seconds)
    except TimeoutError:
        call.cancel()
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)
    try:
        if call.done():
            raise ConnectionError("the stream ended before its goodbye")
        await call.write(goodbye)
        deadline = started + ack_wait_seconds
        while unacked() > 0 and not reader.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await call.done_writing()
        await asyncio.wait({reader}, timeout=MOVE_CLOSE_WAIT_SECONDS)
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError, ConnectionError) as err:
        log.debug("stream ended during a move", error=describe(err))


async def first_serving(targets: list[str], security: ClientSecurity) -> str | None:
    """The first of ``targets`` whose gRPC health says SERVING now; None when none does."""
    for target in targets:
        try:
            channel = open_channel(target, security)
        except (OSError, ValueError):
            continue
        try:
            check = channel.unary_unary(
                HEALTH_METHOD,
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            answer = await check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_SECONDS, wait_for_ready=False)
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                return target
        except grpc.aio.AioRpcError:
            pass
        finally:
            await channel.close(grace=None)
    return None


def owner_port(trailers: grpc.aio.Metadata | None) -> int | None:
    """The port a front's redirect names (``OWNER_PORT_TRAILER``); None when it names none."""
    if trailers is None:
        return None
    for key, value in trailers:
        if key == OWNER_PORT_TRAILER:
            text = value.decode() if isinstance(value, bytes) else str(value)
            if text.isdigit() and 0 < int(text) < 65536:
                return int(text)
    return None


def with_port(target: str, port: int) -> str:
    """``target`` (``HOST:PORT``, ``[v6]:PORT``) with another port: the redirect's host stays the one dialled."""
    host = target.rpartition(":")[0] or target
    return f"{host}:{port}"


class ResentCount:
    """Reports sent again to another collector after the stream that first sent them ended unacknowledged."""

    def __init__(self) -> None:
        self.total = 0
        # Per collector: the highest seq sent on a stream to it that ended before its ack.
        self._unacked_on: dict[str, int] = {}

    def ended(self, target: str, sent_seq: int, first_unacked_seq: int) -> None:
        """A stream to ``target`` ended having sent up to ``sent_seq`` (``first_unacked_seq``: the
        spool's oldest unacknowledged report now)."""
        if sent_seq >= first_unacked_seq:
            self._unacked_on[target] = max(self._unacked_on.get(target, 0), sent_seq)

    def bound_for(self, target: str, first_unacked_seq: int) -> int:
        """A new stream to ``target``: its reports at or below the returned seq may be on another collector."""
        for other, seq in list(self._unacked_on.items()):
            if seq < first_unacked_seq:
                del self._unacked_on[other]  # acknowledged since: nothing of it can double
        return max((seq for other, seq in self._unacked_on.items() if other != target), default=0)
