"""The one builder of a collector's gRPC server, for a collector (``server.py``) and a front
(``workers/front.py``) alike: its options, the ingest stream, the Query service, health and
reflection, bound on ``--listen``.

What differs stays with the caller: a collector adds its front's unix socket, its query service
(built once the port is bound) and its own job stage and says SERVING at once; a front adds the
job stage that forwards to its workers and says SERVING while a worker is up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from nodeagent.collector.query.reflection import enable_operator_reflection
from nodeagent.core.transport.channel import KEEPALIVE_OPTIONS
from nodeagent.core.transport.security import AccessPolicy, ServerSecurity
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

INGEST_SERVICE = "nodeagent.v1.Ingest"
QUERY_SERVICE = "nodeagent.v1.Query"
# The names health answers for: the server as a whole, and each service.
HEALTH_NAMES = ("", INGEST_SERVICE, QUERY_SERVICE)

StreamMethod = Callable[[Any, grpc.aio.ServicerContext[bytes, pb.Ack]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BuiltServer:
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    # The port --listen is bound to (the one the OS chose for port 0).
    port: int


def build_server(
    *, listen: str, security: ServerSecurity, policy: AccessPolicy, max_receive_bytes: int, max_send_bytes: int,
    hello_timeout_seconds: float, stream: StreamMethod, queries: pb_grpc.QueryServicer | None,
) -> BuiltServer:  # fmt: skip
    """The server, its services added and ``listen`` bound (``RuntimeError`` when it cannot be);
    not started, health not yet set. ``queries`` None: the caller adds its query service before
    the start (a collector's needs the bound port: its fleet fan-out)."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_receive_bytes),
        ("grpc.max_send_message_length", max_send_bytes),
        # Agents ping every 10 s to notice dead links; allow it, and ping them back.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        # A connection that never finishes its handshake (silent TCP) is closed as soon as a
        # stream that never says hello would be, not after grpc's default of two minutes.
        ("grpc.server_handshake_timeout_ms", max(1000, int(hello_timeout_seconds * 1000))),
        # gRPC sets SO_REUSEPORT by default: a second collector on the same port would start
        # and silently take half of the agents. Binding must fail instead.
        ("grpc.so_reuseport", 0),
        *KEEPALIVE_OPTIONS,
    ]
    server = grpc.aio.server(options=options)
    handler: grpc.RpcMethodHandler[bytes, pb.Ack] = grpc.stream_stream_rpc_method_handler(
        stream, request_deserializer=None, response_serializer=pb.Ack.SerializeToString
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(INGEST_SERVICE, {"Stream": handler})])
    if queries is not None:
        pb_grpc.add_QueryServicer_to_server(queries, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    # Health stays open (it says only SERVING or not); reflection is the operators'.
    enable_operator_reflection(
        [INGEST_SERVICE, QUERY_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server, policy
    )
    port = server.add_secure_port(listen, security.credentials()) if security.tls else server.add_insecure_port(listen)
    return BuiltServer(server, health_servicer, port)
