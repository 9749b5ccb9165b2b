"""Queries beside ingest: they read on their own threads and connections, never in front of the
flush that gates the acks; they are bounded in time, rows and concurrency; and a history larger
than one message comes back in pages (``StreamHistory``), which the ``history`` command prints.

Each case was a failure: a flood of ``history`` and ``jobs`` queries held a steady agent's acks
for up to 90 s, and ``history NODE --since 1d`` failed at the 1 MiB message limit."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.tools.history_seed import seed_history
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import Collector, cli, free_port, processes
from tests.fakes.ingest_client import hello_message, small_report
from tests.fakes.trees import REPO

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

DAY = 86400.0
BIG = "big-node"
ROWS_PER_MINUTE = 9  # an 8-GPU node: one row per GPU and the node's


@pytest.mark.alone  # asserts a latency bound: run alone, not beside the rest of the suite
def test_a_flood_of_queries_does_not_delay_a_steady_agents_acks(tmp_path: Path) -> None:
    """50 clients asking for 6 hours of a node's history and 3 days of jobs, over and over, while an
    agent streams a report a second: its acks stay within 1 s. (They took 5-20 s when queries ran on the writer's
    thread, in front of the flush whose commit the acks wait for.)"""
    db = tmp_path / "c.db"
    seed_history(db, [BIG, "other-node"], days=3)
    collector = Collector(workers=ONE_PROCESS, db=db, port=free_port())
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            agent = _SteadyAgent(channel, "steady-node")
            agent.start()
            time.sleep(3.0)  # the agent's first acks, before the flood
            outcomes = _flood(collector.address, clients=50, seconds=10.0)
            time.sleep(1.0)
            agent.stop()
    latencies = agent.latencies()
    print(f"acks: p50 {statistics.median(latencies):.3f} s, max {max(latencies):.3f} s; flood: {dict(outcomes)}")
    assert len(latencies) >= 12, latencies
    # The collector answered the flood (each history streamed whole, in pages; a call past a bound
    # is RESOURCE_EXHAUSTED), it did not just turn it away.
    assert outcomes["OK"] + outcomes["RESOURCE_EXHAUSTED"] >= 20, outcomes
    assert max(latencies) < 1.0, f"ack latencies {sorted(latencies)[-5:]}, p50 {statistics.median(latencies):.3f}"


def test_queries_never_wait_for_the_writer_thread(tmp_path: Path) -> None:
    """With the store's writer thread held (a long commit, a lock), history and jobs still answer."""
    db = tmp_path / "c.db"
    seed_history(db, [BIG], days=0.5)

    async def scenario() -> tuple[int, int, int]:
        server = CollectorServer(ServerConfig(listen="127.0.0.1:0", db_path=db))
        port = await server.start()
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            held.set()
            release.wait(30)

        blocker = asyncio.ensure_future(server.writer.call(hold))
        try:
            await asyncio.to_thread(held.wait, 5)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                query = pb_grpc.QueryStub(channel)
                hour = await _drain(query.StreamHistory(pb.HistoryRequest(node_id=BIG, last_seconds=3600), timeout=5))
                jobs = await _drain(query.StreamJobTotals(pb.JobsRequest(last_seconds=DAY), timeout=5), "jobs")
                streamed = await _drain(
                    query.StreamHistory(pb.HistoryRequest(node_id=BIG, last_seconds=DAY), timeout=5)
                )
        finally:
            release.set()
            await blocker
            await server.stop(0.1)
        return hour, jobs, streamed

    hour_rows, jobs, streamed = asyncio.run(scenario())
    assert hour_rows == 60 * ROWS_PER_MINUTE
    assert jobs >= 1
    assert streamed == 720 * ROWS_PER_MINUTE


