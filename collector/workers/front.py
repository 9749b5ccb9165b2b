"""The front's gRPC server on ``--listen``: it sends each agent to the worker that owns its node,
and answers the Query service by asking every worker (``front_query``).

An agent's stream says hello; the front checks it as a collector does (the node token, the
hello itself, with mutual TLS the certificate's node) and ends the stream with UNAVAILABLE and
the owner's port in the trailer ``OWNER_PORT_TRAILER``: the agent dials that port on the same
host, once, at once. The owner is ``owner_index(node_id, N)``: a node's stream stays on the worker
that owns its node id whatever jobs it runs (the hello's ``routing_key`` is ignored). A worker
that is restarting is UNAVAILABLE without a trailer (the agent retries as after any failure).
Health is SERVING while at least one worker is up: a worker that cannot start must not take the
other workers' agents away with it (docs/fleet-scale.md).
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

import grpc
import structlog
from grpc_health.v1 import health, health_pb2

from nodeagent.collector.ingest.hello import read_hello
from nodeagent.collector.ingest.source_streams import SourceStreams
from nodeagent.collector.jobrelay.front import FrontJobRelay
from nodeagent.collector.service.grpc_server import HEALTH_NAMES, build_server
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.workers.supervisor import Supervisor
from nodeagent.core.transport.rendezvous import owner_index
from nodeagent.core.transport.security import AccessPolicy
from nodeagent.core.wire.framing import OWNER_PORT_TRAILER
from nodeagent.v1 import jobrelay_pb2_grpc as jr_grpc
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

log = structlog.get_logger("nodeagent.collector")


class FrontServer:
    def __init__(self, config: ServerConfig, supervisor: Supervisor, queries: pb_grpc.QueryServicer) -> None:
        self.config = config
        self.supervisor = supervisor
        self.queries = queries
        self.policy = AccessPolicy(config.security)
        self._tokens = config.security.node_tokens()
        # Per worker: streams sent to it. By reason: streams refused here.
        self.redirects_total = [0] * len(supervisor.workers)
        self.refused_total: dict[str, int] = {}
        self.streams = SourceStreams()
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self.job_relay: FrontJobRelay | None = None
        self._health: health.aio.HealthServicer | None = None
        self._health_tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Bind ``--listen`` and serve (``RuntimeError`` when it cannot be bound); returns the port."""
        config = self.config
        built = build_server(
            listen=config.listen, security=config.security, policy=self.policy,
            max_receive_bytes=config.max_message_bytes, max_send_bytes=config.max_message_bytes,
            hello_timeout_seconds=config.hello_timeout_seconds, stream=self._stream, queries=self.queries,
        )  # fmt: skip
        server, self.port, self._health = built.server, built.port, built.health
        # The job roll-up's messages from other collectors, each to the worker it belongs to.
        spec = self.supervisor.spec
        self.job_relay = FrontJobRelay(
            [spec.socket_path(i) for i in range(spec.workers)], self.policy, config.settings.tenants.names
        )
        jr_grpc.add_JobRelayServicer_to_server(self.job_relay, server)
        await server.start()
        self._server = server
        await self._set_health()
        self.supervisor.on_change.append(self._health_changed)
        return self.port

    async def stop(self, grace: float = 1.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)

    def _health_changed(self) -> None:
        task = asyncio.create_task(self._set_health())
        self._health_tasks.add(task)
        task.add_done_callback(self._health_tasks.discard)

    async def _set_health(self) -> None:
        if self._health is None:
            return
        up = self.supervisor.any_up and not self.supervisor.stopping
        status = health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in HEALTH_NAMES:
            await self._health.set(name, status)

    # ---- the redirect ----

    async def _stream(self, _requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        # The bound a collector keeps per source: streams that never say hello cannot pile up here either.
        await self.streams.serve(context, self.config.max_streams_per_source, self._refuse, self._redirect)

    async def _redirect(self, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        # The checks a worker would make, made here: a refused agent hears it from the front.
        hello = await read_hello(
            context, tokens=self._tokens, timeout=self.config.hello_timeout_seconds, security=self.config.security,
            policy=self.policy, refuse=self._refuse,
        )  # fmt: skip
        if hello is None:
            return
        index = owner_index(hello.node_id, len(self.supervisor.workers))
        worker = self.supervisor.workers[index]
        if not worker.up:
            await self._refuse(
                context, grpc.StatusCode.UNAVAILABLE, "worker_down",
                f"node {hello.node_id} is served by worker {index}, which is restarting; try again",
            )  # fmt: skip
        self.redirects_total[index] += 1
        log.debug("node sent to its worker", node=hello.node_id, worker=index, port=worker.port)
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"node {hello.node_id} is served by worker {index} on port {worker.port}",
            trailing_metadata=((OWNER_PORT_TRAILER, str(worker.port)),),
        )

    async def _refuse(
        self, context: grpc.aio.ServicerContext[bytes, pb.Ack], code: grpc.StatusCode, reason: str, detail: str
    ) -> NoReturn:
        self.refused_total[reason] = self.refused_total.get(reason, 0) + 1
        log.warning("stream refused", peer=context.peer(), code=code.name, reason=reason, detail=detail)
        await context.abort(code, detail[:512])
