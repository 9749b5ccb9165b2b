"""``nodeagent-collector loadgen``: simulated 8-GPU nodes streaming to a collector over real gRPC.

Nodes are spread over worker processes, each an asyncio loop with one HTTP/2 connection per
``NODES_PER_CHANNEL`` nodes, every node on its own ingest stream as an agent's would be: a hello,
the collector's answer (accepted, or a front's redirect to the worker that owns the node, which
it follows once, at once, on the same host as an agent does), then reports, and the acks read.

Reports come from the simulator: each worker steps one simulation through ``POOL`` ticks up
front, and each node sends those reports in turn with its own node id, epoch, seq and time merged
in (a serialized protobuf followed by another is their merge) and framed without re-encoding
(``frame_report``), so every report is a realistic 8-GPU one and generating it costs little next
to ingesting it. The load generator shares the collector's cores in the benchmark, so what it
spends per message bounds what it can show: one clock per process writes every node that is due
each ``TICK_SECONDS`` at once, instead of a sleeping task per node, which halves its CPU per
message (grpc.aio, 1,000 nodes in one process against bench/grpc_floor_server.py: 240 us with a
task per node, 120-145 us with the shared clock at 20-100 ms; the sync API's request iterators, a
thread per stream, 950 us). What is left is grpc.aio's own: about 45 us a write in its Cython
layer, the rest asyncio's wake-ups for the writes and the acks.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from nodeagent.core.transport.channel import ClientSecurity, open_channel
from nodeagent.core.wire.framing import (
    OWNER_PORT_TRAILER,
    STREAM_ACCEPTED_HEADER,
    STREAM_METHOD,
    frame_report,
    passthrough,
)
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb

NODES_PER_CHANNEL = 200
POOL = 120
GRPC_PREFIX_BYTES = 5  # compressed flag + length before every message
# How often a process's clock writes the reports that are due: larger batches cost less per
# message, and a report leaves at most this late.
TICK_SECONDS = 0.05
# How long a hello waits for the collector's answer: accepted, refused or redirected.
ANSWER_WAIT_SECONDS = 10.0
OPEN_ATTEMPTS = 5


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
    # Streams a front sent to another port (OWNER_PORT_TRAILER), each followed once.
    streams_redirected: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    # Reports sent to each HOST:PORT the nodes' streams ended up on (a front's workers, or the one).
    sent_by_target: dict[str, int] = field(default_factory=dict)
    payload_bytes: int = 0
    # CPU the generating processes spent (all their threads) between the start and the end of the
    # load, start-up left out: what generating costs next to what ingesting costs.
    cpu_seconds: float = 0.0
    # Sent and acked counts at the middle of the run, to tell a steady backlog from a growing one.
    sent_at_half: int = 0
    acked_at_half: int = 0

    def merge(self, other: LoadResult) -> None:
        for name in (
            "nodes", "sent", "acked", "streams_failed", "streams_reopened", "streams_redirected", "payload_bytes",
            "sent_at_half", "acked_at_half", "cpu_seconds",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seconds = max(self.seconds, other.seconds)
        for mine, theirs in ((self.failures, other.failures), (self.sent_by_target, other.sent_by_target)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count

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


_Call = grpc.aio.StreamStreamCall[bytes, pb.Ack]


@dataclass(slots=True, eq=False)
class _Node:
    """One simulated node's session: its stream, where it ended up, how far it got."""

    index: int
    node_id: str
    epoch: int
    hello: bytes
    phase: float  # its offset in the period: the nodes' reports spread over it
    target: str = ""
    call: _Call | None = None
    reader: asyncio.Task[None] | None = None
    seq: int = 0
    acked: int = 0


def _worker(spec: LoadSpec, indices: list[int]) -> LoadResult:
    return asyncio.run(_work(spec, indices))