def test_stream_history_pages_a_history_larger_than_4_mb_and_the_cli_prints_it_all(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    seed_history(db, [BIG], days=2)
    expected = 2 * 1440 * ROWS_PER_MINUTE
    collector = Collector(workers=ONE_PROCESS, db=db, port=free_port())
    with processes() as started:
        started.append(collector.start())
        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        with grpc.insecure_channel(collector.address, options=options) as channel:
            query = pb_grpc.QueryStub(channel)
            request = pb.HistoryRequest(node_id=BIG, last_seconds=14 * DAY)
            pages = list(query.StreamHistory(request, timeout=60))
            small = pb.HistoryRequest(node_id=BIG, last_seconds=3600, step_seconds=300)
            small_pages = list(query.StreamHistory(small, timeout=10))
        as_json = cli("collector", "history", BIG, "--since", "14d", "--json", "--collector", collector.address)
        as_csv = cli("collector", "history", BIG, "--since", "14d", "--csv", "--collector", collector.address)
        table = cli("collector", "history", BIG, "--since", "14d", "--collector", collector.address)
        nobody = subprocess.run(
            [sys.executable, "-m", "nodeagent.collector", "history", "nobody", "--json",
             "--collector", collector.address],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    sizes = [page.ByteSize() for page in pages]
    rows = [row for page in pages for row in page.rows]
    assert sum(sizes) > 4 * 1024 * 1024 and len(pages) > 16
    assert max(sizes) <= 256 * 1024 and max(len(page.rows) for page in pages) <= 1000
    assert len(rows) == expected
    # History's order: the node's rows (-1) first, then each GPU's, each by minute.
    assert [(r.gpu, r.time_unix_seconds) for r in rows] == sorted((r.gpu, r.time_unix_seconds) for r in rows)
    # A small answer is one page.
    assert len(small_pages) == 1
    assert len(small_pages[0].rows) in (12 * ROWS_PER_MINUTE, 13 * ROWS_PER_MINUTE)  # 5-minute steps of an hour
    printed = json.loads(as_json)
    assert len(printed) == expected
    assert as_json == json.dumps(printed, indent=2) + "\n"  # the format of one json.dumps of every row
    assert printed[0]["gpu"] is None and printed[0]["time_unix_seconds"] == rows[0].time_unix_seconds
    assert [r["time_unix_seconds"] for r in printed] == [r.time_unix_seconds for r in rows]
    csv_lines = as_csv.splitlines()
    assert csv_lines[0].startswith("time_unix_seconds,gpu,samples,") and len(csv_lines) == expected + 1
    assert len(table.splitlines()) == expected + 1 and table.startswith("TIME")
    # A node the history does not hold: still a JSON list, and exit 2 (as replay --node says it).
    assert (nobody.returncode, nobody.stdout) == (2, "[]\n"), nobody.stderr


def test_a_caller_beyond_its_share_of_queries_is_refused_at_once(tmp_path: Path) -> None:
    from nodeagent.collector.query.bounds import QueryBounds

    db = tmp_path / "c.db"
    seed_history(db, [BIG], days=0.1)

    async def scenario() -> tuple[grpc.StatusCode, str, float, list[int]]:
        config = ServerConfig(listen="127.0.0.1:0", db_path=db, query=QueryBounds(max_per_caller=2))
        server = CollectorServer(config)
        port = await server.start()
        release = threading.Event()
        # Both reader threads busy: the next queries hold their slots while they wait for one.
        blockers = [asyncio.ensure_future(server.reader.call(60, lambda _reads: release.wait(30))) for _ in range(2)]
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                query = pb_grpc.QueryStub(channel)
                request = pb.HistoryRequest(node_id=BIG, last_seconds=3600)
                waiting = [asyncio.ensure_future(_drain(query.StreamHistory(request, timeout=20))) for _ in range(2)]
                assert server.queries is not None
                for _ in range(100):
                    if server.queries.in_flight.total == 2:
                        break
                    await asyncio.sleep(0.05)
                start = time.monotonic()
                try:
                    await _drain(query.StreamJobTotals(pb.JobsRequest(), timeout=10), "jobs")
                    code, detail = grpc.StatusCode.OK, ""
                except grpc.aio.AioRpcError as err:
                    code, detail = err.code(), err.details() or ""
                refused_after = time.monotonic() - start
                release.set()
                answered = [await w for w in waiting]
        finally:
            release.set()
            await asyncio.gather(*blockers)
            await server.stop(0.1)
        return code, detail, refused_after, answered

    code, detail, refused_after, answered = asyncio.run(scenario())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, detail)
    assert "--max-queries-per-caller" in detail and "\n" not in detail
    assert refused_after < 1.0
    assert answered == [60 * ROWS_PER_MINUTE] * 2  # the two it held were answered once a reader was free


def test_query_slots_count_per_caller_and_in_all() -> None:
    from nodeagent.collector.query.bounds import InFlight, QueryBounds
    from nodeagent.core.transport.refused import QueryRefusedError

    slots = InFlight(QueryBounds(max_per_caller=2, max_in_flight=3))
    slots.take("ipv4:10.0.0.1")
    slots.take("ipv4:10.0.0.1")
    with pytest.raises(QueryRefusedError, match=r"ipv4:10\.0\.0\.1 has 2 queries running"):
        slots.take("ipv4:10.0.0.1")
    slots.take("ipv4:10.0.0.2")  # another caller has its own share ...
    with pytest.raises(QueryRefusedError, match="its limit"):
        slots.take("ipv4:10.0.0.3")  # ... within the collector's cap
    slots.give_back("ipv4:10.0.0.1")
    slots.take("ipv4:10.0.0.3")
    assert slots.total == 3 and slots.by_caller == {"ipv4:10.0.0.1": 1, "ipv4:10.0.0.2": 1, "ipv4:10.0.0.3": 1}


def test_a_query_past_its_time_bound_is_cut_with_a_clear_status(tmp_path: Path, monkeypatch: Any) -> None:
    """A read that outlasts ``read_seconds`` is interrupted in SQLite and answered
    RESOURCE_EXHAUSTED in one line; the readers go on answering."""
    from nodeagent.collector.query.bounds import QueryBounds
    from nodeagent.collector.store import reader

    db = tmp_path / "c.db"
    seed_history(db, [BIG, "other-node"], days=1)
    # Every look at the deadline costs a millisecond: the reads below take seconds, not milliseconds.
    monkeypatch.setattr(reader, "PROGRESS_STEPS", 200)
    expired = reader.ReadContext.expired

    def slow(self: reader.ReadContext) -> bool:
        time.sleep(0.001)
        return expired(self)

    monkeypatch.setattr(reader.ReadContext, "expired", slow)

    async def scenario() -> tuple[dict[str, tuple[grpc.StatusCode, str, float]], int]:
        config = ServerConfig(listen="127.0.0.1:0", db_path=db, query=QueryBounds(read_seconds=0.3))
        server = CollectorServer(config)
        port = await server.start()
        seen = {}
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                query = pb_grpc.QueryStub(channel)
                day = pb.HistoryRequest(node_id=BIG, last_seconds=DAY, step_seconds=86400)
                calls = {
                    "StreamJobTotals": lambda: _drain(
                        query.StreamJobTotals(pb.JobsRequest(last_seconds=DAY), timeout=20)
                    ),
                    "StreamHistory": lambda: _drain(query.StreamHistory(day, timeout=20)),
                }
                for name, call in calls.items():
                    start = time.monotonic()
                    try:
                        await call()
                        seen[name] = (grpc.StatusCode.OK, "", time.monotonic() - start)
                    except grpc.aio.AioRpcError as err:
                        seen[name] = (err.code(), err.details() or "", time.monotonic() - start)
                monkeypatch.undo()
                after = await _drain(query.StreamHistory(pb.HistoryRequest(node_id=BIG, last_seconds=600), timeout=10))
        finally:
            await server.stop(0.1)
        return seen, after

    seen, after = asyncio.run(scenario())
    for name, (code, detail, seconds) in seen.items():
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (name, code, detail)
        assert "ran past its 0.3 s bound" in detail and "\n" not in detail, (name, detail)
        assert seconds < 5.0, (name, seconds)
    assert after == 10 * ROWS_PER_MINUTE


# ---- helpers ----


async def _drain(call: Any, field: str = "rows") -> int:
    """A streamed answer read to its end: how many items (``field``) its pages held."""
    items = 0
    async for page in call:
        items += len(getattr(page, field))
    return items


def _flood(address: str, clients: int, seconds: float) -> Counter[str]:
    """``clients`` threads asking, one call after another, for 6 hours of a node's history (3,240
    rows, every one streamed) and 3 days of jobs; one turned away as over its share ("busy") tries
    again 50 ms later. The status of every call, counted."""
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(index: int) -> None:
        with grpc.insecure_channel(address) as channel:
            query = pb_grpc.QueryStub(channel)
            while time.monotonic() < end:
                try:
                    if index % 2:
                        list(query.StreamJobTotals(pb.JobsRequest(last_seconds=3 * DAY), timeout=30))
                    else:
                        list(query.StreamHistory(pb.HistoryRequest(node_id=BIG, last_seconds=6 * 3600), timeout=30))
                    code = "OK"
                except grpc.RpcError as err:
                    busy = "queries running" in (err.details() or "")  # over its share: not an answer
                    code = "busy" if busy else err.code().name
                with lock:
                    outcomes[code] += 1
                if code == "busy":
                    time.sleep(0.05)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return outcomes


class _SteadyAgent:
    """One node's stream: a report a second, the time from each report to the ack that covers it."""

    def __init__(self, channel: grpc.Channel, node: str) -> None:
        self.node = node
        self.sent: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self._stop = threading.Event()
        self._call = channel.stream_stream(
            STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
        )
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def latencies(self) -> list[float]:
        """Per report sent: seconds until its ack (until now for one never acked)."""
        now = time.monotonic()
        return [self.acked.get(seq, now) - sent for seq, sent in sorted(self.sent.items())]

    def _messages(self) -> Iterator[bytes]:
        yield hello_message(self.node)
        seq = 0
        while not self._stop.is_set():
            seq += 1
            report = small_report(self.node, seq)
            report.time_unix_seconds = time.time()
            self.sent[seq] = time.monotonic()
            yield frame_report(report.SerializeToString())
            self._stop.wait(1.0)

    def _read(self) -> None:
        acked = 0
        try:
            for ack in self._call(self._messages(), timeout=120):
                now = time.monotonic()
                for seq in range(acked + 1, ack.acked_seq + 1):
                    self.acked[seq] = now
                acked = max(acked, ack.acked_seq)
        except grpc.RpcError:
            pass
