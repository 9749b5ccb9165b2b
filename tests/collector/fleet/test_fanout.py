"""Asking every shard at once: answers in order, the local header sent, a slow, refusing or
absent shard one line each and never waiting past the timeout."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from nodeagent.collector.fleet.fanout import LOCAL_HEADER, Shard, ShardClients, ask_all_sync, ask_stream_sync
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import free_port


class _Fake(pb_grpc.QueryServicer):
    def __init__(self, name: str, delay: float = 0.0, refuse: bool = False) -> None:
        self.name, self.delay, self.refuse = name, delay, refuse
        self.local: list[bool] = []

    async def LatestReport(self, request: Any, context: Any) -> pb.NodeReport:
        self.local.append(LOCAL_HEADER in tuple(context.invocation_metadata()))
        if self.refuse:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not an operator\nsecond line")
        await asyncio.sleep(self.delay)
        return pb.NodeReport(node_id=f"n-{self.name}")

    async def StreamHistory(self, request: Any, context: Any) -> None:
        for minute in range(3):
            await context.write(pb.HistoryResponse(rows=[pb.HistoryRow(time_unix_seconds=60.0 * minute)]))
            await asyncio.sleep(self.delay)


async def _serve(fake: _Fake, address: str) -> grpc.aio.Server:
    server = grpc.aio.server()
    pb_grpc.add_QueryServicer_to_server(fake, server)
    server.add_insecure_port(address)
    await server.start()
    return server


def test_answers_in_order_with_the_local_header_over_tcp_and_unix(tmp_path: Path) -> None:
    tcp, unix, slow, refusing = _Fake("tcp"), _Fake("unix"), _Fake("slow", delay=5.0), _Fake("no", refuse=True)
    sock = f"unix:{tmp_path}/w.sock"
    ports = [free_port() for _ in range(3)]
    dead = free_port()  # nothing listens here

    async def run() -> tuple[list[Any], float, list[Any]]:
        servers = [
            await _serve(tcp, f"127.0.0.1:{ports[0]}"),
            await _serve(unix, sock),
            await _serve(slow, f"127.0.0.1:{ports[1]}"),
            await _serve(refusing, f"127.0.0.1:{ports[2]}"),
        ]
        shards = [
            Shard("a", f"127.0.0.1:{ports[0]}"),
            Shard("worker-1", sock),
            Shard("slow", f"127.0.0.1:{ports[1]}"),
            Shard("refusing", f"127.0.0.1:{ports[2]}"),
            Shard("dead", f"127.0.0.1:{dead}"),
        ]
        clients = ShardClients(shards)
        try:
            started = time.monotonic()
            answers = await clients.ask_all("LatestReport", pb.LatestReportRequest(), 1.0)
            took = time.monotonic() - started
            again = await clients.ask_all("LatestReport", pb.LatestReportRequest(), 1.0, local=False)
        finally:
            await clients.close()
            for server in servers:
                await server.stop(0)
        return answers, took, again

    answers, took, again = asyncio.run(run())
    assert [a.shard for a in answers] == ["a", "worker-1", "slow", "refusing", "dead"]
    assert [a.reply.node_id for a in answers[:2]] == ["n-tcp", "n-unix"]
    assert answers[0].error == "" and answers[0].answered
    assert answers[2].error == "DEADLINE_EXCEEDED: no answer within 1 s"
    assert answers[3].error == "PERMISSION_DENIED: not an operator second line"
    assert answers[4].error.startswith("UNAVAILABLE: ") and "\n" not in answers[4].error
    assert all(a.reply is None for a in answers[2:])
    # The slow shard held nobody past the timeout (and a margin for the event loop).
    assert took < 1.0 + 0.8, took
    assert tcp.local == [True, False] and unix.local == [True, False]
    assert again[0].answered and again[1].answered


def test_sync_helpers_for_the_command_line() -> None:
    fake, slow = _Fake("x"), _Fake("y", delay=3.0)
    ports = [free_port(), free_port()]

    async def start() -> list[grpc.aio.Server]:
        return [await _serve(fake, f"127.0.0.1:{ports[0]}"), await _serve(slow, f"127.0.0.1:{ports[1]}")]

    loop = asyncio.new_event_loop()
    servers = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        shards = [Shard("x", f"127.0.0.1:{ports[0]}"), Shard("y", f"127.0.0.1:{ports[1]}")]
        answers = ask_all_sync(shards, "LatestReport", pb.LatestReportRequest(), 1.0)
        assert answers[0].answered and not answers[1].answered
        pages = ask_stream_sync(shards, "StreamHistory", pb.HistoryRequest(node_id="n"), 1.0)
        assert [r.time_unix_seconds for p in pages[0].pages for r in p.rows] == [0.0, 60.0, 120.0]  # type: ignore[attr-defined]
        # The slow shard's second page comes 3 s after its first: past the 1 s for each.
        assert pages[1].error == "DEADLINE_EXCEEDED: no answer within 1 s"
    finally:
        for server in servers:
            asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
