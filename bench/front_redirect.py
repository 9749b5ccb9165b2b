"""What ``serve --workers N``'s front costs: an agent's time to its first ack through the front's
redirect against straight to its worker, and the front's CPU per query fanned out to the workers.

Starts ``nodeagent-collector serve --workers N`` (ports 0, a fresh database) and, for each of
``--sessions`` new nodes, measures on a new channel each time (as an agent that starts or
reconnects):

- direct: hello and one report to the owning worker's port, until the first ack;
- through the front: hello to the front, its UNAVAILABLE with the owner's port in the trailer,
  then the same as direct on that port.

Then, with those nodes stored, ``--queries`` StreamNodes calls to the front (each asked of every
worker over its unix socket and merged page by page) and as many to worker 0 directly on that unix socket, as
the front asks it (its own nodes only; its agent port refuses queries),
and the same for the fleet page's ``/api/fleet``; CPU of the front and the workers from
``/proc`` (psutil) around each run. Prints one line per figure.

    .venv/bin/python bench/front_redirect.py [--workers 2] [--sessions 100] [--queries 300]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc
import psutil

from nodeagent.core.wire.framing import OWNER_PORT_TRAILER, STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve", "--listen", "127.0.0.1:0",
            "--http-listen", "127.0.0.1:0", "--db", str(Path(tmp) / "collector.db"), "--workers", str(args.workers),
        ]  # fmt: skip
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().split() for _ in range(3 + args.workers)]
            front, http = lines[0][-1], lines[1][-1]
            workers = [line[3] for line in lines[3:]]
            _measure(args, proc, front, http, workers)
        finally:
            proc.terminate()
            proc.wait(60)


def _measure(args: argparse.Namespace, proc: subprocess.Popen[str], front: str, http: str, workers: list[str]) -> None:
    direct, redirected = [], []
    for i in range(args.sessions):
        node = f"bench-{i}"
        owner = _redirect(front, node)
        assert owner is not None, "the front named no worker"
        started = time.perf_counter()
        _first_ack(f"127.0.0.1:{owner}", node)
        direct.append(time.perf_counter() - started)
        node = f"bench-front-{i}"
        started = time.perf_counter()
        owner = _redirect(front, node)
        assert owner is not None
        _first_ack(f"127.0.0.1:{owner}", node)
        redirected.append(time.perf_counter() - started)
    _line("first ack, direct to its worker", direct)
    _line("first ack, through the front's redirect", redirected)
    print(f"redirect adds {1000 * (statistics.median(redirected) - statistics.median(direct)):.2f} ms at the median")
    front_proc = psutil.Process(proc.pid)
    worker_procs = [c for c in front_proc.children() if "worker_main" in " ".join(c.cmdline())]

    def cpu(processes: list[psutil.Process]) -> float:
        return sum(p.cpu_times().user + p.cpu_times().system for p in processes)

    # A worker's command line names the spec in the front's runtime directory, beside the sockets.
    spec = next(arg for arg in worker_procs[0].cmdline() if arg.endswith("workers.spec"))
    socket_0 = f"unix:{Path(spec).parent / 'worker0.sock'}"
    for target, label in ((front, "front (fan-out, merge)"), (socket_0, "worker 0 directly")):
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.QueryStub(channel)
            _nodes(stub)
            before_front, before_workers = cpu([front_proc]), cpu(worker_procs)
            started = time.perf_counter()
            for _ in range(args.queries):
                nodes = _nodes(stub)
            wall = (time.perf_counter() - started) / args.queries
            front_ms = 1000 * (cpu([front_proc]) - before_front) / args.queries
            workers_ms = 1000 * (cpu(worker_procs) - before_workers) / args.queries
        print(
            f"StreamNodes via {label}: {nodes} nodes, {1000 * wall:.2f} ms wall, "
            f"front CPU {front_ms:.2f} ms, workers' CPU {workers_ms:.2f} ms per query"
        )
    before_front, before_workers = cpu([front_proc]), cpu(worker_procs)
    started = time.perf_counter()
    for _ in range(args.queries):
        with urllib.request.urlopen(f"http://{http}/api/fleet", timeout=10) as response:
            body = response.read()
    wall = (time.perf_counter() - started) / args.queries
    print(
        f"/api/fleet via the front: {len(body)} bytes, {1000 * wall:.2f} ms wall, front CPU "
        f"{1000 * (cpu([front_proc]) - before_front) / args.queries:.2f} ms, workers' CPU "
        f"{1000 * (cpu(worker_procs) - before_workers) / args.queries:.2f} ms per page"
    )


def _nodes(stub: pb_grpc.QueryStub) -> int:
    """One StreamNodes, read whole: how many nodes it listed."""
    return sum(len(page.nodes) for page in stub.StreamNodes(pb.ListNodesRequest(), timeout=10))


def _redirect(front: str, node: str) -> int | None:
    hello = pb.AgentMessage(hello=pb.NodeInfo(node_id=node, hostname=node)).SerializeToString()
    with grpc.insecure_channel(front) as channel:
        call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b)
        try:
            for _ in call(iter([hello]), timeout=10):
                pass
        except grpc.RpcError as err:
            port = dict(err.trailing_metadata() or ()).get(OWNER_PORT_TRAILER)  # type: ignore[attr-defined]
            return int(port) if port is not None else None
    return None


def _first_ack(target: str, node: str) -> None:
    hello = pb.AgentMessage(hello=pb.NodeInfo(node_id=node, hostname=node)).SerializeToString()
    report = pb.NodeReport(node_id=node, epoch=1, seq=1, time_unix_seconds=time.time())
    report.gpus.add(index=0, uuid="GPU-0", utilization_gpu_ratio=0.5)
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
        )
        responses = call(iter([hello, frame_report(report.SerializeToString())]), timeout=10)
        for ack in responses:
            if ack.acked_seq >= 1:
                responses.cancel()
                return
    raise AssertionError("no ack")


def _line(label: str, seconds: list[float]) -> None:
    ordered = sorted(seconds)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    print(
        f"{label}: median {1000 * statistics.median(ordered):.2f} ms, p90 {1000 * p90:.2f} ms ({len(ordered)} sessions)"
    )


if __name__ == "__main__":
    main()
