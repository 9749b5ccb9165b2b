"""The ``JobRelay`` service on a collector's front: each message handed to the worker it belongs
to (a node stage's to the worker that owns its job, ``owner_index``; a wait to the worker its
home names), on the workers' unix sockets. A worker that is down loses that batch (counted): its
jobs' state comes back with their next steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from nodeagent.collector.fleet.fanout import Shard, open_shard_channel
from nodeagent.collector.query.bounds import authorize_operator
from nodeagent.collector.tenants import raw_key
from nodeagent.core.transport.rendezvous import owner_index
from nodeagent.core.transport.security import AccessPolicy
from nodeagent.v1 import jobrelay_pb2 as jr
from nodeagent.v1 import jobrelay_pb2_grpc as jr_grpc

Context = grpc.aio.ServicerContext[Any, Any]
CALL_TIMEOUT_SECONDS = 2.0


class FrontJobRelay(jr_grpc.JobRelayServicer):
    def __init__(self, sockets: Sequence[Path], policy: AccessPolicy, tenants: frozenset[str] = frozenset()) -> None:
        self.policy = policy
        self.tenants = tenants
        self.sockets = tuple(sockets)
        self.forwarded_total = 0
        self.dropped_total = 0
        self._stubs: dict[int, jr_grpc.JobRelayStub] = {}

    async def NodeMessages(self, request: jr.JobNodeMessages, context: Context) -> jr.JobRelayAck:
        await authorize_operator(self.policy, context)
        parts: dict[int, jr.JobNodeMessages] = {}
        workers = len(self.sockets)
        for m in request.messages:
            job = m.step.job if m.HasField("step") else m.leave.job
            parts.setdefault(owner_index(raw_key(job, self.tenants), workers), jr.JobNodeMessages()).messages.append(m)
        for worker, part in parts.items():
            await self._forward(worker, "NodeMessages", part, len(part.messages))
        return jr.JobRelayAck()

    async def Waits(self, request: jr.JobWaitMessages, context: Context) -> jr.JobRelayAck:
        await authorize_operator(self.policy, context)
        parts: dict[int, jr.JobWaitMessages] = {}
        for w in request.waits:
            if w.home.worker < len(self.sockets):
                parts.setdefault(w.home.worker, jr.JobWaitMessages()).waits.append(w)
        for worker, part in parts.items():
            await self._forward(worker, "Waits", part, len(part.waits))
        return jr.JobRelayAck()

    async def _forward(self, worker: int, method: str, request: Any, count: int) -> None:
        stub = self._stubs.get(worker)
        if stub is None:
            channel = open_shard_channel(Shard(f"worker-{worker}", f"unix:{self.sockets[worker]}"))
            stub = self._stubs[worker] = jr_grpc.JobRelayStub(channel)
        try:
            await getattr(stub, method)(request, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError:
            self.dropped_total += count
            return
        self.forwarded_total += count
