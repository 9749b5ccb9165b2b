"""Ask every shard at once: one channel per shard, one timeout for all, an answer or one line each.

A shard is a collector (``HOST:PORT``, reached with the operator's TLS and token through
``core/transport/channel.py``) or one of a collector's workers (``unix:/path``, plaintext: the
socket's directory is private). Every call carries ``LOCAL_HEADER`` unless asked otherwise: the
receiver answers with what it holds itself and never fans out to its own peers again, so two
collectors that list each other cannot ask each other in a loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import Message

from nodeagent.core.transport.channel import ClientSecurity, open_channel
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

# Metadata a fanning-out caller sends: "answer with your own only".
LOCAL_HEADER = ("nodeagent-local", "1")
UNIX_PREFIX = "unix:"


@dataclass(frozen=True)
class Shard:
    name: str
    target: str
    security: ClientSecurity = field(default_factory=ClientSecurity)


@dataclass
class Answer:
    shard: str
    reply: Message | None
    # "" when the shard answered; else why not, in one line.
    error: str = ""

    @property
    def answered(self) -> bool:
        return not self.error


@dataclass
class StreamAnswer(Answer):
    """A streaming method's answer: every message, in order (``reply`` is the last)."""

    pages: list[Message] = field(default_factory=list)


class ShardClients:
    """One open channel per shard (opened on first use, in the running event loop).

    ``unavailable(i)``: why shard i is known not to serve now, "" when it may (a front's worker
    that is restarting): it is not asked, and its answer is UNAVAILABLE with that reason."""

    def __init__(self, shards: Sequence[Shard], *, unavailable: Callable[[int], str] | None = None) -> None:
        self.shards = tuple(shards)
        self._unavailable = unavailable
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def ask_all(self, method: str, request: Message, timeout: float, *, local: bool = True) -> list[Answer]:
        """``method`` of the Query service on every shard at once, in the shards' order; no
        shard is waited on past ``timeout`` seconds."""
        calls = [
            self._down(i) or self._ask(shard, method, request, timeout, local) for i, shard in enumerate(self.shards)
        ]
        return list(await asyncio.gather(*calls))

    async def ask_stream(self, method: str, request: Message, timeout: float, *, local: bool = True) -> list[Answer]:
        """A streaming method on every shard at once; each answer's reply is the list of its
        messages (``Answer.reply`` holds the last one, ``pages`` the list). ``timeout`` bounds
        each shard's wait for each message."""
        calls = [
            self._down(i) or self._ask_stream(shard, method, request, timeout, local)
            for i, shard in enumerate(self.shards)
        ]
        return list(await asyncio.gather(*calls))

    def open_stream(self, shard: Shard, method: str, request: Message, *, local: bool = True) -> Any:
        """A streaming method's call on one shard, to be read message by message (``call.read()``)."""
        return getattr(self._stub(shard), method)(request, metadata=shard_metadata(shard, local))

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        await asyncio.gather(*(channel.close() for channel in channels), return_exceptions=True)

    def down_reason(self, shard: Shard) -> str:
        """Why ``shard`` is known not to serve now; "" when it may."""
        if self._unavailable is None or shard not in self.shards:
            return ""
        return self._unavailable(self.shards.index(shard))

    def _down(self, index: int) -> Awaitable[Answer] | None:
        reason = self._unavailable(index) if self._unavailable is not None else ""
        return _answered_now(Answer(self.shards[index].name, None, f"UNAVAILABLE: {reason}")) if reason else None

    def _stub(self, shard: Shard) -> pb_grpc.QueryStub:
        channel = self._channels.get(shard.name)
        if channel is None:
            channel = open_shard_channel(shard)
            self._channels[shard.name] = channel
        return pb_grpc.QueryStub(channel)

    async def _ask(self, shard: Shard, method: str, request: Message, timeout: float, local: bool) -> Answer:
        try:
            call = getattr(self._stub(shard), method)(request, timeout=timeout, metadata=shard_metadata(shard, local))
            # grpc's deadline ends the call; the outer bound covers a channel stuck before it.
            reply = await asyncio.wait_for(call, timeout + _GRACE_SECONDS)
        except grpc.aio.AioRpcError as err:
            return Answer(shard.name, None, one_line(err, timeout))
        except TimeoutError:
            return Answer(shard.name, None, f"DEADLINE_EXCEEDED: no answer within {timeout:g} s")
        except (OSError, ValueError) as err:  # a CA or token file that cannot be read
            return Answer(shard.name, None, f"{type(err).__name__}: {err}")
        return Answer(shard.name, reply)

    async def _ask_stream(self, shard: Shard, method: str, request: Message, timeout: float, local: bool) -> Answer:
        pages: list[Message] = []
        try:
            call = getattr(self._stub(shard), method)(request, metadata=shard_metadata(shard, local))
            while True:
                try:
                    page = await asyncio.wait_for(call.read(), timeout)
                except TimeoutError:
                    call.cancel()
                    return Answer(shard.name, None, f"DEADLINE_EXCEEDED: no answer within {timeout:g} s")
                if page is grpc.aio.EOF:
                    break
                pages.append(page)
        except grpc.aio.AioRpcError as err:
            return Answer(shard.name, None, one_line(err, timeout))
        except (OSError, ValueError) as err:
            return Answer(shard.name, None, f"{type(err).__name__}: {err}")
        return StreamAnswer(shard.name, pages[-1] if pages else None, "", pages)


