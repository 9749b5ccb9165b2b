"""``nodeagent-collector loadgen``: simulated 8-GPU nodes streaming to a collector over real gRPC.

Nodes are spread over worker processes, each an asyncio loop with one HTTP/2 connection per
``NODES_PER_CHANNEL`` nodes, every node on its own ingest stream as an agent would be. Reports
come from the simulator: each worker steps one simulation through ``POOL`` ticks up front, and
each node sends those reports in turn with its own node id, epoch, seq and time merged in (a
serialized protobuf followed by another is their merge), so generating load costs little next to
ingesting it and every report is a realistic 8-GPU one.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from nodeagent.core.transport.channel import ClientSecurity, open_channel
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report, passthrough
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

NODES_PER_CHANNEL = 200
POOL = 120
GRPC_PREFIX_BYTES = 5  # compressed flag + length before every message


@dataclass(frozen=True, slots=True)
class LoadSpec:
    target: str
    nodes: int
    rate_hz: float = 1.0
    duration_seconds: float = 10.0
    processes: int = 2
    scenario: str = "healthy"
    node_prefix: str = "sim"
    security: ClientSecurity = field(default_factory=ClientSecurity)


@dataclass(slots=True)
class LoadResult:
    nodes: int = 0
    seconds: float = 0.0
    sent: int = 0
    acked: int = 0
    streams_failed: int = 0
    streams_reopened: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    payload_bytes: int = 0
    # CPU the generating processes spent (all their threads) between the start and the end of the
    # load, start-up left out: what generating costs next to what ingesting costs.
    cpu_seconds: float = 0.0
    # Sent and acked counts at the middle of the run, to tell a steady backlog from a growing one.
    sent_at_half: int = 0
    acked_at_half: int = 0

    def merge(self, other: LoadResult) -> None:
        for name in (
            "nodes", "sent", "acked", "streams_failed", "streams_reopened", "payload_bytes", "sent_at_half",
            "acked_at_half", "cpu_seconds",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seconds = max(self.seconds, other.seconds)
        for code, count in other.failures.items():
            self.failures[code] = self.failures.get(code, 0) + count

    def to_plain(self) -> dict[str, Any]:
        plain = asdict(self)
        plain["sent_per_second"] = self.sent / self.seconds if self.seconds else 0.0
        plain["acked_per_second"] = self.acked / self.seconds if self.seconds else 0.0
        plain["bytes_per_report"] = self.payload_bytes / self.sent if self.sent else 0.0
        return plain


def run_load(spec: LoadSpec) -> LoadResult:
    """Run the load in worker processes and add up what they saw."""
    workers = max(1, min(spec.processes, spec.nodes))
    shares = [list(range(i, spec.nodes, workers)) for i in range(workers)]
    context = multiprocessing.get_context("spawn")  # grpc does not survive fork
    with context.Pool(workers) as pool:
        results = pool.starmap(_worker, [(spec, share) for share in shares])
    total = LoadResult()
    for result in results:
        total.merge(result)
    return total


def _worker(spec: LoadSpec, indices: list[int]) -> LoadResult:
    return asyncio.run(_work(spec, indices))


async def _work(spec: LoadSpec, indices: list[int]) -> LoadResult:
    info, pool = _report_pool(spec.scenario)
    result = LoadResult(nodes=len(indices))
    channels = [open_channel(spec.target, spec.security) for _ in range(0, len(indices), NODES_PER_CHANNEL)]
    # Connected before any stream starts, as an agent's sender is: hundreds of streams opened on a
    # channel still connecting fail at their first write ("Internal error from Core").
    await asyncio.gather(*(asyncio.wait_for(channel.channel_ready(), 10) for channel in channels))
    start = time.monotonic() + 1.0  # let every stream open before the clock starts
    end = start + spec.duration_seconds
    half = start + spec.duration_seconds / 2
    acked: dict[int, int] = {}
    halves: list[tuple[int, int]] = []
    cpu: list[float] = []

    async def milestones() -> None:
        """CPU time at the start and the end, counts at the middle."""
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        cpu.append(time.process_time())
        await asyncio.sleep(max(0.0, half - time.monotonic()))
        halves.append((result.sent, sum(acked.values())))
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        cpu.append(time.process_time())

    tasks = [
        asyncio.create_task(_node(spec, index, channels[n // NODES_PER_CHANNEL], info, pool, start, end, result, acked))
        for n, index in enumerate(indices)
    ]
    tasks.append(asyncio.create_task(milestones()))
    await asyncio.gather(*tasks)
    result.seconds = spec.duration_seconds
    result.acked = sum(acked.values())
    if halves:
        result.sent_at_half, result.acked_at_half = halves[0]
    if len(cpu) == 2:
        result.cpu_seconds = cpu[1] - cpu[0]
    for channel in channels:
        await channel.close()
    return result


async def _node(
    spec: LoadSpec,
    index: int,
    channel: grpc.aio.Channel,
    info: pb.NodeInfo,
    pool: list[bytes],
    start: float,
    end: float,
    result: LoadResult,
    acked: dict[int, int],
) -> None:
    node_id = f"{spec.node_prefix}-{index:06d}"
    epoch = time.time_ns() // 1000 + index
    period = 1.0 / spec.rate_hz
    hello = pb.AgentMessage(hello=info)
    hello.hello.node_id = hello.hello.hostname = node_id
    opened = await _open(spec, channel, hello.SerializeToString(), index, epoch, acked, result)
    if opened is None:
        return
    call, reader = opened
    phase = "reports"
    try:
        next_at = start + random.uniform(0, period)  # spread the nodes over the period
        seq = 0
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() >= end:
                break
            seq += 1
            suffix = pb.NodeReport(node_id=node_id, epoch=epoch, seq=seq, time_unix_seconds=time.time())
            frame = frame_report(pool[seq % len(pool)] + suffix.SerializeToString())
            await call.write(frame)
            result.sent += 1
            result.payload_bytes += len(frame) + GRPC_PREFIX_BYTES
            next_at += period
        phase = "end"
        # Give the collector a moment to acknowledge the last reports, then hang up.
        deadline = time.monotonic() + 3.0
        while acked.get(index, 0) < seq and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        await _failed(call, phase, result)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


_Call = grpc.aio.StreamStreamCall[bytes, pb.Ack]


async def _open(
    spec: LoadSpec,
    channel: grpc.aio.Channel,
    hello: bytes,
    index: int,
    epoch: int,
    acked: dict[int, int],
    result: LoadResult,
) -> tuple[_Call, asyncio.Task[None]] | None:
    """Start a node's stream as an agent does: on failure, try again after a pause (a few times).

    Hundreds of streams opened at once on one connection occasionally fail at their first write
    ("Internal error from Core", the same with a server that does nothing); an agent's sender
    reconnects in that case, and so does the load generator, counting it."""
    for attempt in range(5):
        call: _Call = channel.stream_stream(
            STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
        )(metadata=spec.security.metadata())

        async def read_acks(call: _Call = call) -> None:
            async for ack in call:
                if ack.epoch == epoch:  # a collector acks a node's earlier epoch when it reconnects
                    acked[index] = ack.acked_seq

        reader = asyncio.create_task(read_acks())
        try:
            await call.write(hello)
            return call, reader
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if attempt == 4:
                await _failed(call, "hello", result)
                return None
            result.streams_reopened += 1
            await asyncio.sleep(0.1 * (attempt + 1))
    return None


async def _failed(call: _Call, phase: str, result: LoadResult) -> None:
    """The stream ended under us; its status says why."""
    result.streams_failed += 1
    key = f"{phase}: {(await call.code()).name}: {await call.details()}"[:120]
    result.failures[key] = result.failures.get(key, 0) + 1


def _report_pool(scenario: str) -> tuple[pb.NodeInfo, list[bytes]]:
    simulation = Simulation(scenario, node_id="pool", seed=1)
    reports = []
    for _ in range(POOL):
        report = simulation.step(1.0)
        report.ClearField("node_id")
        reports.append(report.SerializeToString())
    return simulation.info(), reports
