"""One stream to one collector, as a session object: open the channel, say hello, run the stream's
five tasks (write reports, read acks, watch for a stall, wait for a stop, wait for a move home),
leave on a move or a stop, and say how the stream ended (``End``) and why (the error classes).

The ``Sender`` (``sender.py``) decides which collector to try and when; a session is one try.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import grpc
import structlog

from nodeagent.agent.delivery.moves import first_serving, leave, owner_port
from nodeagent.agent.delivery.stream_status import (
    RACED,
    accepted,
    describe,
    final_status,
    maybe_refused,
    ready_or_reason,
    refusal,
)
from nodeagent.core.transport.channel import open_channel
from nodeagent.core.transport.diagnosis import unreachable_reason
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report, passthrough
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.agent.delivery.sender import Sender

log = structlog.get_logger("nodeagent.sender")

# On a stop, how long the goodbye waits for acks still due (the agent's drain waited already).
STOP_ACK_WAIT_SECONDS = 1.0

Call = grpc.aio.StreamStreamCall[bytes, pb.Ack]

# How a stream may end that is the collector's or the network's doing, not a bug: said in the
# delivery log with the collector's status, and the sender tries again.
STREAM_ENDINGS = (
    TimeoutError, grpc.aio.AioRpcError, ConnectionError, asyncio.InvalidStateError, ValueError, OSError,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class End:
    """How a stream ended: with an ack (the collector works), in a move, or redirected (the owner's port)."""

    acked: bool = False
    moved: bool = False
    redirect: int | None = None


@dataclass(slots=True)
class Progress:
    # When the oldest report still waiting for its ack was sent (None: nothing is waiting).
    waiting_since: float | None = None
    sent_seq: int = 0
    acked_seq: int = 0
    acked: bool = False


class StreamStalledError(Exception):
    pass


class StreamSession:
    """One stream to ``dial`` on behalf of ``target`` (the collector in the sender's order)."""

    def __init__(self, sender: Sender, target: str, dial: str, stop: asyncio.Event, wake: asyncio.Event) -> None:
        self.sender = sender
        self.spool = sender.spool
        self.config = sender.config
        self.target = target
        self.dial = dial
        self.stop = stop
        self.wake = wake
        self.progress = Progress()
        self.call: Call | None = None
        # Whether the collector acked anything on this stream, once its tasks have ended.
        self.acked_any = False

    async def run(self) -> End:
        sender = self.sender
        try:
            channel = open_channel(self.dial, sender.security)  # rereads TLS files: they may be rotating
        except (OSError, ValueError) as err:
            sender.delivery_log.failed("cannot open a channel to the collector", self.target, describe(err))
            return End()
        try:
            if not await self._reach(channel):
                return End()
            return await self._stream(channel)
        except (*STREAM_ENDINGS, StreamStalledError) as err:
            return await self._ended(channel, err)
        finally:
            if self.call is not None:
                sender.resent.ended(self.target, self.progress.sent_seq, self.spool.first_unacked_seq())
            self.spool.stream_ended()
            sender.connected_to = sender.connected_via = None
            sender.reconnects_total += 1
            await channel.close(grace=None)

    async def _reach(self, channel: grpc.aio.Channel) -> bool:
        """Whether the channel came up (False: a stop came first); a failure said in the log."""
        try:
            return await self._connected(channel)
        except (TimeoutError, grpc.aio.AioRpcError) as err:
            # gRPC's words for the usual mistakes (TLS expected, the HTTP port) said plainly;
            # no probe here: it would load OpenSSL into the agent.
            details = str(err.details()) if isinstance(err, grpc.aio.AioRpcError) else ""
            reason = unreachable_reason(self.dial, self.sender.security, details, probe=False)
            self.sender.delivery_log.failed("cannot reach the collector", self.target, reason or describe(err))
            return False

    async def _stream(self, channel: grpc.aio.Channel) -> End:
        """Hello, then the five tasks until one ends; a move or a stop leaves with a goodbye."""
        sender, target, progress = self.sender, self.target, self.progress
        call = self.call = channel.stream_stream(
            STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
        )(metadata=sender.security.metadata())
        await call.write(sender.hello_message())
        await accepted(call, self.config.accept_wait_seconds)
        self.spool.stream_started()  # before anything of this stream is sent
        sender.connected_to, sender.connected_via = target, self.dial
        log.debug("streaming to collector", collector=target, via=self.dial)
        resent_through = sender.resent.bound_for(target, self.spool.first_unacked_seq())
        lock = asyncio.Lock()  # held around each write: a move stops the writer between two
        writer = asyncio.create_task(self._write_reports(call, lock, resent_through))
        reader = asyncio.create_task(self._read_acks(call))
        watchdog = asyncio.create_task(self._ack_watchdog())
        stopper = asyncio.create_task(self.stop.wait())
        mover = asyncio.create_task(self._move_wanted())
        done, pending = await asyncio.wait(
            {writer, reader, watchdog, stopper, mover}, return_when=asyncio.FIRST_COMPLETED
        )
        moved = done == {mover}
        if moved:
            await self._move(call, writer, reader, lock, mover.result())
        elif done == {stopper}:  # a clean stop: the collector shows the node stopped, not down
            await self._stopping(call, writer, reader, lock)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self.acked_any = progress.acked
        if moved:
            return End(acked=self.acked_any, moved=True)
        # The reader's error says why the stream ended; a writer that hit the finished call
        # (InvalidStateError) only says that it did.
        ended = sorted(done - {stopper, mover}, key=lambda t: t is not reader)
        raised = [error for error in (task.exception() for task in ended) if error is not None]
        if raised:  # every one retrieved, the first raised
            raise raised[0]
        return End(acked=self.acked_any)

    async def _ended(self, channel: grpc.aio.Channel, err: BaseException) -> End:
        """A stream that ended in error: a front's redirect, or a failure said in the log."""
        # The collector's status says why (UNAUTHENTICATED, UNAVAILABLE); what the writer or
        # the reader hit first (InvalidStateError, "Internal error from Core") only says that it ended.
        sender, target, call = self.sender, self.target, self.call
        acked_any = self.acked_any
        status = await final_status(call) if not isinstance(err, StreamStalledError) else None
        redirect = owner_port(await call.trailing_metadata()) if status and call is not None else None
        if redirect is not None and status is not None and status.startswith("UNAVAILABLE"):
            return End(acked=acked_any, redirect=redirect)
        before = sender.last_status.get(target)
        if status is not None and status.startswith(RACED) and not acked_any and maybe_refused(before):
            # A report written while a slow collector refused the stream: gRPC says only that
            # the write raced the end. A stream with the hello alone gets the refusal itself.
            status = await refusal(channel, sender.hello_message(), sender.security.metadata()) or status
        sender.last_status[target] = status or ""
        sender.delivery_log.failed("collector stream ended", target, status or describe(err))
        return End(acked=acked_any)

    async def _move_wanted(self) -> str:
        """Return (with the reason) once this stream should move home: a collector ranked above
        ``target`` answers its health probe. On its first choice, never."""
        order, target = self.sender.order, self.target
        preferred = order[: order.index(target)] if target in order else list(order)
        if not preferred:
            await asyncio.Event().wait()  # home: only the stream's end or a stop ends this session
        while True:
            # Jittered a little: the nodes of a collector that returns do not all move back at once.
            await asyncio.sleep(self.config.preferred_probe_seconds * random.uniform(0.9, 1.1))
            answered = await first_serving(preferred, self.sender.security)
            if answered is not None:
                return f"preferred collector {answered} answers"

    async def _move(
        self, call: Call, writer: asyncio.Task[NoReturn], reader: asyncio.Task[NoReturn], lock: asyncio.Lock,
        reason: str,
    ) -> None:  # fmt: skip
        """Leave the target (``moves.leave``) and say so."""
        progress = self.progress
        started = time.monotonic()
        goodbye = pb.AgentMessage(goodbye=pb.Goodbye(reason="moving"))
        await leave(
            call, writer, reader, lock, goodbye.SerializeToString(),
            lambda: progress.sent_seq - progress.acked_seq, self.config.move_ack_wait_seconds,
        )  # fmt: skip
        self.sender.moves_total += 1
        log.info(
            "moving to another collector", collector=self.target, reason=reason,
            unacked=max(0, progress.sent_seq - progress.acked_seq), seconds=round(time.monotonic() - started, 3),
        )  # fmt: skip

    async def _stopping(
        self, call: Call, writer: asyncio.Task[NoReturn], reader: asyncio.Task[NoReturn], lock: asyncio.Lock
    ) -> None:
        """Leave with ``Goodbye(kind=KIND_STOPPING)``: the agent's drain already waited for the
        acks, so this waits only a little for the last of them."""
        progress = self.progress
        goodbye = pb.AgentMessage(goodbye=pb.Goodbye(reason="stopping", kind=pb.Goodbye.KIND_STOPPING))
        await leave(
            call, writer, reader, lock, goodbye.SerializeToString(),
            lambda: progress.sent_seq - progress.acked_seq, STOP_ACK_WAIT_SECONDS,
        )  # fmt: skip

    async def _connected(self, channel: grpc.aio.Channel) -> bool:
        """Wait for the connection, but not past a stop: an agent told to stop does not wait out
        a connect timeout to a collector that is away. TimeoutError when it does not come up."""
        ready = asyncio.create_task(ready_or_reason(channel))
        stopping = asyncio.create_task(self.stop.wait())
        done, pending = await asyncio.wait(
            {ready, stopping}, timeout=self.config.connect_timeout_seconds, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if ready in done:
            ready.result()  # the transport's reason, as an AioRpcError, when it failed
            return True
        if stopping in done:
            return False
        raise TimeoutError

    async def _write_reports(self, call: Call, lock: asyncio.Lock, resent_through: int) -> NoReturn:
        """Every report from the oldest unacknowledged on; those up to ``resent_through`` may
        already be on another collector (``ResentCount``)."""
        progress = self.progress
        cursor = self.spool.first_unacked_seq()
        while True:
            self.wake.clear()
            records = self.spool.records_from(cursor, self.config.batch)
            if not records:
                cursor = max(cursor, self.spool.first_unacked_seq())
                await self.wake.wait()
                continue
            cursor = max(cursor, records[0].seq)  # the spool dropped what we had not sent yet
            for record in records:
                async with lock:
                    if progress.waiting_since is None:
                        progress.waiting_since = time.monotonic()
                    self.spool.sending(record.seq)
                    await call.write(frame_report(record.data))
                    progress.sent_seq = record.seq
                    if record.seq <= resent_through:
                        self.sender.resent.total += 1
                cursor = record.seq + 1

    async def _read_acks(self, call: Call) -> NoReturn:
        progress, delivery_log = self.progress, self.sender.delivery_log
        async for ack in call:
            if ack.attached:
                lost = self.spool.attached(ack.epoch, ack.acked_seq)
                if lost:
                    log.warning("reports dropped from the spool are not stored by the collector", reports=lost)
            if ack.epoch == self.spool.epoch:
                delivery_log.acked_reports_total += self.spool.ack(ack.epoch, ack.acked_seq)
                progress.acked_seq = max(progress.acked_seq, ack.acked_seq)
            if ack.attached:
                continue  # what was stored before: it says nothing yet of whether this stream works
            if not progress.acked:
                delivery_log.connected(self.target)
            progress.acked = True
            # Still waiting for later reports: their wait starts now (the oldest was just answered).
            progress.waiting_since = time.monotonic() if progress.sent_seq > progress.acked_seq else None
        raise ConnectionError("collector closed the stream")

    async def _ack_watchdog(self) -> NoReturn:
        progress = self.progress
        while True:
            await asyncio.sleep(1.0)
            since = progress.waiting_since
            if since is not None and time.monotonic() - since > self.config.ack_timeout_seconds:
                raise StreamStalledError(f"no ack for {self.config.ack_timeout_seconds:g} s")
