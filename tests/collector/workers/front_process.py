"""A real ``serve --workers N`` process for the front's tests: its lines read, its workers found,
and a bare client that says hello to the front and follows its redirect."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from nodeagent.core.wire.framing import OWNER_PORT_TRAILER, STREAM_METHOD
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.ingest_client import framed
from tests.fakes.trees import REPO

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
START_SECONDS = 60.0


@dataclass
class Front:
    proc: subprocess.Popen[str]
    address: str
    http: str
    db: Path
    # Per worker index: its agent port and database.
    ports: list[int] = field(default_factory=list)
    dbs: list[Path] = field(default_factory=list)
    # Per worker that did not start: why, as the front said it.
    not_started: dict[int, str] = field(default_factory=dict)
    log: Path = Path()

    def worker_pids(self) -> list[int]:
        """The worker processes now (the front's children running worker_main)."""
        children = psutil.Process(self.proc.pid).children()
        return sorted(c.pid for c in children if "worker_main" in " ".join(_cmdline(c)))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def _cmdline(process: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return process.cmdline()
    return []


@contextlib.contextmanager
def running_front(
    tmp: Path, workers: int = 2, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[Front]:
    """``serve --workers N`` on ports 0 (``env`` added to its environment); stopped (SIGKILL past a
    minute) however the test ends."""
    db = tmp / "collector.db"
    command = [
        sys.executable, "-m", "nodeagent.collector", "--log-level", "info", "serve", "--listen", "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0", "--db", str(db), "--workers", str(workers), *args,
    ]  # fmt: skip
    log = (tmp / "front.log").open("w")
    proc = subprocess.Popen(
        command, cwd=REPO, env={**ENV, **(env or {})}, stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        lines = read_lines(proc, 3 + workers, START_SECONDS)
        assert lines[0].startswith("listening on "), f"{lines} {(tmp / 'front.log').read_text()[-3000:]}"
        front = Front(
            proc, lines[0].split()[-1], lines[1].split()[-1], Path(lines[2].split()[-1]), log=tmp / "front.log"
        )
        for index, line in enumerate(lines[3:]):
            # "worker I on HOST:PORT database PATH", or "worker I not started (WHY); restarting it"
            words = line.split()
            assert words[:2] == ["worker", str(index)], lines
            if words[2] == "not":
                front.ports.append(0)
                front.dbs.append(Path())
                front.not_started[index] = line.partition("(")[2].rpartition(")")[0]
                continue
            front.ports.append(int(words[3].rpartition(":")[2]))
            front.dbs.append(Path(words[5]))
        yield front
    finally:
        children = [] if proc.poll() is not None else psutil.Process(proc.pid).children(recursive=True)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        log.close()


def read_lines(proc: subprocess.Popen[str], count: int, timeout: float) -> list[str]:
    """The first ``count`` lines of ``proc``'s stdout, waiting at most ``timeout`` seconds for them."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        while len(lines) < count and (line := proc.stdout.readline()):
            lines.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return lines + [""] * (count - len(lines))


def hello(node: str, routing_key: str = "") -> bytes:
    info = pb.NodeInfo(node_id=node, hostname=node, routing_key=routing_key)
    return pb.AgentMessage(hello=info).SerializeToString()


def redirect_of(
    address: str, node: str, routing_key: str = "", token: str | None = None
) -> tuple[grpc.StatusCode, str, int | None]:
    """Say hello to ``address``: the stream's status, its details and the owner port it names."""
    metadata = () if token is None else (("authorization", f"Bearer {token}"),)
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b)
        responses = call(iter([hello(node, routing_key)]), timeout=10, metadata=metadata)
        try:
            for _ in responses:
                pass
        except grpc.RpcError as err:
            trailers = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
            port = trailers.get(OWNER_PORT_TRAILER)
            return err.code(), str(err.details()), int(port) if port is not None else None
    return grpc.StatusCode.OK, "", None


def deliver(port: int, node: str, seqs: Sequence[int], epoch: int = 7) -> int:
    """Stream hello and ``seqs`` to a worker's port and half-close: the highest seq acknowledged."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
        )
        messages = [hello(node), *(framed(node, epoch, seq) for seq in seqs)]
        acked = 0
        with contextlib.suppress(grpc.RpcError):
            for ack in call(iter(messages), timeout=20):
                acked = max(acked, ack.acked_seq)
        return acked
