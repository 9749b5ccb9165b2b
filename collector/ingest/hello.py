"""The start of every agent stream, the same at a collector and at a front (``serve --workers``):
the bearer token (the node token or a tenant's), the hello within its timeout, its checks, and
with mutual TLS the node's certificate. Each refusal goes through the caller's ``refuse`` (which
counts, logs and aborts)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn

import grpc
from google.protobuf.message import DecodeError

from nodeagent.core.transport.security import AccessPolicy, ServerSecurity, certificate_names, token_ok
from nodeagent.core.wire.validate import InvalidMessageError, check_hello
from nodeagent.v1 import nodeagent_pb2 as pb

Context = grpc.aio.ServicerContext[bytes, pb.Ack]
Refuse = Callable[[Context, grpc.StatusCode, str, str], Awaitable[NoReturn]]


def parse_message(raw: bytes) -> pb.AgentMessage | None:
    """One stream message; None when it is not an ``AgentMessage``."""
    try:
        message = pb.AgentMessage.FromString(raw)
    except DecodeError:
        return None
    # Unknown fields would otherwise live on in memory (hello, the latest report) and in the store.
    message.DiscardUnknownFields()
    return message


async def read_hello(
    context: Context, *, tokens: Sequence[str], timeout: float, security: ServerSecurity, policy: AccessPolicy,
    refuse: Refuse, after_token: Callable[[], Awaitable[None]] | None = None,
) -> pb.NodeInfo | None:  # fmt: skip
    """The stream's checked hello; None when the client closed before saying it. ``after_token``
    runs once the token is checked and before the hello is read (the store's health)."""
    if not token_ok(tokens, context.invocation_metadata()):
        await refuse(context, grpc.StatusCode.UNAUTHENTICATED, "token", "missing or wrong bearer token")
    if after_token is not None:
        await after_token()
    try:
        first = await asyncio.wait_for(context.read(), timeout)
    except TimeoutError:
        await refuse(context, grpc.StatusCode.DEADLINE_EXCEEDED, "hello_timeout", f"no hello within {timeout:g} s")
    if first is grpc.aio.EOF:  # type: ignore[comparison-overlap]
        return None
    message = parse_message(first)
    if message is None or message.WhichOneof("body") != "hello":
        await refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "no_hello", "the first message must be hello")
    hello = message.hello
    try:
        check_hello(hello)
    except InvalidMessageError as err:
        await refuse(context, grpc.StatusCode.INVALID_ARGUMENT, "invalid_hello", str(err))
    if security.mutual:
        names = certificate_names(context.auth_context())
        if hello.node_id not in names:
            await refuse(
                context, grpc.StatusCode.PERMISSION_DENIED, "certificate_node_mismatch",
                f"client certificate names {sorted(names)}, not node {hello.node_id!r}",
            )  # fmt: skip
        if policy.is_reader(names):
            await refuse(
                context, grpc.StatusCode.PERMISSION_DENIED, "certificate_not_a_node",
                f"client certificate {sorted(names)} is an operator or scraper identity, not a node",
            )  # fmt: skip
    return hello
