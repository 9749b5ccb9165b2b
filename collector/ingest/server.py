"""The collector's gRPC server: ingest streams, the query service, health and reflection.

Each agent stream is handled by one task. Its messages arrive as raw bytes and are parsed here,
so a message that is not a valid ``AgentMessage`` is refused with ``INVALID_ARGUMENT`` like any
other bad input (grpc's own deserializer would answer ``INTERNAL``). A refusal closes only that
stream; every other stream and the flusher go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import grpc
import structlog
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from nodeagent.collector.alerts.front import Alerting
from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.ingest.query import QueryService
from nodeagent.collector.ingest.report_path import Ingest, StreamHandle
from nodeagent.collector.ingest.store import StoreWriter
from nodeagent.collector.metrics import MetricsExposition
from nodeagent.core.metrics_http import MetricsHttpServer
from nodeagent.core.transport.channel import KEEPALIVE_OPTIONS
from nodeagent.core.transport.security import ServerSecurity, certificate_names, token_ok
from nodeagent.core.wire.validate import InvalidMessageError, check_hello, check_report
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

log = structlog.get_logger("nodeagent.collector")

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
INGEST_SERVICE = "nodeagent.v1.Ingest"
# How long a half-closed stream is kept open for the acks of its last reports.
FINAL_ACK_WAIT_SECONDS = 2.0
# After this long without a successful commit, new streams are refused (agents fail over).
STORE_FAILING_REFUSE_SECONDS = 10.0
QUERY_SERVICE = "nodeagent.v1.Query"


class HttpListenError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"
    db_path: Path = Path("nodeagent-collector.db")
    security: ServerSecurity = field(default_factory=ServerSecurity)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    flush_seconds: float = 0.05
    settings: CollectorConfig = field(default_factory=CollectorConfig)
    # HOST:PORT of /metrics and /healthz; None: no HTTP listener.
    http_listen: str | None = None


class CollectorServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.writer = StoreWriter(config.db_path)
        self.alerting = Alerting(config.settings.alerts, config.settings.build_sinks())
        self.ingest = Ingest(
            self.writer, self.alerting, detector_config=config.settings.detector, flush_seconds=config.flush_seconds
        )
        # (gRPC status name, reason) -> streams refused; reasons are the _refuse() calls' names.
        self.rejected: dict[tuple[str, str], int] = {}
        self.replaced_total = 0
        self.serving = False
        self.started_monotonic = 0.0
        self.http: MetricsHttpServer | None = None
        self._token = config.security.token()
        self._server: grpc.aio.Server | None = None
        self._flusher: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> int:
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            # Agents ping every 10 s to notice dead links; allow it, and ping them back.
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
            ("grpc.http2.max_ping_strikes", 0),
            *KEEPALIVE_OPTIONS,
        ]
        server = grpc.aio.server(options=options)
        server.add_generic_rpc_handlers([self._ingest_handler()])
        pb_grpc.add_QueryServicer_to_server(QueryService(self.ingest, self._token), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        for name in ("", INGEST_SERVICE, QUERY_SERVICE):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        reflection.enable_server_reflection(
            [INGEST_SERVICE, QUERY_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server
        )
        security = self.config.security
        if security.tls:
            self.port = server.add_secure_port(self.config.listen, security.credentials())
        else:
            self.port = server.add_insecure_port(self.config.listen)
        await server.start()
        self._server = server
        self.started_monotonic = time.monotonic()
        self._flusher = asyncio.create_task(self.ingest.run_flusher())
        self.serving = True
        if self.config.http_listen is not None:
            await self._start_http(self.config.http_listen)
        return self.port

    async def _start_http(self, listen: str) -> None:
        exposition = MetricsExposition(self)
        security = self.config.security
        self.http = MetricsHttpServer(
            listen, exposition.render, health=exposition.health, ssl_context=security.http_ssl_context(),
            name="nodeagent-collector",
        )  # fmt: skip
        try:
            await asyncio.to_thread(self.http.start)
        except OSError as err:
            self.http = None
            await self.stop(0.0)
            raise HttpListenError(f"cannot listen on {listen} (--http-listen): {err.strerror or err}") from err

    @property
    def flusher(self) -> asyncio.Task[None] | None:
        return self._flusher

    async def wait(self) -> None:
        assert self._server is not None
        await self._server.wait_for_termination()

    async def stop(self, grace: float = 2.0) -> None:
        self.serving = False
        if self.http is not None:
            # First, so no scrape reads the store while it closes.
            await asyncio.to_thread(self.http.stop)
            self.http = None
        if self._server is not None:
            await self._server.stop(grace)
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.ingest.flush()
        self.writer.call_sync(self.alerting.close)
        self.writer.close()

    # ---- ingest ----

    def _ingest_handler(self) -> grpc.GenericRpcHandler:
        handler: grpc.RpcMethodHandler[bytes, pb.Ack] = grpc.stream_stream_rpc_method_handler(
            self._stream, request_deserializer=None, response_serializer=pb.Ack.SerializeToString
        )
        return grpc.method_handlers_generic_handler(INGEST_SERVICE, {"Stream": handler})

    async def _stream(self, _requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        if not token_ok(self._token, context.invocation_metadata()):
            await self._refuse(context, grpc.StatusCode.UNAUTHENTICATED, "token", "missing or wrong bearer token")
        if self.ingest.store_failing_for() > STORE_FAILING_REFUSE_SECONDS:
            await self._refuse(
                context, grpc.StatusCode.UNAVAILABLE, "store_failing", "cannot make reports durable now; try another"
            )
        first = await context.read()
        if first is grpc.aio.EOF:  # type: ignore[comparison-overlap]
            return
        hello = self._parse(first)
        if hello is None or hello.WhichOneof("body") != "hello":
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "no_hello", "the first message must be hello")
        node_id = hello.hello.node_id
        try:
            check_hello(hello.hello)
        except InvalidMessageError as err:
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "invalid_hello", str(err))
        if self.config.security.mutual:
            names = certificate_names(context.auth_context())
            if node_id not in names:
                await self._refuse(
                    context, grpc.StatusCode.PERMISSION_DENIED, "certificate_node_mismatch",
                    f"client certificate names {sorted(names)}, not node {node_id!r}",
                )  # fmt: skip
        stream = StreamHandle(node_id, context.peer(), context)
        stream.task = asyncio.current_task()
        previous = self.ingest.attach(stream, hello.hello)
        if previous is not None:
            await self._end_replaced(previous, stream)
        acks = asyncio.create_task(self._write_acks(stream, context))
        try:
            await self._read_reports(stream, context)
            await self._final_acks(stream)
        finally:
            acks.cancel()
            self.ingest.detach(stream)

    async def _read_reports(self, stream: StreamHandle, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        last: dict[int, int] = {}
        while True:
            raw = await context.read()
            if raw is grpc.aio.EOF:  # type: ignore[comparison-overlap]
                return
            message = self._parse(raw)
            if message is None or message.WhichOneof("body") != "report":
                await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "not_a_report", "expected a report")
            report = message.report
            try:
                check_report(report, stream.node_id)
            except InvalidMessageError as err:
                await self._refuse(
                    context, grpc.StatusCode.INVALID_ARGUMENT, "invalid_report", f"seq {report.seq}: {err}"
                )
            if report.seq <= last.get(report.epoch, 0):
                await self._refuse(
                    context, grpc.StatusCode.INVALID_ARGUMENT, "seq_backwards",
                    f"seq {report.seq} after {last[report.epoch]} in epoch {report.epoch}: sequence went backwards",
                )  # fmt: skip
            last[report.epoch] = report.seq
            self.ingest.accept(stream, report, _payload(raw) or report.SerializeToString())

    async def _final_acks(self, stream: StreamHandle) -> None:
        """A client that half-closed still gets the acks of what it sent, once they are durable."""
        deadline = time.monotonic() + FINAL_ACK_WAIT_SECONDS
        while stream.acked_sent < stream.ack_wanted and time.monotonic() < deadline:
            await asyncio.sleep(self.config.flush_seconds)

    async def _write_acks(self, stream: StreamHandle, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        while True:
            await stream.wake.wait()
            stream.wake.clear()
            seq = self.ingest.durable_seq(stream)
            if seq > stream.acked_sent:
                await context.write(pb.Ack(node_id=stream.node_id, epoch=stream.epoch, acked_seq=seq))
                stream.acked_sent = seq

    async def _end_replaced(self, previous: StreamHandle, stream: StreamHandle) -> None:
        # A node has one stream: the newer wins (the old one is usually a half-dead connection
        # the agent already gave up on). Ending it from here finishes that RPC with ABORTED.
        self.replaced_total += 1
        log.info("stream replaced by a newer one", node=stream.node_id, old=previous.peer, new=stream.peer)
        context: Any = previous.context
        # abort() raises AbortError in its caller (this stream's task), not in the stream it ends.
        with contextlib.suppress(grpc.aio.AbortError, grpc.aio.UsageError):
            await context.abort(grpc.StatusCode.ABORTED, "replaced by a newer stream of the same node")
        # The old handler is parked in read(); cancelling it lets the RPC finish with that status.
        if previous.task is not None:
            previous.task.cancel()

    def _parse(self, raw: bytes) -> pb.AgentMessage | None:
        try:
            return pb.AgentMessage.FromString(raw)
        except DecodeError:
            return None

    async def _refuse(
        self, context: grpc.aio.ServicerContext[bytes, pb.Ack], code: grpc.StatusCode, reason: str, detail: str
    ) -> NoReturn:
        """Count and log the refusal, then end the stream: ``abort`` raises, so this never returns."""
        key = (code.name, reason)
        self.rejected[key] = self.rejected.get(key, 0) + 1
        log.warning("stream refused", peer=context.peer(), code=code.name, reason=reason, detail=detail)
        await context.abort(code, detail[:512])


def _payload(raw: bytes) -> bytes | None:
    """The serialized NodeReport inside ``AgentMessage(report=...)``, when it is all the message is."""
    length, shift, index = 0, 0, 1
    while index < len(raw) and index < 11:
        byte = raw[index]
        length |= (byte & 0x7F) << shift
        index += 1
        if not byte & 0x80:
            return raw[index:] if raw[0] == 0x12 and index + length == len(raw) else None
        shift += 7
    return None
