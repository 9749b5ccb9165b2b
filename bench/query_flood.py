"""What a flood of queries does to a steady agent's acks and to the collector's memory.

Seeds days of history for a few simulated 8-GPU nodes straight through the store
(``tools/history_seed.py``: seconds, not days of streaming), starts ``nodeagent-collector serve``
on it, and streams one steady agent at 1 report/s (a simulated 8-GPU report with its own epoch
and seq) whose every report is timed from its write to the ack that covers it. First a window
with no flood, then one with ``--clients`` concurrent callers asking, one call after another,
for ``jobs --since 14d`` and ``history NODE --since 14d`` (StreamJobTotals and StreamHistory, as
those commands ask), each call bounded in time,
the flood bounded in calls. Prints, per window: the agent's ack latency (p50, p99, max) and the
collector's peak resident memory; and what the flood got (answers, rows, refusals by status).
Reports sent in the flood window that are acknowledged late are waited for (up to
``--drain-seconds``); one never acknowledged counts as its wait until then.

``--slow-http-clients N`` also holds N slow clients on the collector's and a real agent's HTTP port during the
flood (each writes its request a byte every half second and never finishes it; one closed by
the collector is reopened) while a scraper asks /metrics afresh every half second: it prints the
share of those scrapes answered 200 within 5 s.

The flood runs in a process of its own, so the bench's own reading of acks does not share an
interpreter lock with it. It prints figures; it asserts nothing.

    python bench/query_flood.py [--nodes 3] [--days 7] [--clients 50] [--flood-seconds 20]
                                [--quiet-seconds 10] [--slow-http-clients N] [--max-queries-per-caller N]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import psutil

from nodeagent.core.wire.framing import STREAM_METHOD, frame_report, passthrough
from nodeagent.tools.history_seed import seed_history
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parent.parent
DAY = 86400.0
CALL_TIMEOUT_SECONDS = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3, help="Nodes with seeded history.")
    parser.add_argument("--days", type=float, default=7.0, help="Days of history per node.")
    parser.add_argument("--clients", type=int, default=50, help="Concurrent callers in the flood.")
    parser.add_argument("--quiet-seconds", type=float, default=10.0)
    parser.add_argument("--flood-seconds", type=float, default=20.0)
    parser.add_argument(
        "--max-calls", type=int, default=500, help="Answered calls at most (busy refusals not counted)."
    )
    parser.add_argument("--drain-seconds", type=float, default=60.0, help="Wait this long for late acks.")
    parser.add_argument("--slow-http-clients", type=int, default=0)
    parser.add_argument(
        "--slow-sources", type=int, default=1,
        help="Addresses the slow clients connect from (127.0.0.2 and up); the scrapes come from 127.0.0.1.",
    )  # fmt: skip
    parser.add_argument(
        "--max-queries-per-caller", type=int, default=None,
        help="Passed to serve (a collector that has the flag): let the flood's one address run more at once.",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="query-flood-") as tmp:
        db = Path(tmp) / "collector.db"
        nodes = [f"history-{i}" for i in range(args.nodes)]
        start = time.monotonic()
        rows = seed_history(db, nodes, args.days)
        print(f"seeded {args.nodes} nodes x {args.days:g} days ({rows:,} minute rows, "
              f"{db.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - start:.1f} s")  # fmt: skip
        # One collector process (--workers 1): the steady agent speaks the ingest stream raw and does
        # not follow a front's redirect to the worker that owns its node (a real agent does).
        command = [sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve",
                   "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--db", str(db),
                   "--workers", "1"]  # fmt: skip
        if args.max_queries_per_caller is not None:
            command += ["--max-queries-per-caller", str(args.max_queries_per_caller)]
        server = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            address = server.stdout.readline().split()[-1]
            http = server.stdout.readline().split()[-1]
            targets = {"collector": http}
            agent = None
            if args.slow_http_clients:
                # A real agent streaming to the same collector, for its own /metrics under the same clients.
                agent_http = f"127.0.0.1:{_free_port()}"
                agent = subprocess.Popen(
                    [sys.executable, "-m", "nodeagent.agent", "--log-level", "warning", "run", "--collector",
                     address, "--node-id", "metrics-agent", "--simulate", "healthy", "--interval", "1",
                     "--metrics-listen", agent_http],
                    cwd=REPO, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                _wait_for_metrics(agent_http)
                targets["agent"] = agent_http
            try:
                asyncio.run(_run(args, address, targets, nodes[0], psutil.Process(server.pid)))
            finally:
                if agent is not None:
                    agent.terminate()
                    agent.wait(timeout=30)
        finally:
            server.terminate()
            server.wait(timeout=30)


async def _run(
    args: argparse.Namespace, address: str, targets: dict[str, str], node: str, collector: psutil.Process
) -> None:
    memory = _PeakMemory(collector)
    memory.start()
    async with grpc.aio.insecure_channel(address) as channel:
        agent = _SteadyAgent(channel, "steady-node")
        await agent.start()
        await asyncio.sleep(2.0)  # the first acks, before anything is measured
        memory.mark()
        quiet_from = time.monotonic()
        await asyncio.sleep(args.quiet_seconds)
        quiet = agent.window(quiet_from, time.monotonic()), memory.mark()
        flood_from = time.monotonic()
        flood = await asyncio.to_thread(_flood_in_a_process, args, address, targets, node)
        flood_to = time.monotonic()
        drained = await agent.drain(flood_to, args.drain_seconds)
        flooded = agent.window(flood_from, flood_to), memory.mark()
        await agent.stop()
    memory.stop()
    print(f"collector {address}; steady agent: 1 report/s; flood: {args.clients} callers for "
          f"{args.flood_seconds:g} s (at most {args.max_calls} calls), half jobs --since 14d, half "
          f"history {node} --since 14d")  # fmt: skip
    print(f"{'window':<10} {'reports':>7} {'ack p50 s':>10} {'ack p99 s':>10} {'ack max s':>10} {'peak RSS MB':>12}")
    for name, (latencies, peak) in (("no flood", quiet), ("flood", flooded)):
        print(f"{name:<10} {len(latencies):>7} {_pct(latencies, 50):>10.3f} {_pct(latencies, 99):>10.3f} "
              f"{max(latencies, default=0.0):>10.3f} {peak / 1e6:>12.1f}")  # fmt: skip
    if not drained:
        print(f"  (reports of the flood window still unacknowledged {args.drain_seconds:g} s after it: "
              "counted as waiting until then)")  # fmt: skip
    rows = flood.pop("history_rows")
    seconds = flood.pop("seconds")
    print(f"flood ({seconds:.1f} s), answers by method and status: "
          + ", ".join(f"{k} {v}" for k, v in sorted(flood.items()) if not k.startswith("http"))
          + f"; history rows received {rows:,}")  # fmt: skip
    for name in targets if args.slow_http_clients else ():
        asked, ok = flood.get(f"http_asked {name}", 0), flood.get(f"http_200 {name}", 0)
        print(f"{name} /metrics during the flood with {args.slow_http_clients} slow clients held (from "
              f"{args.slow_sources} address(es)): {ok} of {asked} fresh scrapes from 127.0.0.1 answered 200 within "
              f"5 s ({ok / asked if asked else 0.0:.2f}); slow clients reopened "
              f"{flood.get(f'http_slow_reopened {name}', 0)} times")  # fmt: skip


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if q < 100 else max(values)


class _PeakMemory:
    """The collector's resident memory, sampled every 50 ms; ``mark`` returns the peak since the last."""

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def mark(self) -> int:
        peak, self.peak = self.peak, 0
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return


