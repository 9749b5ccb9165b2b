"""The Ingest service: one task per agent stream, from hello to its last ack.

Each agent stream is handled by one task. Its messages arrive as raw bytes and are parsed here,
so a message that is not a valid ``AgentMessage`` is refused with ``INVALID_ARGUMENT`` like any
other bad input (grpc's own deserializer would answer ``INTERNAL``). A refusal closes only that
stream; every other stream and the flusher go on. Fields this collector does not know are
discarded as a message is parsed, so nothing a client adds beyond the schema is kept or stored.

An agent that moves to another collector says ``goodbye`` on its stream: no report may follow
it (``INVALID_ARGUMENT``), its last acks still go out, and when the stream ends the node is
shown ``moved`` and left out of NodeDown until a new stream of it arrives. An agent that stops
cleanly says a goodbye of the stopping kind: the node is shown ``stopped`` instead, with an info
``NodeStopped`` and no NodeDown unless ``[alerts] node_stopped_down_seconds`` asks for one.

A stream must say hello within ``hello_timeout_seconds``, and one source (the peer's address,
without its port) may hold at most ``max_streams_per_source`` streams at once: idle or silent
clients cannot pile up, and a source over its bound is refused without touching the others.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NoReturn

import grpc
import structlog

from nodeagent.collector.ingest.hello import parse_message, read_hello
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle, StreamRefusedError
from nodeagent.collector.ingest.source_streams import SourceStreams
from nodeagent.collector.tenants import Scope, TenantConflictError, Tenants, stream_tenant
from nodeagent.core.transport.security import AccessPolicy, ServerSecurity, presented_token
from nodeagent.core.wire.framing import STREAM_ACCEPTED_HEADER
from nodeagent.core.wire.proof import check_report
from nodeagent.core.wire.validate import InvalidMessageError, check_goodbye
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.collector")

# How long a half-closed stream is kept open for the acks of its last reports.
FINAL_ACK_WAIT_SECONDS = 2.0
# After this long without a successful commit, new streams are refused (agents fail over).
STORE_FAILING_REFUSE_SECONDS = 10.0
# A real agent sends hello at once; a client that does not is holding a stream for nothing.
DEFAULT_HELLO_TIMEOUT_SECONDS = 5.0
# Each node keeps one stream; a source with more is many nodes behind one address (NAT) or a flood.
DEFAULT_MAX_STREAMS_PER_SOURCE = 256


class IngestStreams:
    """The agents' streams into ``ingest``: hello, reports, acks, goodbye, refusals (counted)."""

    def __init__(
        self,
        ingest: Ingest,
        security: ServerSecurity,
        policy: AccessPolicy,
        *,
        hello_timeout_seconds: float,
        max_streams_per_source: int,
        flush_seconds: float,
        tenants: Tenants | None = None,
    ) -> None:
        self.ingest = ingest
        self.security = security
        self.policy = policy
        self.hello_timeout_seconds = hello_timeout_seconds
        self.max_streams_per_source = max_streams_per_source
        self.flush_seconds = flush_seconds
        self._tokens = security.node_tokens()
        self.tenants = tenants or Tenants()
        self._token_tenants = self.tenants.read_tokens()
        # (gRPC status name, reason) -> streams refused; reasons are the _refuse() calls' names.
        self.rejected: dict[tuple[str, str], int] = {}
        self.replaced_total = 0
        self.streams = SourceStreams()

    async def stream(self, _requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        await self.streams.serve(context, self.max_streams_per_source, self._refuse, self._serve_stream)

    async def _serve_stream(self, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        hello = await read_hello(
            context, tokens=self._tokens, timeout=self.hello_timeout_seconds, security=self.security,
            policy=self.policy, refuse=self._refuse, after_token=lambda: self._store_works(context),
        )  # fmt: skip
        if hello is None:
            return
        node_id = hello.node_id
        scope = await self._scope(context, node_id)
        stream = StreamHandle(node_id, context.peer(), context)
        stream.task = asyncio.current_task()
        try:
            previous = self.ingest.attach(stream, hello)
        except StreamRefusedError as refused:
            await self._refuse(context, grpc.StatusCode[refused.code], refused.reason, refused.detail)
            return
        acks: asyncio.Task[None] | None = None
        # From here on the node points at this stream: whatever ends it, it lets go of the node.
        try:
            # Accepted: say so now, before the agent writes reports (it waits for this header, so
            # a refusal above reaches it as its own status, not as a write that failed).
            await context.send_initial_metadata(((STREAM_ACCEPTED_HEADER, "accepted"),))
            log.info(
                "node connected", node=node_id, peer=context.peer(), replaced=previous is not None,
                tenant=scope.tenant if scope is not None else None,
            )  # fmt: skip
            if previous is not None:
                await self._end_replaced(previous, stream)
            acks = asyncio.create_task(self._write_acks(stream, context))
            await self._read_reports(stream, context, scope)
            await self._final_acks(stream)
        finally:
            if acks is not None:
                acks.cancel()
            self.ingest.detach(stream)

    async def _scope(self, context: grpc.aio.ServicerContext[bytes, pb.Ack], node_id: str) -> Scope | None:
        """The names of the stream's jobs scoped by its credential's tenant (None: no ``[tenants]``);
        a token and a certificate of two tenants are refused."""
        if not self.tenants.tenants:
            return None
        token_tenant = self._token_tenants.get(presented_token(context.invocation_metadata()) or "", "")
        try:
            tenant = stream_tenant(self.tenants, token_tenant, node_id, mutual=self.security.mutual)
        except TenantConflictError as err:
            await self._refuse(context, grpc.StatusCode.PERMISSION_DENIED, "tenant_conflict", str(err))
        return Scope(self.tenants, tenant)

    async def _read_reports(
        self, stream: StreamHandle, context: grpc.aio.ServicerContext[bytes, pb.Ack], scope: Scope | None
    ) -> None:
        last: dict[int, int] = {}
        while True:
            raw = await context.read()
            if raw is grpc.aio.EOF:  # type: ignore[comparison-overlap]
                return
            message = parse_message(raw)
            body = message.WhichOneof("body") if message is not None else None
            if body == "goodbye" and message is not None and not stream.goodbye:
                try:
                    check_goodbye(message.goodbye)
                except InvalidMessageError as err:
                    await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "invalid_goodbye", str(err))
                stream.goodbye = True
                stream.stopping = message.goodbye.kind == pb.Goodbye.KIND_STOPPING
                log.info("node says goodbye", node=stream.node_id, reason=message.goodbye.reason,
                         stopping=stream.stopping, routing_key=message.goodbye.routing_key)  # fmt: skip
                continue
            if stream.goodbye:
                await self._refuse(
                    context, grpc.StatusCode.INVALID_ARGUMENT, "after_goodbye", "nothing may follow goodbye on a stream"
                )
            if message is None or body != "report":
                await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "not_a_report", "expected a report")
            report = message.report
            # Serialized again, not the bytes received: those would keep any unknown fields. The
            # check proves most reports valid from these bytes (core/wire/proof.py).
            serialized = report.SerializeToString()
            try:
                check_report(report, stream.node_id, serialized)
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
            if scope is not None:
                scope.report(report)  # its jobs known by its tenant from here on
                serialized = report.SerializeToString()  # their names scoped
            try:
                self.ingest.accept(stream, report, serialized)
            except StreamRefusedError as refused:
                await self._refuse(context, grpc.StatusCode[refused.code], refused.reason, refused.detail)

    async def _final_acks(self, stream: StreamHandle) -> None:
        """A client that half-closed still gets the acks of what it sent, once they are durable."""
        deadline = time.monotonic() + FINAL_ACK_WAIT_SECONDS
        while stream.acked_sent < stream.ack_wanted and time.monotonic() < deadline:
            await asyncio.sleep(self.flush_seconds)

    async def _write_acks(self, stream: StreamHandle, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        while True:
            await stream.wake.wait()
            stream.wake.clear()
            if stream.attach_ack is not None:
                epoch, seq = stream.attach_ack
                stream.attach_ack = None
                await context.write(pb.Ack(node_id=stream.node_id, epoch=epoch, acked_seq=seq, attached=True))
                if epoch == stream.epoch:
                    stream.acked_sent = max(stream.acked_sent, seq)
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
        try:
            await context.abort(grpc.StatusCode.ABORTED, "replaced by a newer stream of the same node")
        except grpc.aio.AbortError:
            pass  # abort() raises in its caller (this stream's task), not in the stream it ends
        except Exception as err:
            # The old RPC ended already (its agent gave up on it while this process was paused,
            # and its end has not reached its handler yet): gRPC refuses a status for it
            # (ExecuteBatchError, UsageError). Let out of here, that error would end this stream's
            # handler with no status at all (gRPC drops it), and leave the node on a dead stream.
            log.info(
                "replaced stream had ended already", node=stream.node_id, old=previous.peer, error=type(err).__name__
            )
        # The old handler is parked in read(); cancelling it lets the RPC finish with that status.
        if previous.task is not None:
            previous.task.cancel()

    async def _store_works(self, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        """After the token: a collector whose store has not committed for a while refuses new
        streams, so that agents fail over."""
        if self.ingest.flusher.failing_for() > STORE_FAILING_REFUSE_SECONDS:
            await self._refuse(
                context, grpc.StatusCode.UNAVAILABLE, "store_failing", "cannot make reports durable now; try another"
            )

    async def _refuse(
        self, context: grpc.aio.ServicerContext[bytes, pb.Ack], code: grpc.StatusCode, reason: str, detail: str
    ) -> NoReturn:
        """Count and log the refusal, then end the stream: ``abort`` raises, so this never returns."""
        key = (code.name, reason)
        self.rejected[key] = self.rejected.get(key, 0) + 1
        log.warning("stream refused", peer=context.peer(), code=code.name, reason=reason, detail=detail)
        await context.abort(code, detail[:512])