async def _answered_now(answer: Answer) -> Answer:
    return answer


def is_local_call(metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
    """The call asks for the receiver's own answer only (it carries ``LOCAL_HEADER``)."""
    return any((key, value) == LOCAL_HEADER for key, value in metadata or ())


def ask_all_sync(shards: Sequence[Shard], method: str, request: Message, timeout: float) -> list[Answer]:
    """``ShardClients.ask_all`` for a command line: its own event loop, channels closed after."""

    async def run() -> list[Answer]:
        clients = ShardClients(shards)
        try:
            return await clients.ask_all(method, request, timeout)
        finally:
            await clients.close()

    return asyncio.run(run())


def ask_stream_sync(shards: Sequence[Shard], method: str, request: Message, timeout: float) -> list[Answer]:
    """``ShardClients.ask_stream`` for a command line."""

    async def run() -> list[Answer]:
        clients = ShardClients(shards)
        try:
            return await clients.ask_stream(method, request, timeout)
        finally:
            await clients.close()

    return asyncio.run(run())


# Past grpc's own deadline, before the call is given up from outside.
_GRACE_SECONDS = 0.25
# A kept channel to a shard that went away tries again at most this far apart (gRPC's default
# grows to 120 s): a collector that comes back is asked again within seconds. (Not
# min_reconnect_backoff_ms: it is also the connect timeout, and a far TLS peer needs its 20 s.)
_RECONNECT_OPTIONS: tuple[tuple[str, int | str], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


# A worker's answers to its front on the private unix socket (a worker's whole /metrics, its
# nodes): not bound by --max-message-bytes, which is for what crosses the network.
UNIX_MESSAGE_BYTES = 1 << 30


def open_shard_channel(shard: Shard) -> grpc.aio.Channel:
    if shard.target.startswith(UNIX_PREFIX):
        options = [
            ("grpc.max_receive_message_length", UNIX_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
            *_RECONNECT_OPTIONS,
        ]
        return grpc.aio.insecure_channel(shard.target, options=options)
    return open_channel(shard.target, shard.security, _RECONNECT_OPTIONS)


def shard_metadata(shard: Shard, local: bool = False) -> tuple[tuple[str, str], ...]:
    token = () if shard.target.startswith(UNIX_PREFIX) else shard.security.metadata()
    return (*token, LOCAL_HEADER) if local else token


def one_line(err: grpc.aio.AioRpcError, timeout: float) -> str:
    if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"DEADLINE_EXCEEDED: no answer within {timeout:g} s"
    details = " ".join(str(err.details() or "").split())
    return f"{err.code().name}: {details[:300]}"
