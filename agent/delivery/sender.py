"""Drain the spool to a collector over one gRPC stream, reconnecting and failing over on its own.

The sender runs an asyncio loop in its own thread, so sampling never waits on the network. It
opens ``Ingest/Stream``, says which node it is (``hello``), then writes every spooled report
from the oldest unacknowledged one on, and removes reports from the spool as cumulative acks
arrive. When the stream breaks it reconnects with exponential backoff and full jitter.

With several collectors the agent ranks them by rendezvous hashing of its node id (every agent
of a fleet agrees on a node's shard without coordination); each connection attempt starts from
the top of that ranking and moves down on failure, so a shard that comes back gets its nodes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import grpc
import structlog

from nodeagent.agent.delivery.spool import Spool
from nodeagent.core.transport.channel import ClientSecurity, open_channel
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report, passthrough
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.sender")


@dataclass(frozen=True, slots=True)
class SenderConfig:
    backoff_initial_seconds: float = 0.2
    backoff_max_seconds: float = 10.0
    # No ack progress for this long while reports are in flight: the collector is stuck; reconnect.
    ack_timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 5.0
    batch: int = 256


def rendezvous_order(node_id: str, targets: Sequence[str]) -> list[str]:
    """Collectors from most to least preferred for this node (highest random weight first)."""

    def weight(target: str) -> bytes:
        return hashlib.blake2b(f"{node_id}\0{target}".encode(), digest_size=8).digest()

    return sorted(dict.fromkeys(targets), key=weight, reverse=True)


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
        self.config = config or SenderConfig()
        self.order: list[str] = []
        self._targets = list(targets)
        self.connected_to: str | None = None
        self.reconnects_total = 0
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
        self._started.set()
        hello = self.hello()
        self.order = rendezvous_order(hello.node_id, self._targets)
        failures = 0
        while not self._stop.is_set():
            delivered = False
            for target in self.order:
                if self._stop.is_set():
                    return
                try:
                    delivered = await self._session(target) or delivered
                except Exception as err:  # the sender must outlive any one session's surprise
                    log.error("collector session failed", collector=target, error=_describe(err))
                if delivered:
                    break
            failures = 0 if delivered else failures + 1
            delay = random.uniform(
                0, min(self.config.backoff_max_seconds, self.config.backoff_initial_seconds * 2**failures)
            )
            await self._sleep(delay)

    async def _session(self, target: str) -> bool:
        """One stream to one collector; True when it got at least one ack (the collector works)."""
        assert self._stop is not None
        try:
            channel = open_channel(target, self.security)  # rereads TLS files: they may be rotating
        except (OSError, ValueError) as err:
            log.warning("cannot open a channel to the collector", collector=target, error=_describe(err))
            return False
        acked_any = False
        try:
            if not await self._connected(channel):
                return False
            call = channel.stream_stream(
                STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
            )(metadata=self.security.metadata())
            await call.write(pb.AgentMessage(hello=self.hello()).SerializeToString())
            self.connected_to = target
            log.info("streaming to collector", collector=target)
            progress = _Progress()
            writer = asyncio.create_task(self._write_reports(call, progress))
            reader = asyncio.create_task(self._read_acks(call, progress))
            watchdog = asyncio.create_task(self._ack_watchdog(progress))
            stopper = asyncio.create_task(self._stop.wait())
            done, pending = await asyncio.wait({writer, reader, watchdog, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            acked_any = progress.acked
            # The reader's error says why the stream ended; a writer that hit the finished call
            # (InvalidStateError) only says that it did.
            errors = [task.exception() for task in sorted(done, key=lambda t: t is not reader) if task is not stopper]
            raised = [error for error in errors if error is not None]  # every one retrieved, the first raised
            if raised:
                raise raised[0]
        except (
            TimeoutError, grpc.aio.AioRpcError, ConnectionError, _StreamStalledError, asyncio.InvalidStateError,
            ValueError, OSError,
        ) as err:  # fmt: skip
            log.warning("collector stream ended", collector=target, error=_describe(err))
        finally:
            self.connected_to = None
            self.reconnects_total += 1
            await channel.close(grace=None)
        return acked_any

    async def _connected(self, channel: grpc.aio.Channel) -> bool:
        """Wait for the connection, but not past a stop: an agent told to stop does not wait out
        a connect timeout to a collector that is away. TimeoutError when it does not come up."""
        assert self._stop is not None
        ready = asyncio.create_task(channel.channel_ready())
        stopping = asyncio.create_task(self._stop.wait())
        done, pending = await asyncio.wait(
            {ready, stopping}, timeout=self.config.connect_timeout_seconds, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if ready in done:
            return True
        if stopping in done:
            return False
        raise TimeoutError

    async def _write_reports(self, call: grpc.aio.StreamStreamCall[bytes, pb.Ack], progress: _Progress) -> NoReturn:
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
                if progress.waiting_since is None:
                    progress.waiting_since = time.monotonic()
                await call.write(frame_report(record.data))
                progress.sent_seq = record.seq
                cursor = record.seq + 1

    async def _read_acks(self, call: grpc.aio.StreamStreamCall[bytes, pb.Ack], progress: _Progress) -> NoReturn:
        async for ack in call:
            if ack.epoch == self.spool.epoch:
                self.spool.ack(ack.epoch, ack.acked_seq)
                progress.acked_seq = max(progress.acked_seq, ack.acked_seq)
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

    async def _sleep(self, seconds: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)


@dataclass(slots=True)
class _Progress:
    # When the oldest report still waiting for its ack was sent (None: nothing is waiting).
    waiting_since: float | None = None
    sent_seq: int = 0
    acked_seq: int = 0
    acked: bool = False


class _StreamStalledError(Exception):
    pass


def _describe(err: BaseException) -> str:
    if isinstance(err, grpc.aio.AioRpcError):
        return f"{err.code().name}: {err.details()}"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
