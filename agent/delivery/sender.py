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
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from nodeagent.agent.delivery.moves import (
    MOVE_ACK_WAIT_SECONDS,
    PREFERRED_PROBE_SECONDS,
    ResentCount,
    with_port,
)
from nodeagent.agent.delivery.sender_log import DeliveryLog
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.delivery.stream_session import End, StreamSession
from nodeagent.agent.delivery.stream_status import (
    describe,
)
from nodeagent.core.transport.backoff import Backoff
from nodeagent.core.transport.channel import ClientSecurity
from nodeagent.core.transport.rendezvous import rendezvous_order
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
        self.last_status: dict[str, str] = {}
        self.config = config or SenderConfig()
        self.order: list[str] = []
        self._targets = list(targets)
        self.connected_to: str | None = None
        # Where the stream of ``connected_to`` really goes: the owner a front redirected it to.
        self.connected_via: str | None = None
        self.reconnects_total = 0
        self.moves_total = 0
        self.delivery_log = DeliveryLog(waiting=lambda: self.spool.stats().reports)
        self.resent = ResentCount()
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
        return self.resent.total

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
                    end = End()
                delivered = end.acked or delivered
                moved = end.moved
                if delivered or moved:
                    break
            if moved:
                failures = 0
                continue  # a move connects to the new first choice at once
            failures = 0 if delivered else failures + 1
            await self._sleep(backoff.delay(failures))

    async def _session(self, target: str) -> End:
        """One session with one collector: its stream, and the one a front's redirect names."""
        end = await self._stream(target, target)
        if end.redirect is None:
            return end
        dial = with_port(target, end.redirect)
        log.debug("redirected to the owning worker", collector=target, owner=dial)
        followed = await self._stream(target, dial)
        if followed.redirect is not None:  # one hop only: a second redirect is a failure of this target
            self.delivery_log.failed("collector redirected twice", target, f"{dial} redirects to {followed.redirect}")
        return End(acked=followed.acked, moved=followed.moved)

    async def _stream(self, target: str, dial: str) -> End:
        """One stream to ``dial`` on behalf of ``target`` (the collector in ``order``)."""
        assert self._stop is not None
        assert self._wake is not None
        return await StreamSession(self, target, dial, self._stop, self._wake).run()

    def hello_message(self) -> bytes:
        # NodeInfo.routing_key stays empty: a front places the node by its node id alone.
        return pb.AgentMessage(hello=self.hello()).SerializeToString()

    async def _summaries(self) -> None:
        while True:
            await asyncio.sleep(self.config.summary_seconds)
            self.delivery_log.summary(self.spool, self.connected_to, self.resent.total)

    async def _sleep(self, seconds: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
