"""The agent's sender outlives whatever one session throws at it."""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from nodeagent.agent.delivery.sender import Sender, SenderConfig
from nodeagent.agent.delivery.spool import Spool
from nodeagent.core.transport.channel import ClientSecurity
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.ingest_server import serve_ingest

FAST = SenderConfig(backoff_initial_seconds=0.01, backoff_max_seconds=0.05)


def _spool(count: int) -> Spool:
    spool = Spool()
    for seq in range(1, count + 1):
        report = pb.NodeReport(node_id="n", epoch=spool.epoch, seq=seq, time_unix_seconds=time.time())
        spool.append(seq, report.SerializeToString())
    return spool


def test_streams_ended_mid_batch_do_not_kill_the_sender() -> None:
    sessions: list[int] = []

    async def abort_after_three(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        sessions.append(1)
        for _ in range(3):
            await context.read()
        await context.abort(grpc.StatusCode.ABORTED, "replaced by a newer stream of the same node")

    port = serve_ingest(abort_after_three, 6)
    sender = Sender(_spool(5000), [f"127.0.0.1:{port}"], hello=lambda: pb.NodeInfo(node_id="n"), config=FAST)
    sender.start()
    time.sleep(3)
    alive = sender._thread is not None and sender._thread.is_alive()
    sender.stop()
    assert alive
    assert len(sessions) >= 5  # it kept reconnecting


def test_a_token_file_briefly_empty_costs_a_session_not_the_sender(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    acked: list[int] = []

    async def ack_everything(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        await context.read()  # hello
        while (message := await context.read()) is not grpc.aio.EOF:  # type: ignore[comparison-overlap]
            parsed = pb.AgentMessage.FromString(message)
            if not parsed.HasField("report"):
                continue  # the goodbye of the sender's stop
            seq = parsed.report.seq
            acked.append(seq)
            await context.write(pb.Ack(node_id="n", epoch=spool.epoch, acked_seq=seq))

    spool = _spool(3)
    port = serve_ingest(ack_everything, 8)
    token.write_text("")  # mid-rotation: truncated, not yet rewritten
    sender = Sender(
        spool, [f"127.0.0.1:{port}"], hello=lambda: pb.NodeInfo(node_id="n"),
        security=ClientSecurity(token_file=token), config=FAST,
    )  # fmt: skip
    sender.start()
    time.sleep(0.5)
    token.write_text("t0ken\n")
    delivered = sender.wait_all_acked(time.monotonic() + 5)
    sender.stop()
    assert delivered
    assert acked[-1] == 3


def test_a_collector_that_stops_acknowledging_is_left_for_a_new_stream() -> None:
    """The ack watchdog: a stream that keeps taking reports but acknowledges nothing more for
    ``ack_timeout_seconds`` is closed and a new one opened; there everything is delivered."""
    sessions: list[float] = []

    async def stall_the_first_session(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        sessions.append(time.monotonic())
        first = len(sessions) == 1
        await context.read()  # hello
        while (message := await context.read()) is not grpc.aio.EOF:  # type: ignore[comparison-overlap]
            seq = pb.AgentMessage.FromString(message).report.seq
            if not first or seq <= 10:  # the first session goes quiet after seq 10, reading on
                await context.write(pb.Ack(node_id="n", epoch=spool.epoch, acked_seq=seq))

    spool = _spool(50)
    port = serve_ingest(stall_the_first_session, 20)
    config = SenderConfig(backoff_initial_seconds=0.01, backoff_max_seconds=0.05, ack_timeout_seconds=1.0)
    sender = Sender(spool, [f"127.0.0.1:{port}"], hello=lambda: pb.NodeInfo(node_id="n"), config=config)
    sender.start()
    try:
        delivered = sender.wait_all_acked(time.monotonic() + 15)
    finally:
        sender.stop()
    assert delivered, (len(sessions), spool.stats())
    assert len(sessions) >= 2
    # Not before the watchdog's timeout: the first session was given its second.
    assert sessions[1] - sessions[0] >= 1.0


def test_a_stop_says_a_stopping_goodbye_after_the_acks() -> None:
    """A clean stop leaves as a move does, with ``Goodbye(kind=KIND_STOPPING)``: the collector
    then shows the node stopped, not down."""
    goodbyes: list[pb.Goodbye] = []

    async def ack_and_listen(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        await context.read()  # hello
        while (message := await context.read()) is not grpc.aio.EOF:  # type: ignore[comparison-overlap]
            parsed = pb.AgentMessage.FromString(message)
            if parsed.HasField("goodbye"):
                goodbyes.append(parsed.goodbye)
                continue
            await context.write(pb.Ack(node_id="n", epoch=spool.epoch, acked_seq=parsed.report.seq))

    spool = _spool(3)
    port = serve_ingest(ack_and_listen, 8)
    sender = Sender(spool, [f"127.0.0.1:{port}"], hello=lambda: pb.NodeInfo(node_id="n"), config=FAST)
    sender.start()
    assert sender.wait_all_acked(time.monotonic() + 10)
    sender.stop()
    assert [(g.kind, g.reason) for g in goodbyes] == [(pb.Goodbye.KIND_STOPPING, "stopping")]
