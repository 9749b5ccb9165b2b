"""How the sender reads a stream's beginning and end: the transport's reason a channel does not come
up, the status a collector ended a stream with, and whether a raced end may hide a refusal.

gRPC often says less than what happened: a channel that never comes up only times out, and a
write that races the collector's refusal ends as "Internal error from Core". These helpers get
the real reason, so the sender's log (``sender_log.py``) can say it in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import grpc

from nodeagent.core.wire.framing import STREAM_ACCEPTED_HEADER, STREAM_METHOD, passthrough
from nodeagent.v1 import nodeagent_pb2 as pb

# Asked only to learn why a connection fails: a call that does not wait for the channel fails
# at once with the transport's own reason ("Connection refused", a TLS handshake error).
HEALTH_METHOD = "/grpc.health.v1.Health/Check"
# What gRPC says of a call whose write raced the collector's refusal, instead of the refusal.
RACED = "INTERNAL: Internal error from Core"
# Statuses of a collector refusing a stream's credentials: after one, a raced end is likely another.
REFUSALS = ("UNAUTHENTICATED:", "PERMISSION_DENIED:")
# How long the stream that asks why (the hello alone) waits for the collector's answer.
REFUSAL_WAIT_SECONDS = 1.0


async def ready_or_reason(channel: grpc.aio.Channel) -> None:
    """Return once the channel is ready; raise the transport's ``AioRpcError`` when it fails.

    ``channel_ready()`` alone waits through every failure until a timeout, so an agent pointed
    at a port where nothing listens would only ever say "TimeoutError"."""
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            probe = channel.unary_unary(
                HEALTH_METHOD, request_serializer=passthrough, response_deserializer=passthrough
            )
            try:
                await probe(b"", timeout=2.0, wait_for_ready=False)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    raise
            # Any other answer came over a working connection: the channel is up again.
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


def maybe_refused(previous: str | None) -> bool:
    """Whether a raced end may hide a refusal: the first failure of this collector, or one after
    a refusal of the stream's credentials (not after a stream ended otherwise, as a replaced one)."""
    return previous is None or previous.startswith(REFUSALS)


async def final_status(call: grpc.aio.StreamStreamCall[bytes, pb.Ack] | None) -> str | None:
    """``CODE: details`` of a call the collector ended with an error status; None otherwise."""
    if call is None:
        return None
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
        details = await call.details()
    except (TimeoutError, grpc.aio.AioRpcError):
        return None
    if code in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
        return None
    return f"{code.name}: {details}"


def describe(err: BaseException) -> str:
    if isinstance(err, grpc.aio.AioRpcError):
        return f"{err.code().name}: {err.details()}"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


async def refusal(channel: grpc.aio.Channel, hello: bytes, metadata: Sequence[tuple[str, str]]) -> str | None:
    """``CODE: details`` of the collector's refusal of a stream that sends the hello and
    nothing more, waited for up to ``REFUSAL_WAIT_SECONDS``; None when it accepts it (then it
    is closed at once) or says nothing in time."""
    call = channel.stream_stream(
        STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
    )(metadata=metadata)
    try:
        await call.write(hello)
        headers = await asyncio.wait_for(call.initial_metadata(), REFUSAL_WAIT_SECONDS)
        if any(key == STREAM_ACCEPTED_HEADER for key, _value in headers):
            return None
        return await final_status(call)
    except (TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
        return await final_status(call) if call.done() else None
    finally:
        call.cancel()


async def accepted(call: grpc.aio.StreamStreamCall[bytes, pb.Ack], wait: float) -> None:
    """Return once the collector accepted the stream (or says nothing: an older one);
    ``ConnectionError`` when it refused it, whose status the caller then reads."""
    try:
        headers = await asyncio.wait_for(asyncio.shield(call.initial_metadata()), wait)
    except TimeoutError:
        return
    if any(key == STREAM_ACCEPTED_HEADER for key, _value in headers):
        return
    # Headers without the mark: a refusal's (its status follows them), or an older collector's.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(call.code()), wait)
    if call.done():
        raise ConnectionError("collector refused the stream")