async def _work(spec: LoadSpec, indices: list[int]) -> LoadResult:
    info, pool = _report_pool(spec.scenario)
    result = LoadResult(nodes=len(indices))
    period = 1.0 / spec.rate_hz
    nodes = [_new_node(spec, index, info, period) for index in indices]
    channels: list[grpc.aio.Channel] = []
    redirected = await _open_all(spec, spec.target, nodes, channels, result, may_redirect=True)
    host = spec.target.rpartition(":")[0]  # the host the agent dialled, [v6] brackets kept
    for port in sorted(redirected):
        await _open_all(spec, f"{host}:{port}", redirected[port], channels, result, may_redirect=False)
    live = [node for node in nodes if node.call is not None]
    start = time.monotonic() + 0.5  # let the last streams settle before the clock starts
    end = start + spec.duration_seconds
    half = start + spec.duration_seconds / 2
    cpu: list[float] = []

    async def milestones() -> None:
        """CPU time at the start and the end, counts at the middle."""
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        cpu.append(time.process_time())
        await asyncio.sleep(max(0.0, half - time.monotonic()))
        result.sent_at_half, result.acked_at_half = sum(n.seq for n in nodes), sum(n.acked for n in nodes)
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        cpu.append(time.process_time())

    timer = asyncio.create_task(milestones())
    if live:
        await _drive(live, pool, start, end, period, result)
    await timer
    await _finish(live, result)
    result.seconds = spec.duration_seconds
    result.sent = sum(node.seq for node in nodes)
    result.acked = sum(node.acked for node in nodes)
    for node in nodes:
        if node.seq:
            result.sent_by_target[node.target] = result.sent_by_target.get(node.target, 0) + node.seq
    if len(cpu) == 2:
        result.cpu_seconds = cpu[1] - cpu[0]
    for channel in channels:
        await channel.close()
    return result


def _new_node(spec: LoadSpec, index: int, info: pb.NodeInfo, period: float) -> _Node:
    node_id = f"{spec.node_prefix}-{index:06d}"
    hello = pb.AgentMessage(hello=info)
    hello.hello.node_id = hello.hello.hostname = node_id
    epoch = time.time_ns() // 1000 + index
    return _Node(index, node_id, epoch, hello.SerializeToString(), random.uniform(0, period))


