"""Drain the spool to a collector over one gRPC stream, reconnecting and failing over on its own.

The sender runs an asyncio loop in its own thread, so sampling never waits on the network. It
opens ``Ingest/Stream``, says which node it is (``hello``), then writes every spooled report
from the oldest unacknowledged one on, and removes reports from the spool as cumulative acks
arrive. When the stream breaks it reconnects with exponential backoff and full jitter.

With several collectors the agent ranks them by rendezvous hashing of its node id, so each node
has one home without coordination, and keeps it: a job starting or ending moves nothing. Each
connection attempt starts from the top of that ranking and moves down on failure. A *move*
(``moves.py``) leaves a collector that still works only to go home: while on a fallback, when a
preferred collector answers its health probe again; the stream says ``Goodbye``, waits for the
acks of what it sent and ends, and the sender connects to the new first choice at once. A
collector's front may answer the hello with a redirect to the worker that owns the node
(``OWNER_PORT_TRAILER``): followed once, at once.
A clean stop says ``Goodbye`` too, of the stopping kind: the collector shows the node stopped, not down.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import grpc
import structlog

from nodeagent.agent.delivery.moves import (
    MOVE_ACK_WAIT_SECONDS,
    PREFERRED_PROBE_SECONDS,
    ResentCount,
    first_serving,
    leave,
    owner_port,
    with_port,
)
from nodeagent.agent.delivery.sender_log import DeliveryLog
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.delivery.stream_status import (
    RACED,
    accepted,
    describe,
    final_status,
    maybe_refused,
    ready_or_reason,
    refusal,
)
from nodeagent.core.transport.backoff import Backoff
from nodeagent.core.transport.channel import ClientSecurity, open_channel
from nodeagent.core.transport.diagnosis import unreachable_reason
from nodeagent.core.transport.rendezvous import rendezvous_order
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report, passthrough
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.sender")

# On a stop, how long the goodbye waits for acks still due (the agent's drain waited already).
STOP_ACK_WAIT_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class SenderConfig:
    backoff_initial_seconds: float = 0.2
    backoff_max_seconds: float = 10.0
    # No ack progress for this long while reports are in flight: the collector is stuck; reconnect.
    ack_timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 5.0
    batch: int = 256
    # After the hello, how long to wait for the collector to accept the stream (STREAM_ACCEPTED_HEADER)
    # before writing reports. A refusal (a bad token, a failing store) then arrives as its own
    # status: a write racing the refusal makes gRPC report "Internal error from Core" instead.
    # A collector that sends no such header costs this much per connection, nothing else.
    accept_wait_seconds: float = 0.3
    # How often the sender logs one line on delivery (reports acked, spool depth); 0: never.
    summary_seconds: float = 60.0
    # While not on the first choice, how often to ask the preferred collectors' health.
    preferred_probe_seconds: float = PREFERRED_PROBE_SECONDS
    move_ack_wait_seconds: float = MOVE_ACK_WAIT_SECONDS


class Sender:
    def __init__(
        self,
        spool: Spool,
        targets: Sequence[str],
        *,
        hello: Callable[[], pb.NodeInfo],
        security: ClientSecurity | None = None,
        config: SenderConfig | None = None,
    ) -> None:
        if not targets:
            raise ValueError("no collector to send to")
        self.spool = spool
        self.hello = hello
        self.security = security or ClientSecurity()
        # Per collector, the status its last stream ended with ("" for none): see stream_status.refusal.
        self._last_status: dict[str, str] = {}
        self.config = config or SenderConfig()
        self.order: list[str] = []
        self._targets = list(targets)
        self.connected_to: str | None = None
        # Where the stream of ``connected_to`` really goes: the owner a front redirected it to.
        self.connected_via: str | None = None
        self.reconnects_total = 0
        self.moves_total = 0
        self.delivery_log = DeliveryLog()
        self._resent = ResentCount()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._started = threading.Event()

    # ---- control, from the agent's main thread ----

    def start(self) -> None:
        self._thread = threading.Thread(target=self._thread_main, name="nodeagent-sender", daemon=True)
        self._thread.start()
        self._started.wait()

    def stop(self, timeout: float = 5.0) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_all_acked(self, deadline_monotonic: float, stop: threading.Event | None = None) -> bool:
        """Block until every spooled report is acknowledged, the deadline passes or ``stop`` is set."""
        while not self.spool.all_acked():
            if time.monotonic() >= deadline_monotonic or (stop is not None and stop.is_set()):
                return False
            time.sleep(0.02)
        return True

    @property
    def reports_resent_total(self) -> int:
        """Reports sent again to another collector after the stream that sent them ended unacknowledged."""
        return self._resent.total

    # ---- the sender thread ----

    def _thread_main(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        wake = self._wake
        loop = self._loop

        def wake_up() -> None:
            loop.call_soon_threadsafe(wake.set)

        self.spool.subscribe(wake_up)
        # Ranked by the node id alone, once: the node's home never changes while it runs.
        self.order = rendezvous_order(self.hello().node_id, self._targets)
        self._started.set()
        summaries = asyncio.create_task(self._summaries()) if self.config.summary_seconds > 0 else None
        try:
            await self._deliver()
        finally:
            if summaries is not None:
                summaries.cancel()
                await asyncio.gather(summaries, return_exceptions=True)

    async def _deliver(self) -> None:
        assert self._stop is not None
        backoff = Backoff(self.config.backoff_initial_seconds, self.config.backoff_max_seconds)
        # Rounds through every collector without an ack since the last that had one.
        failures = 0
        while not self._stop.is_set():
            delivered = moved = False
            for target in list(self.order):
                if self._stop.is_set():
                    return
                try:
                    end = await self._session(target)
                except Exception as err:  # the sender must outlive any one session's surprise
                    log.error("collector session failed", collector=target, error=describe(err))
                    end = _End()
                delivered = end.acked or delivered
                moved = end.moved
                if delivered or moved:
                    break
            if moved:
                failures = 0
                continue  # a move connects to the new first choice at once
            failures = 0 if delivered else failures + 1
            await self._sleep(backoff.delay(failures))

    async def _session(self, target: str) -> _End:
        """One session with one collector: its stream, and the one a front's redirect names."""
        end = await self._stream(target, target)
        if end.redirect is None:
            return end
        dial = with_port(target, end.redirect)
        log.debug("redirected to the owning worker", collector=target, owner=dial)
        followed = await self._stream(target, dial)
        if followed.redirect is not None:  # one hop only: a second redirect is a failure of this target
            self.delivery_log.failed("collector redirected twice", target, f"{dial} redirects to {followed.redirect}")
        return _End(acked=followed.acked, moved=followed.moved)

    def _hello_message(self) -> bytes:
        # NodeInfo.routing_key stays empty: a front places the node by its node id alone.
        return pb.AgentMessage(hello=self.hello()).SerializeToString()

    async def _stream(self, target: str, dial: str) -> _End:
        """One stream to ``dial`` on behalf of ``target`` (the collector in ``order``)."""
        assert self._stop is not None
        try:
            channel = open_channel(dial, self.security)  # rereads TLS files: they may be rotating
        except (OSError, ValueError) as err:
            self.delivery_log.failed("cannot open a channel to the collector", target, describe(err))
            return _End()
        acked_any = moved = False
        progress = _Progress()
        call: grpc.aio.StreamStreamCall[bytes, pb.Ack] | None = None
        try:
            try:
                if not await self._connected(channel):
                    return _End()
            except (TimeoutError, grpc.aio.AioRpcError) as err:
                # gRPC's words for the usual mistakes (TLS expected, the HTTP port) said plainly;
                # no probe here: it would load OpenSSL into the agent.
                details = str(err.details()) if isinstance(err, grpc.aio.AioRpcError) else ""
                reason = unreachable_reason(dial, self.security, details, probe=False)
                self.delivery_log.failed("cannot reach the collector", target, reason or describe(err))
                return _End()
            call = channel.stream_stream(
                STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
            )(metadata=self.security.metadata())
            await call.write(self._hello_message())
            await accepted(call, self.config.accept_wait_seconds)
            self.spool.stream_started()  # before anything of this stream is sent
            self.connected_to, self.connected_via = target, dial
            log.debug("streaming to collector", collector=target, via=dial)
            resent_through = self._resent.bound_for(target, self.spool.first_unacked_seq())
            lock = asyncio.Lock()  # held around each write: a move stops the writer between two
            writer = asyncio.create_task(self._write_reports(call, progress, lock, resent_through))
            reader = asyncio.create_task(self._read_acks(call, progress, target))
            watchdog = asyncio.create_task(self._ack_watchdog(progress))
            stopper = asyncio.create_task(self._stop.wait())
            mover = asyncio.create_task(self._move_wanted(target))
            tasks = {writer, reader, watchdog, stopper, mover}
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if done == {mover}:
                moved = True
                await self._move(call, progress, writer, reader, lock, target, mover.result())
            elif done == {stopper}:  # a clean stop: the collector shows the node stopped, not down
                await self._stopping(call, progress, writer, reader, lock)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            acked_any = progress.acked
            if moved:
                return _End(acked=acked_any, moved=True)
            # The reader's error says why the stream ended; a writer that hit the finished call
            # (InvalidStateError) only says that it did.
            ended = sorted(done - {stopper, mover}, key=lambda t: t is not reader)
            raised = [error for error in (task.exception() for task in ended) if error is not None]
            if raised:  # every one retrieved, the first raised
                raise raised[0]
        except (
            TimeoutError, grpc.aio.AioRpcError, ConnectionError, _StreamStalledError, asyncio.InvalidStateError,
            ValueError, OSError,
        ) as err:  # fmt: skip
            # The collector's status says why (UNAUTHENTICATED, UNAVAILABLE); what the writer or
            # the reader hit first (InvalidStateError, "Internal error from Core") only says that it ended.
            status = await final_status(call) if not isinstance(err, _StreamStalledError) else None
            redirect = owner_port(await call.trailing_metadata()) if status and call is not None else None
            if redirect is not None and status is not None and status.startswith("UNAVAILABLE"):
                return _End(acked=acked_any, redirect=redirect)
            before = self._last_status.get(target)
            if status is not None and status.startswith(RACED) and not acked_any and maybe_refused(before):
                # A report written while a slow collector refused the stream: gRPC says only that
                # the write raced the end. A stream with the hello alone gets the refusal itself.
                status = await refusal(channel, self._hello_message(), self.security.metadata()) or status
            self._last_status[target] = status or ""
            self.delivery_log.failed("collector stream ended", target, status or describe(err))
        finally:
            if call is not None:
                self._resent.ended(target, progress.sent_seq, self.spool.first_unacked_seq())
            self.spool.stream_ended()
            self.connected_to = self.connected_via = None
            self.reconnects_total += 1
            await channel.close(grace=None)
        return _End(acked=acked_any)

    async def _move_wanted(self, target: str) -> str:
        """Return (with the reason) once this stream should move home: a collector ranked above
        ``target`` answers its health probe. On its first choice, never."""
        preferred = self.order[: self.order.index(target)] if target in self.order else list(self.order)
        if not preferred:
            await asyncio.Event().wait()  # home: only the stream's end or a stop ends this session
        while True:
            # Jittered a little: the nodes of a collector that returns do not all move back at once.
            await asyncio.sleep(self.config.preferred_probe_seconds * random.uniform(0.9, 1.1))
            answered = await first_serving(preferred, self.security)
            if answered is not None:
                return f"preferred collector {answered} answers"

    async def _move(
        self, call: grpc.aio.StreamStreamCall[bytes, pb.Ack], progress: _Progress, writer: asyncio.Task[NoReturn],
        reader: asyncio.Task[NoReturn], lock: asyncio.Lock, target: str, reason: str,
    ) -> None:  # fmt: skip
        """Leave ``target`` (``moves.leave``) and say so."""
        started = time.monotonic()
        goodbye = pb.AgentMessage(goodbye=pb.Goodbye(reason="moving"))
        await leave(
            call, writer, reader, lock, goodbye.SerializeToString(),
            lambda: progress.sent_seq - progress.acked_seq, self.config.move_ack_wait_seconds,
        )  # fmt: skip
        self.moves_total += 1
        log.info(
            "moving to another collector", collector=target, reason=reason,
            unacked=max(0, progress.sent_seq - progress.acked_seq), seconds=round(time.monotonic() - started, 3),
        )  # fmt: skip

    async def _stopping(
        self, call: grpc.aio.StreamStreamCall[bytes, pb.Ack], progress: _Progress, writer: asyncio.Task[NoReturn],
        reader: asyncio.Task[NoReturn], lock: asyncio.Lock,
    ) -> None:  # fmt: skip
        """Leave with ``Goodbye(kind=KIND_STOPPING)``: the agent's drain already waited for the
        acks, so this waits only a little for the last of them."""
        goodbye = pb.AgentMessage(goodbye=pb.Goodbye(reason="stopping", kind=pb.Goodbye.KIND_STOPPING))
        await leave(
            call, writer, reader, lock, goodbye.SerializeToString(),
            lambda: progress.sent_seq - progress.acked_seq, STOP_ACK_WAIT_SECONDS,
        )  # fmt: skip

    async def _connected(self, channel: grpc.aio.Channel) -> bool:
        """Wait for the connection, but not past a stop: an agent told to stop does not wait out
        a connect timeout to a collector that is away. TimeoutError when it does not come up."""
        assert self._stop is not None
        ready = asyncio.create_task(ready_or_reason(channel))
        stopping = asyncio.create_task(self._stop.wait())
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

    async def _write_reports(
        self, call: grpc.aio.StreamStreamCall[bytes, pb.Ack], progress: _Progress, lock: asyncio.Lock,
        resent_through: int,
    ) -> NoReturn:  # fmt: skip
        """Every report from the oldest unacknowledged on; those up to ``resent_through`` may
        already be on another collector (``ResentCount``)."""
        assert self._wake is not None
        cursor = self.spool.first_unacked_seq()
        while True:
            self._wake.clear()
            records = self.spool.records_from(cursor, self.config.batch)
            if not records:
                cursor = max(cursor, self.spool.first_unacked_seq())
                await self._wake.wait()
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
                        self._resent.total += 1
                cursor = record.seq + 1

    async def _read_acks(
        self, call: grpc.aio.StreamStreamCall[bytes, pb.Ack], progress: _Progress, target: str
    ) -> NoReturn:
        async for ack in call:
            if ack.attached:
                lost = self.spool.attached(ack.epoch, ack.acked_seq)
                if lost:
                    log.warning("reports dropped from the spool are not stored by the collector", reports=lost)
            if ack.epoch == self.spool.epoch:
                self.delivery_log.acked_reports_total += self.spool.ack(ack.epoch, ack.acked_seq)
                progress.acked_seq = max(progress.acked_seq, ack.acked_seq)
            if ack.attached:
                continue  # what was stored before: it says nothing yet of whether this stream works
            if not progress.acked:
                self.delivery_log.connected(target)
            progress.acked = True
            # Still waiting for later reports: their wait starts now (the oldest was just answered).
            progress.waiting_since = time.monotonic() if progress.sent_seq > progress.acked_seq else None
        raise ConnectionError("collector closed the stream")

    async def _ack_watchdog(self, progress: _Progress) -> NoReturn:
        while True:
            await asyncio.sleep(1.0)
            since = progress.waiting_since
            if since is not None and time.monotonic() - since > self.config.ack_timeout_seconds:
                raise _StreamStalledError(f"no ack for {self.config.ack_timeout_seconds:g} s")

    async def _summaries(self) -> None:
        while True:
            await asyncio.sleep(self.config.summary_seconds)
            self.delivery_log.summary(self.spool, self.connected_to, self._resent.total)

    async def _sleep(self, seconds: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)


@dataclass(frozen=True, slots=True)
class _End:
    """How a stream ended: with an ack (the collector works), in a move, or redirected (the owner's port)."""

    acked: bool = False
    moved: bool = False
    redirect: int | None = None


@dataclass(slots=True)
class _Progress:
    # When the oldest report still waiting for its ack was sent (None: nothing is waiting).
    waiting_since: float | None = None
    sent_seq: int = 0
    acked_seq: int = 0
    acked: bool = False


class _StreamStalledError(Exception):
    pass
