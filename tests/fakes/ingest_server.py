"""An ingest server whose stream handler a test writes itself, in a thread, for a bounded time."""

from __future__ import annotations

import asyncio
import threading

import grpc

from nodeagent.v1 import nodeagent_pb2 as pb


def serve_ingest(behaviour: object, seconds: float) -> int:
    """Run an ingest server with ``behaviour`` (the ``Ingest/Stream`` handler) in a thread for
    ``seconds``; returns its port on 127.0.0.1."""
    ready = threading.Event()
    port: list[int] = []

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(
            behaviour, request_deserializer=None, response_serializer=pb.Ack.SerializeToString
        )
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("nodeagent.v1.Ingest", {"Stream": handler})]
        )
        port.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        ready.set()
        await asyncio.sleep(seconds)
        await server.stop(0)

    threading.Thread(target=asyncio.run, args=(main(),), daemon=True).start()
    ready.wait(10)
    return port[0]