async def _open_all(
    spec: LoadSpec, target: str, nodes: Sequence[_Node], channels: list[grpc.aio.Channel], result: LoadResult,
    *, may_redirect: bool,
) -> dict[str, list[_Node]]:  # fmt: skip
    """Open the nodes' streams to ``target``, ``NODES_PER_CHANNEL`` to a connection; the nodes a
    front redirected, by the port it named."""
    opened = [open_channel(target, spec.security) for _ in range(0, len(nodes), NODES_PER_CHANNEL)]
    channels.extend(opened)
    # Connected before any stream starts, as an agent's sender is: hundreds of streams opened on a
    # channel still connecting fail at their first write ("Internal error from Core").
    await asyncio.gather(*(asyncio.wait_for(channel.channel_ready(), 10) for channel in opened))
    ports = await asyncio.gather(
        *(
            _open(spec, opened[n // NODES_PER_CHANNEL], target, node, result, may_redirect)
            for n, node in enumerate(nodes)
        )
    )
    redirected: dict[str, list[_Node]] = {}
    for node, port in zip(nodes, ports, strict=True):
        if port:
            redirected.setdefault(port, []).append(node)
    return redirected


async def _open(
    spec: LoadSpec, channel: grpc.aio.Channel, target: str, node: _Node, result: LoadResult, may_redirect: bool
) -> str:
    """Say hello as an agent does and wait for the answer: accepted (the node's call is set), a
    redirect (its port returned), or a failure, tried again after a pause a few times.

    Hundreds of streams opened at once on one connection occasionally fail at their first write
    ("Internal error from Core", the same with a server that does nothing); an agent's sender
    reconnects in that case, and so does the load generator, counting it."""
    for attempt in range(OPEN_ATTEMPTS):
        call: _Call = channel.stream_stream(
            STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
        )(metadata=spec.security.metadata())
        try:
            await call.write(node.hello)
            headers = await asyncio.wait_for(asyncio.shield(call.initial_metadata()), ANSWER_WAIT_SECONDS)
            if not any(key == STREAM_ACCEPTED_HEADER for key, _value in headers):
                await asyncio.wait_for(asyncio.shield(call.code()), ANSWER_WAIT_SECONDS)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
            pass
        if not call.done():  # accepted (or an older collector that says nothing)
            node.call, node.target = call, target
            node.reader = asyncio.create_task(_read_acks(call, node))
            return ""
        port = _owner_port(await call.trailing_metadata())
        if port and (await call.code()) == grpc.StatusCode.UNAVAILABLE:
            if may_redirect:
                result.streams_redirected += 1
                return port
            await _failed(call, "redirected twice", result)
            return ""
        if attempt == OPEN_ATTEMPTS - 1:
            await _failed(call, "hello", result)
            return ""
        result.streams_reopened += 1
        await asyncio.sleep(0.1 * (attempt + 1))
    return ""


async def _read_acks(call: _Call, node: _Node) -> None:
    async for ack in call:
        if ack.epoch == node.epoch:  # a collector acks a node's earlier epoch when it reconnects
            node.acked = ack.acked_seq


async def _drive(nodes: list[_Node], pool: list[bytes], start: float, end: float, period: float,
                 result: LoadResult) -> None:  # fmt: skip
    """Until ``end``, write each node's report when its turn in the period comes, every node that
    is due at once; a node is written at most once per batch (one write in flight per stream)."""
    order = sorted(nodes, key=lambda node: node.phase)
    turn, round_start = 0, start
    while (now := time.monotonic()) < end:
        due: list[_Node] = []
        while len(due) < len(order) and round_start + order[turn].phase <= now:
            due.append(order[turn])
            turn += 1
            if turn == len(order):
                turn, round_start = 0, round_start + period
        if due:
            await _write(due, pool, result)
        wait = round_start + order[turn].phase - time.monotonic()
        await asyncio.sleep(min(max(TICK_SECONDS, wait), max(0.0, end - time.monotonic())))


async def _write(due: list[_Node], pool: list[bytes], result: LoadResult) -> None:
    writing: list[_Node] = []
    frames: list[bytes] = []
    now = time.time()
    for node in due:
        if node.call is None:  # its stream failed
            continue
        seq = node.seq + 1
        suffix = pb.NodeReport(node_id=node.node_id, epoch=node.epoch, seq=seq, time_unix_seconds=now)
        frames.append(frame_report(pool[seq % len(pool)] + suffix.SerializeToString()))
        writing.append(node)
    outcomes = await asyncio.gather(
        *(node.call.write(frame) for node, frame in zip(writing, frames, strict=True) if node.call is not None),
        return_exceptions=True,
    )
    for node, frame, outcome in zip(writing, frames, outcomes, strict=True):
        if isinstance(outcome, grpc.aio.AioRpcError | asyncio.InvalidStateError):
            await _end(node, "reports", result)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            node.seq += 1
            result.payload_bytes += len(frame) + GRPC_PREFIX_BYTES


async def _finish(nodes: list[_Node], result: LoadResult) -> None:
    """Give the collector a moment to acknowledge the last reports, then hang up."""
    deadline = time.monotonic() + 3.0
    while any(node.acked < node.seq for node in nodes if node.call is not None) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    calls = [node for node in nodes if node.call is not None]
    outcomes = await asyncio.gather(*(node.call.done_writing() for node in calls if node.call), return_exceptions=True)
    for node, outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, grpc.aio.AioRpcError | asyncio.InvalidStateError):
            await _end(node, "end", result)
    readers = [node.reader for node in nodes if node.reader is not None]
    for reader in readers:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)


async def _end(node: _Node, phase: str, result: LoadResult) -> None:
    assert node.call is not None
    await _failed(node.call, phase, result)
    node.call = None


async def _failed(call: _Call, phase: str, result: LoadResult) -> None:
    """The stream ended under us; its status says why."""
    result.streams_failed += 1
    key = f"{phase}: {(await call.code()).name}: {await call.details()}"[:120]
    result.failures[key] = result.failures.get(key, 0) + 1


def _owner_port(trailers: Any) -> str:
    for key, value in trailers or ():
        if key == OWNER_PORT_TRAILER:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return text if text.isdigit() else ""
    return ""


def _report_pool(scenario: str) -> tuple[pb.NodeInfo, list[bytes]]:
    simulation = Simulation(scenario, node_id="pool", seed=1)
    reports = []
    for _ in range(POOL):
        report = simulation.step(1.0)
        report.ClearField("node_id")
        reports.append(report.SerializeToString())
    return simulation.info(), reports
