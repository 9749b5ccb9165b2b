"""gRPC server reflection behind the operator role: it describes the services only to those who may call them."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import grpc
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from nodeagent.collector.query.bounds import authorize_operator
from nodeagent.core.transport.security import AccessPolicy


class OperatorReflection(reflection_aio.ReflectionServicer):
    def __init__(self, service_names: Iterable[str], policy: AccessPolicy) -> None:
        super().__init__(list(service_names))
        self.policy = policy

    async def ServerReflectionInfo(  # type: ignore[override]
        self,
        request_iterator: AsyncIterable[reflection_pb2.ServerReflectionRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        await authorize_operator(self.policy, context)
        # The stubs call the base method a coroutine; it is an async generator.
        responses: Any = super().ServerReflectionInfo(request_iterator, context)
        async for response in responses:
            yield response


def enable_operator_reflection(service_names: Iterable[str], server: grpc.aio.Server, policy: AccessPolicy) -> None:
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # type: ignore[no-untyped-call]
        OperatorReflection(service_names, policy), server
    )