class _SteadyAgent:
    """One simulated 8-GPU node at 1 report/s; each report timed from its write to its ack."""

    def __init__(self, channel: grpc.aio.Channel, node_id: str) -> None:
        self.channel = channel
        self.node_id = node_id
        self.sent: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        simulation = Simulation("healthy", node_id=self.node_id, seed=1, start_time=time.time())
        epoch = time.time_ns() // 1000
        call = self.channel.stream_stream(
            STREAM_METHOD, request_serializer=passthrough, response_deserializer=pb.Ack.FromString
        )()
        await call.write(pb.AgentMessage(hello=simulation.info()).SerializeToString())

        async def write() -> None:
            seq = 0
            next_at = time.monotonic()
            while True:
                seq += 1
                report = simulation.step(0.0 if seq == 1 else 1.0)
                report.epoch, report.seq, report.time_unix_seconds = epoch, seq, time.time()
                self.sent[seq] = time.monotonic()
                await call.write(frame_report(report.SerializeToString()))
                next_at += 1.0
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

        async def read() -> None:
            acked = 0
            async for ack in call:
                now = time.monotonic()
                if ack.epoch == epoch:
                    for seq in range(acked + 1, ack.acked_seq + 1):
                        self.acked[seq] = now
                    acked = max(acked, ack.acked_seq)

        self._tasks = [asyncio.create_task(write()), asyncio.create_task(read())]

    def window(self, start: float, end: float) -> list[float]:
        """Ack latency of each report sent in [start, end); one never acked: until now."""
        now = time.monotonic()
        return [self.acked.get(seq, now) - sent for seq, sent in sorted(self.sent.items()) if start <= sent < end]

    async def drain(self, until: float, seconds: float) -> bool:
        """Wait (at most ``seconds``) until every report sent before ``until`` is acknowledged."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(seq in self.acked for seq, sent in self.sent.items() if sent < until):
                return True
            await asyncio.sleep(0.1)
        return False

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# ---- the flood, in its own process ----


def _flood_in_a_process(args: argparse.Namespace, address: str, targets: dict[str, str], node: str) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return dict(pool.apply(_flood, (vars(args), address, targets, node)))


def _flood(args: dict[str, Any], address: str, targets: dict[str, str], node: str) -> dict[str, Any]:
    stop = threading.Event()
    counts: Counter[str] = Counter()
    http_threads = []
    for name, http in targets.items() if args["slow_http_clients"] else ():
        host, port = http.rsplit(":", 1)
        for i in range(args["slow_http_clients"]):
            source = f"127.0.0.{2 + i % args['slow_sources']}"
            http_threads.append(
                threading.Thread(target=_slow_client, args=(host, int(port), source, name, stop, counts))
            )
        http_threads.append(threading.Thread(target=_scraper, args=(http, name, stop, counts)))
    for thread in http_threads:
        thread.daemon = True
        thread.start()
    start = time.monotonic()
    result = asyncio.run(_flood_calls(args, address, node, counts))
    result["seconds"] = time.monotonic() - start
    stop.set()
    for thread in http_threads:
        thread.join(10)
    result.update({k: v for k, v in counts.items() if k.startswith("http")})
    return result


async def _flood_calls(args: dict[str, Any], address: str, node: str, counts: Counter[str]) -> dict[str, Any]:
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    end = time.monotonic() + args["flood_seconds"]
    calls = {"left": args["max_calls"]}
    rows = {"n": 0}
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        query = pb_grpc.QueryStub(channel)
        request = pb.HistoryRequest(node_id=node, last_seconds=14 * DAY)

        async def history() -> None:
            async for page in query.StreamHistory(request, timeout=CALL_TIMEOUT_SECONDS):
                rows["n"] += len(page.rows)

        async def jobs() -> None:
            async for _page in query.StreamJobTotals(
                pb.JobsRequest(last_seconds=14 * DAY), timeout=CALL_TIMEOUT_SECONDS
            ):
                pass

        async def client(index: int) -> None:
            call, name = (jobs, "jobs") if index % 2 else (history, "history")
            while time.monotonic() < end and calls["left"] > 0:
                try:
                    await call()
                    outcome = "OK"
                except grpc.aio.AioRpcError as err:
                    details = err.details() or ""
                    busy = "queries running" in details or "queries, its limit" in details
                    outcome = "busy" if busy else err.code().name
                counts[f"{name} {outcome}"] += 1
                if outcome == "busy":
                    await asyncio.sleep(0.05)  # turned away at once: try again a little later
                else:
                    calls["left"] -= 1

        await asyncio.gather(*(client(i) for i in range(args["clients"])))
    return {"history_rows": rows["n"], **{k: v for k, v in counts.items() if " " in k}}


def _slow_client(host: str, port: int, source: str, name: str, stop: threading.Event, counts: Counter[str]) -> None:
    """Holds a connection from ``source`` that writes its request a byte every half second and
    never ends it."""
    request = b"GET /metrics HTTP/1.1\r\nHost: bench\r\nUser-Agent: slow" + b"w" * 10_000
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=5, source_address=(source, 0)) as sock:
                for i in range(len(request)):
                    if stop.wait(0.5):
                        return
                    sock.sendall(request[i : i + 1])
        except OSError:
            pass
        counts[f"http_slow_reopened {name}"] += 1


def _scraper(http: str, name: str, stop: threading.Event, counts: Counter[str]) -> None:
    """A fresh scrape every half second, as Prometheus from its own address (127.0.0.1)."""
    while not stop.wait(0.5):
        counts[f"http_asked {name}"] += 1
        try:
            with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as answer:
                answer.read()
                if answer.status == 200:
                    counts[f"http_200 {name}"] += 1
        except OSError:
            pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_metrics(http: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{http}/metrics", timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the agent's /metrics at {http} never answered")


if __name__ == "__main__":
    main()
