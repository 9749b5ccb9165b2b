"""Sends the job roll-up's messages to where they belong, without holding the ingest path.

The node stage hands its ``JobStep``s and ``JobLeave``s over (``to_owners``), the job stage its
``JobWait``s (``to_homes``). A message for this process is handed over at once; the others are
queued per destination (bounded: past ``max_queued`` the oldest are dropped and counted) and sent
in batches by one task (``run``): to another worker of this collector on its unix socket, to another
collector of the fleet over TCP with ``[fleet]``'s operator credentials. A worker that does not
answer costs the messages of that batch (counted): the job state is small and comes back with
the next steps. A collector that does not answer is passed over for ``DOWN_SECONDS`` (and tried
again after), and the batch goes at once to the next collector its jobs' keys rank, which judges
them meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence, Sized
from pathlib import Path
from typing import TypeVar

import grpc
import structlog

from nodeagent.collector.fleet.fanout import Shard, open_shard_channel, shard_metadata
from nodeagent.collector.jobrelay.routes import Place, Routes
from nodeagent.collector.jobs.messages import JobWait, NodeMessage
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.wire import node_messages_to_pb, waits_to_pb
from nodeagent.core.transport.channel import ClientSecurity
from nodeagent.v1 import jobrelay_pb2_grpc as jr_grpc

log = structlog.get_logger("nodeagent.collector")

T = TypeVar("T")

# How often queued messages go out, and how long one batch may take.
SEND_SECONDS = 0.02
CALL_TIMEOUT_SECONDS = 2.0
# A collector that did not answer is not sent jobs for this long.
DOWN_SECONDS = 5.0
MAX_QUEUED = 50_000
MAX_BATCH = 2_000


class JobMessenger:
    def __init__(
        self,
        rollup: JobRollup,
        routes: Routes,
        *,
        sockets: Sequence[Path] = (),
        security: ClientSecurity | None = None,
        on_change: Callable[[], None] = lambda: None,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        """``sockets``: each worker's unix socket (index = worker); ``on_change``: the job stage
        judged what came from elsewhere (its signals are for the alert book)."""
        self.rollup = rollup
        self.routes = routes
        self.sockets = tuple(sockets)
        self.security = security or ClientSecurity()
        self.on_change = on_change
        self.max_queued = max_queued
        self.sent_total = 0
        self.dropped_total = 0
        self.received_total = 0
        self.bad_total = 0
        self._steps: dict[Place, deque[NodeMessage]] = {}
        self._waits: dict[Place, deque[JobWait]] = {}
        self._down: dict[str, float] = {}
        self._channels: dict[Place, grpc.aio.Channel] = {}
        self._wake = asyncio.Event()
        rollup.route_steps = self.to_owners
        rollup.route_waits = self.to_homes

    # ---- handed over by the stages (the event loop's thread) -----------------------------------

    def to_owners(self, messages: list[NodeMessage]) -> None:
        here: list[NodeMessage] = []
        now = time.monotonic()
        down = {c for c, until in self._down.items() if until > now}
        for m in messages:
            place = self.routes.owner(m.job, down)
            if self.routes.is_here(place):
                here.append(m)
            else:
                away = dataclasses.replace(m, home=self.routes.home_seen_from_elsewhere()) if place.collector else m
                self._queue(self._steps, place, away)
        if here:
            self.rollup.jobs.receive(here)

    def to_homes(self, waits: list[JobWait]) -> None:
        here: list[JobWait] = []
        for w in waits:
            place = self.routes.home(w.home)
            if self.routes.is_here(place):
                here.append(w)
            else:
                self._queue(self._waits, place, w)
        if here:
            self.rollup.nodes.apply(here)

    # ---- taken in from elsewhere (the service) ---------------------------------------------------

    def receive_steps(self, messages: list[NodeMessage], bad: int) -> None:
        self.received_total += len(messages)
        self.bad_total += bad
        if messages:
            self.rollup.jobs.receive(messages)
            self.on_change()

    def receive_waits(self, waits: list[JobWait], bad: int) -> None:
        self.received_total += len(waits)
        self.bad_total += bad
        if waits:
            self.rollup.nodes.apply(waits)

    # ---- the sender ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Send what is queued, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(SEND_SECONDS)  # gather a batch
            await self.flush()

    async def flush(self) -> None:
        calls = [
            self._send(place, q, lambda stub: stub.NodeMessages, node_messages_to_pb, self._steps_undelivered)
            for place, q in self._steps.items()
            if q
        ]
        calls += [
            self._send(place, q, lambda stub: stub.Waits, waits_to_pb, self._drop)
            for place, q in self._waits.items()
            if q
        ]
        if calls:
            await asyncio.gather(*calls)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def _queue(self, queues: dict[Place, deque[T]], place: Place, message: T) -> None:
        q = queues.get(place)
        if q is None:
            q = queues[place] = deque()
        if len(q) >= self.max_queued:
            q.popleft()
            self.dropped_total += 1
        q.append(message)
        self._wake.set()

    async def _send(
        self,
        place: Place,
        q: deque[T],
        rpc: Callable[[jr_grpc.JobRelayStub], Callable[..., Awaitable[object]]],
        to_pb: Callable[[list[T]], object],
        undelivered: Callable[[Place, list[T]], None],
    ) -> None:
        """One batch of ``q`` (at most ``MAX_BATCH``) to ``place`` by ``rpc``; what does not arrive
        goes to ``undelivered``."""
        batch = [q.popleft() for _ in range(min(len(q), MAX_BATCH))]
        if await self._call(place, rpc(jr_grpc.JobRelayStub(self._channel(place))), to_pb(batch)):
            self.sent_total += len(batch)
        else:
            undelivered(place, batch)
        if q:
            self._wake.set()

    def _steps_undelivered(self, place: Place, batch: list[NodeMessage]) -> None:
        if place.collector:  # passed over now: the batch goes to the next collector its keys rank
            self.to_owners(batch)
        else:
            self._drop(place, batch)

    def _drop(self, _place: Place, batch: Sized) -> None:
        self.dropped_total += len(batch)

    async def _call(self, place: Place, method: Callable[..., Awaitable[object]], request: object) -> bool:
        shard = self._shard(place)
        try:
            await method(request, timeout=CALL_TIMEOUT_SECONDS, metadata=shard_metadata(shard))
        except grpc.aio.AioRpcError as err:
            if place.collector:
                self._down[place.collector] = time.monotonic() + DOWN_SECONDS
            log.debug("job messages not delivered", to=shard.name, code=err.code().name)
            return False
        return True

    def _shard(self, place: Place) -> Shard:
        if place.collector:
            return Shard(place.collector, place.collector, self.security)
        return Shard(f"worker-{place.worker}", f"unix:{self.sockets[place.worker]}")

    def _channel(self, place: Place) -> grpc.aio.Channel:
        key = Place(place.collector, -1) if place.collector else place
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = open_shard_channel(self._shard(place))
        return channel
