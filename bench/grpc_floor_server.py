"""The reference for the ingest benchmark: a grpc.aio server that does nothing but read each
agent message and acknowledge it, on the collector's wire contract. What the collector costs
beyond this is validation, deduplication, the detector, alert rules and the store.

    python bench/grpc_floor_server.py   # prints "listening on 127.0.0.1:PORT", serves until killed
"""

from __future__ import annotations

import asyncio

import grpc

from nodeagent.core.wire.framing import STREAM_ACCEPTED_HEADER
from nodeagent.v1 import nodeagent_pb2 as pb

_ACK = pb.Ack(node_id="floor", epoch=1, acked_seq=1)


async def _stream(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
    # Accepted at once, as the collector says it: without it the load generator waits 10 s per
    # stream for a status an older collector would have sent (it made each reference step 16 s).
    await context.send_initial_metadata(((STREAM_ACCEPTED_HEADER, "accepted"),))
    while True:
        message = await context.read()
        if message is grpc.aio.EOF:  # type: ignore[comparison-overlap]
            return
        await context.write(_ACK)


async def main() -> None:
    server = grpc.aio.server()
    handler: grpc.RpcMethodHandler[bytes, pb.Ack] = grpc.stream_stream_rpc_method_handler(
        _stream, request_deserializer=None, response_serializer=pb.Ack.SerializeToString
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("nodeagent.v1.Ingest", {"Stream": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
