"""Whether the collector this node reports to answers, through the standard gRPC health service
(``grpc.health.v1.Health/Check``).

An unreachable collector warns rather than fails: the node itself is fine, and draining a whole
fleet because its collector is down would turn one outage into many.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

from nodeagent.agent.diag.model import NODE, CheckResult, passed, skipped, warned

TIMEOUT_SECONDS = 2.0


def check(address: str | None, timeout_seconds: float = TIMEOUT_SECONDS) -> CheckResult:
    if address is None:
        return skipped("collector.reachable", NODE, "no collector configured (--collector or a profile)")
    subject = f"collector:{address}"
    hint = f"reports from this node are not getting through: is the collector at {address} running and reachable?"
    # The health check carries no secrets; a collector that requires TLS answers the plaintext
    # handshake with an error, which reads as unreachable here.
    with grpc.insecure_channel(address) as channel:
        health_check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        try:
            reply = health_check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_seconds)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            detail = err.details() if isinstance(err, grpc.Call) else str(err)
            value = f"{code.name if code else 'error'}: {(detail or '').splitlines()[0] if detail else ''}".rstrip(": ")
            return warned("collector.reachable", subject, value, "SERVING", hint)
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return warned("collector.reachable", subject, status, "SERVING", hint)
    return passed("collector.reachable", subject, status, "SERVING")
