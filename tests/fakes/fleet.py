"""Real collector and agent processes for delivery tests, on loopback or inside namespaces.

Every process a test starts here is killed when the test ends, pass or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.fakes.trees import REPO

_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """A port free with the ``count - 1`` after it: for ``serve`` with its default worker ports
    (``--listen``'s port + 1 + i), which another test's process may otherwise hold."""
    for _ in range(100):
        first = free_port(host)
        if first + count > 65536:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    held.enter_context(socket.socket()).bind((host, port))
            except OSError:
                continue
        return first
    raise AssertionError(f"no {count} free ports in a row on {host}")


@dataclass
class Collector:
    db: Path
    port: int
    host: str = "127.0.0.1"
    args: Sequence[str] = ()
    prefix: Sequence[str] = ()
    proc: subprocess.Popen[str] | None = None
    log: Path | None = None
    starts: int = 0
    # HOST:PORT of /metrics and /healthz, learned from the collector's second line.
    http_address: str = ""
    # Where the logs go (default: beside the database), e.g. off a filesystem a test fills.
    log_dir: Path | None = None
    # serve --workers (None: its default, the CPUs: a front and its workers). 1 where a test
    # speaks one collector's ingest stream raw (a front answers a hello with a redirect) or
    # reads its database (a front's nodes are spread over its workers' databases).
    workers: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> Collector:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log_base = self.db if self.log_dir is None else self.log_dir / self.db.name
        self.log = log_base.with_suffix(f".log{self.starts}")
        self.starts += 1
        # A port of its own for HTTP, unless the test chose one: collectors run side by side.
        http = [] if "--http-listen" in self.args else ["--http-listen", "127.0.0.1:0"]
        # Ephemeral worker ports: --listen's port + 1 + i may be taken by another test's process.
        http += ["--worker-ports", "0"] if self.workers is None else ["--workers", str(self.workers)]
        command = [*self.prefix, sys.executable, "-m", "nodeagent.collector", "--log-level", "info", "serve",
                   "--listen", self.address, "--db", str(self.db), *http, *self.args]  # fmt: skip
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, env=_ENV, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "listening on HOST:PORT" once serving
        assert line.startswith("listening on"), f"collector did not start: {line!r} {self.log.read_text()[-2000:]}"
        line = self.proc.stdout.readline()
        assert line.startswith("http on"), f"collector did not serve HTTP: {line!r} {self.log.read_text()[-2000:]}"
        self.http_address = line.split()[-1]
        return self

    def metrics(self) -> str:
        """The text of the collector's /metrics."""
        with urllib.request.urlopen(f"http://{self.http_address}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def nodes(self, *extra: str) -> list[dict[str, Any]]:
        out = cli("collector", "nodes", "--json", "--collector", self.address, *extra, prefix=self.prefix)
        return list(json.loads(out))

    def node(self, node_id: str) -> dict[str, Any]:
        return next(n for n in self.nodes() if n["node_id"] == node_id)

    def reports(self, node_id: str) -> int:
        """Distinct reports stored for a node; 0 while the collector does not know it or is down."""
        try:
            return int(self.node(node_id)["reports_total"])
        except (StopIteration, AssertionError):
            return 0


@dataclass
class Agent:
    args: list[str]
    prefix: Sequence[str] = ()
    proc: subprocess.Popen[str] | None = None
    log: Path | None = None
    out: list[str] = field(default_factory=list)

    def start(self, log: Path) -> Agent:
        self.log = log
        command = [*self.prefix, sys.executable, "-m", "nodeagent.agent", "--log-level", "info", "run", *self.args]
        with log.open("w") as handle:
            self.proc = subprocess.Popen(command, cwd=REPO, env=_ENV, stdout=subprocess.PIPE, stderr=handle, text=True)
        return self

    def wait(self, timeout: float) -> tuple[int, dict[str, Any]]:
        """Exit status and the run's summary line."""
        assert self.proc is not None
        stdout, _ = self.proc.communicate(timeout=timeout)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        return self.proc.returncode, (json.loads(lines[-1]) if lines else {})

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log is not None else ""


def cli(program: str, *args: str, prefix: Sequence[str] = (), timeout: float = 30) -> str:
    done = subprocess.run(
        [*prefix, sys.executable, "-m", f"nodeagent.{program}", *args], cwd=REPO, env=_ENV, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{program} {' '.join(args)}: {done.returncode} {done.stderr[-2000:]}"
    return done.stdout


@contextmanager
def processes() -> Iterator[list[Collector | Agent]]:
    """Collect started processes; all are killed on exit."""
    started: list[Collector | Agent] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def feed_simulated(ingest: Any, scenarios: dict[str, str], seconds: float, step_seconds: float = 1.0) -> None:
    """``seconds`` of reports, ending now, from one simulated node per ``node id -> scenario``,
    straight into an in-process collector's ``Ingest`` (its detector, timeline and alert rules)."""
    from nodeagent.collector.ingest.node_state import StreamHandle
    from nodeagent.tools.simulator import Simulation

    start = time.time() - seconds
    sims = [Simulation(scenario, node_id=node_id, seed=1, start_time=start) for node_id, scenario in scenarios.items()]
    streams = [StreamHandle(sim.node_id, "test") for sim in sims]
    for sim, stream in zip(sims, streams, strict=True):
        ingest.attach(stream, sim.info())
    for seq in range(1, int(seconds / step_seconds) + 1):
        for sim, stream in zip(sims, streams, strict=True):
            report = sim.step(0.0 if seq == 1 else step_seconds)
            report.epoch, report.seq = 1, seq
            if seq == 1:
                report.info.CopyFrom(sim.info())
            ingest.accept(stream, report, report.SerializeToString())


def started_at(pids: Sequence[str | int]) -> dict[int, float]:
    """Each process's start time, to tell it later from a process that reused its pid (tests
    run two at once, and a busy machine hands pids out again quickly)."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            out[int(pid)] = psutil.Process(int(pid)).create_time()
        except psutil.Error:
            continue
    return out


def still_running(started: Mapping[int, float]) -> list[int]:
    """The processes of ``started`` that still exist: the same pid with the same start time."""
    alive = []
    for pid, created in started.items():
        try:
            if psutil.Process(pid).create_time() == created:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive
