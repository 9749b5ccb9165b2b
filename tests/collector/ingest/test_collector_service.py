"""The collector's services and the agent's choice of collector.

Stream replacement, the query service, standard health and reflection, rendezvous failover,
and the one-line errors of ``nodeagent run``.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from nodeagent.agent.delivery.sender import rendezvous_order
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import Agent, Collector, free_port, processes, wait_for
from tests.fakes.full_disk import fill, small_tmpfs
from tests.fakes.shards import Collectors
from tests.fakes.trees import REPO

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1


def _report(node: str, seq: int) -> bytes:
    # Made now: the collector refuses times too far from its clock.
    report = pb.NodeReport(node_id=node, epoch=3, seq=seq, time_unix_seconds=time.time())
    report.gpus.add(index=0, uuid="GPU-0", utilization_gpu_ratio=0.25)
    return frame_report(report.SerializeToString())


def _hello(node: str) -> bytes:
    return pb.AgentMessage(hello=pb.NodeInfo(node_id=node, hostname="h-" + node)).SerializeToString()


class _Stream:
    """A hand-driven ingest stream: send messages when told, collect acks and the final status."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.outbox: list[bytes | None] = []
        self.ready = threading.Condition()
        self.acks: list[int] = []
        # The ack each stream starts with (what was stored before it), apart from the acks of its reports.
        self.attached: list[tuple[int, int]] = []
        self.status: grpc.StatusCode | None = None
        # The call as it runs: ``cancel()`` it as an agent that gives up on the stream does.
        self.responses: Any = None
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
        )
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def send(self, message: bytes | None) -> None:
        with self.ready:
            self.outbox.append(message)
            self.ready.notify()

    def _requests(self):  # type: ignore[no-untyped-def]
        while True:
            with self.ready:
                self.ready.wait_for(lambda: self.outbox)
                message = self.outbox.pop(0)
            if message is None:
                return
            yield message

    def _run(self, call: grpc.StreamStreamMultiCallable) -> None:
        try:
            self.responses = call(self._requests(), timeout=30)
            for ack in self.responses:
                if ack.attached:
                    self.attached.append((ack.epoch, ack.acked_seq))
                else:
                    self.acks.append(ack.acked_seq)
            self.status = grpc.StatusCode.OK
        except grpc.RpcError as err:
            self.status = err.code()


def test_second_stream_for_a_node_replaces_the_first(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(f"127.0.0.1:{collector.port}") as channel:
        started.append(collector.start())
        first = _Stream(channel)
        first.send(_hello("twin"))
        first.send(_report("twin", 1))
        assert wait_for(lambda: first.acks == [1], timeout=10)
        second = _Stream(channel)
        second.send(_hello("twin"))
        second.send(_report("twin", 1))  # a resend: duplicate, acked again, not stored twice
        second.send(_report("twin", 2))
        assert wait_for(lambda: first.status is not None, timeout=10)
        assert wait_for(lambda: second.acks and second.acks[-1] == 2, timeout=10)
        second.send(None)
        second.thread.join(10)
        node = collector.node("twin")
    assert first.status == grpc.StatusCode.ABORTED
    assert second.status == grpc.StatusCode.OK
    assert (node["reports_total"], node["duplicates_total"], node["hostname"]) == (2, 1, "h-twin")


def test_a_stream_that_replaces_one_already_ended_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker paused mid-stream: its agent gives up on the stream and opens another, and when the
    # worker resumes, the new stream can register before the old one's end has reached its
    # handler. Here that handler's clean-up is held back, as the pause held it: the old RPC has
    # ended while the node still points at it. The new stream must be acknowledged all the same.
    collectors = Collectors(tmp_path, 1)
    try:
        ingest = collectors.on(0, lambda server: server.ingest)
        ended: list[object] = []
        detach = ingest.detach

        def detach_late(stream: Any) -> None:
            if not ended:  # the first stream's end, not yet seen when the next one registers
                ended.append(stream)
                return
            detach(stream)

        monkeypatch.setattr(ingest, "detach", detach_late)
        with grpc.insecure_channel(collectors.addresses[0]) as channel:
            first = _Stream(channel)
            first.send(_hello("paused"))
            first.send(_report("paused", 1))
            assert wait_for(lambda: first.acks == [1], timeout=10)
            first.responses.cancel()  # the agent gives up on it
            assert wait_for(lambda: ended, timeout=10)
            second = _Stream(channel)
            second.send(_hello("paused"))
            second.send(_report("paused", 2))
            assert wait_for(lambda: second.acks and second.acks[-1] == 2, timeout=10), (second.status, second.acks)
            second.send(None)
            second.thread.join(10)
            # And the node is let go of cleanly: a third stream is acknowledged too.
            third = _Stream(channel)
            third.send(_hello("paused"))
            third.send(_report("paused", 3))
            assert wait_for(lambda: third.acks and third.acks[-1] == 3, timeout=10), (third.status, third.acks)
            third.send(None)
            third.thread.join(10)
        stored = collectors.on(0, lambda server: server.ingest.nodes["paused"].row.reports_total)
    finally:
        collectors.close()
    assert (first.status, second.status, third.status) == (
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.OK,
        grpc.StatusCode.OK,
    )
    assert stored == 3


def test_query_health_and_reflection(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(f"127.0.0.1:{collector.port}") as channel:
        started.append(collector.start())
        stream = _Stream(channel)
        stream.send(_hello("q-node"))
        stream.send(_report("q-node", 1))
        assert wait_for(lambda: stream.acks == [1], timeout=10)
        latest = pb_grpc.QueryStub(channel).LatestReport(pb.LatestReportRequest(node_id="q-node"), timeout=5)
        with pytest.raises(grpc.RpcError) as missing:
            pb_grpc.QueryStub(channel).LatestReport(pb.LatestReportRequest(node_id="nobody"), timeout=5)
        health = health_pb2_grpc.HealthStub(channel)
        statuses = {
            name: health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status
            for name in ("", "nodeagent.v1.Ingest", "nodeagent.v1.Query")
        }
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answer = next(
            iter(reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        )
        services = {s.name for s in answer.list_services_response.service}
        stream.send(None)
    assert (latest.seq, latest.gpus[0].utilization_gpu_ratio) == (1, 0.25)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert set(statuses.values()) == {health_pb2.HealthCheckResponse.SERVING}
    assert {"nodeagent.v1.Ingest", "nodeagent.v1.Query", "grpc.health.v1.Health"} <= services


def test_rendezvous_order_is_stable_and_spreads_nodes() -> None:
    targets = ["c1:50051", "c2:50051", "c3:50051"]
    first = Counter(rendezvous_order(f"node-{i}", targets)[0] for i in range(3000))
    assert all(900 < count < 1100 for count in first.values())
    assert rendezvous_order("node-7", targets) == rendezvous_order("node-7", list(reversed(targets)))
    # Removing a collector moves only the nodes that were on it.
    moved = sum(
        rendezvous_order(f"node-{i}", targets)[0] != rendezvous_order(f"node-{i}", targets[:2])[0] for i in range(3000)
    )
    assert moved == first["c3:50051"]


def test_agent_fails_over_to_the_next_collector(tmp_path: Path) -> None:
    a = Collector(workers=ONE_PROCESS, db=tmp_path / "a.db", port=free_port())
    b = Collector(workers=ONE_PROCESS, db=tmp_path / "b.db", port=free_port())
    preferred, fallback = (a, b) if rendezvous_order("node-fo", [a.address, b.address])[0] == a.address else (b, a)
    with processes() as started:
        started.extend([a.start(), b.start()])
        agent = Agent(
            ["--collector", a.address, "--collector", b.address, "--node-id", "node-fo", "--interval", "0.03",
             "--no-collector.gpu", "--max-reports", "120", "--deadline", "60"]
        ).start(tmp_path / "agent.log")  # fmt: skip
        started.append(agent)
        assert wait_for(lambda: preferred.reports("node-fo") >= 20, timeout=20), agent.tail()
        assert fallback.reports("node-fo") == 0
        preferred.kill()
        code, summary = agent.wait(timeout=60)
        assert code == 0, agent.tail()
        on_fallback = fallback.node("node-fo")
    on_preferred = _last_durable(tmp_path / ("a.db" if preferred is a else "b.db"))
    # Between them the two shards hold every report; the fallback holds a contiguous tail.
    assert (on_fallback["last_seq"], on_fallback["gap_reports_total"]) == (120, 0)
    assert on_preferred + on_fallback["reports_total"] >= 120
    # What both hold is what the killed one committed without acknowledging: counted as resent.
    assert on_preferred + on_fallback["reports_total"] - 120 <= summary["reports_resent_total"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--collector", "nope"], "'nope' is not HOST:PORT"),
        (["--collector", "127.0.0.1:1", "--node-id", "bad id!"], "invalid node id"),
        (["--collector", "127.0.0.1:1", "--interval", "0"], "--interval"),
        (["--collector", "127.0.0.1:1", "--tls-cert", "/x.pem"], "--tls-cert and --tls-key go together"),
        (["--collector", "127.0.0.1:1", "--token-file", "/nonexistent"], "/nonexistent: no such file"),
        ([], "Missing option '--collector'"),
        (["--collector", "127.0.0.1:1", "--metrics-listen", "0.0.0.0:9478"], "without --metrics-insecure"),
    ],
)
def test_run_refuses_bad_flags_in_one_line(args: list[str], needle: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "run", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_run_exits_1_when_reports_cannot_be_delivered_by_the_deadline(tmp_path: Path) -> None:
    agent = Agent(
        ["--collector", f"127.0.0.1:{free_port()}", "--node-id", "lonely", "--interval", "0.05",
         "--no-collector.gpu", "--max-reports", "5", "--deadline", "2"]
    ).start(tmp_path / "agent.log")  # fmt: skip
    code, summary = agent.wait(timeout=30)
    assert code == 1
    assert (summary["produced"], summary["unacked"]) == (5, 5)


def _last_durable(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT MAX(seq) FROM watermarks").fetchone()
    return int(row[0] or 0)


def test_a_half_closed_stream_still_gets_its_final_ack(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
        )
        messages = [_hello("closer"), *(_report("closer", seq) for seq in (1, 2, 3))]
        acks = [ack.acked_seq for ack in call(iter(messages), timeout=10)]  # the iterator ends: half-close
    assert acks[-1] == 3


def test_a_locked_database_delays_acks_but_loses_nothing(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        stream = _Stream(channel)
        stream.send(_hello("patient"))
        stream.send(_report("patient", 1))
        assert wait_for(lambda: stream.acks == [1], timeout=10)
        # An operator's sqlite3 shell holds a write lock longer than the collector's busy timeout.
        holder = sqlite3.connect(tmp_path / "c.db", timeout=1)
        holder.execute("BEGIN IMMEDIATE")
        stream.send(_report("patient", 2))
        stream.send(_report("patient", 3))
        time.sleep(6.5)
        acks_while_locked = list(stream.acks)
        holder.rollback()
        holder.close()
        assert wait_for(lambda: stream.acks and stream.acks[-1] == 3, timeout=15)
        stream.send(None)
        node = collector.node("patient")
    assert acks_while_locked == [1]  # nothing acknowledged that was not committed
    assert (node["reports_total"], node["last_seq"]) == (3, 3)


def test_list_nodes_shows_only_what_is_committed(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        stream = _Stream(channel)
        stream.send(_hello("careful"))
        stream.send(_report("careful", 1))
        assert wait_for(lambda: stream.acks == [1], timeout=10)
        holder = sqlite3.connect(tmp_path / "c.db", timeout=1)
        holder.execute("BEGIN IMMEDIATE")  # every commit now waits, then fails
        try:
            stream.send(_report("careful", 2))
            stream.send(_report("careful", 3))
            time.sleep(1.0)
            while_failing = collector.node("careful")
        finally:
            holder.rollback()
            holder.close()
        assert wait_for(lambda: stream.acks and stream.acks[-1] == 3, timeout=20)
        stream.send(None)
        after = collector.node("careful")
    assert (while_failing["reports_total"], while_failing["last_seq"]) == (1, 1)
    assert (after["reports_total"], after["last_seq"]) == (3, 3)


def test_silent_streams_time_out_and_one_source_cannot_hold_them_all(tmp_path: Path) -> None:
    # "localhost" listens on 127.0.0.1 and ::1: two sources on one machine.
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(), host="localhost",
        args=["--hello-timeout-seconds", "2", "--max-streams-per-source", "4"],
    )  # fmt: skip
    port = collector.port
    with (
        processes() as started,
        grpc.insecure_channel(f"127.0.0.1:{port}") as v4,
        grpc.insecure_channel(f"[::1]:{port}") as v6,
    ):
        started.append(collector.start())
        silent = [_Stream(v4) for _ in range(4)]  # streams that never say hello
        time.sleep(0.5)
        one_more = _Stream(v4)
        one_more.thread.join(10)
        other = _Stream(v6)
        other.send(_hello("elsewhere"))
        other.send(_report("elsewhere", 1))
        assert wait_for(lambda: other.acks == [1], timeout=10)
        other.send(None)
        other.thread.join(10)
        assert wait_for(lambda: all(s.status is not None for s in silent), timeout=15)
        later = _Stream(v4)
        later.send(_hello("later"))
        later.send(_report("later", 1))
        assert wait_for(lambda: later.acks == [1], timeout=10)
        later.send(None)
        later.thread.join(10)
        started_at = time.monotonic()
        closed = _silent_connection_closed(port, timeout=20)
        held_seconds = time.monotonic() - started_at
    assert one_more.status == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert other.status == grpc.StatusCode.OK
    assert {s.status for s in silent} == {grpc.StatusCode.DEADLINE_EXCEEDED}
    assert later.status == grpc.StatusCode.OK
    # grpc's own default would hold a connection that never speaks HTTP/2 for two minutes.
    assert closed and held_seconds < 15


def _silent_connection_closed(port: int, timeout: float) -> bool:
    """Connect and say nothing: whether the server closes the connection within ``timeout``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not sock.recv(65536):  # its SETTINGS, then GOAWAY, then the close
                    return True
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
    return False


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, mounted for the test and gone after it."""
    with small_tmpfs(tmp_path) as mountpoint:
        yield mountpoint


@pytest.mark.root
def test_a_small_database_filesystem_recovers_and_names_the_error(small_filesystem: Path) -> None:
    db = small_filesystem / "c.db"
    collector = Collector(
        workers=ONE_PROCESS, db=db, port=free_port(), args=["--flush-seconds", "0.01"], log_dir=small_filesystem.parent
    )
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        stream = _Stream(channel)
        stream.send(_hello("cramped"))

        def log() -> str:
            return collector.log.read_text() if collector.log else ""

        def stream_reports(count: int, first: int) -> int:
            for seq in range(first, first + count):
                stream.send(_report("cramped", seq))
                time.sleep(0.004)
            return first + count - 1

        # About a commit a report: before, the WAL grew toward its 4 MB checkpoint, filled the
        # 2 MB first (near commit 250), and no commit succeeded again.
        seq = stream_reports(800, 1)
        assert wait_for(lambda: stream.acks and stream.acks[-1] == seq, timeout=30), (seq, stream.acks[-3:])
        # Something else takes all the space: commits fail, with the real error, until it is freed.
        filler = fill(small_filesystem / "filler")
        seq = stream_reports(50, seq + 1)
        assert wait_for(lambda: "database or disk is full" in log(), timeout=30), log()[-2000:]
        acks_while_full = list(stream.acks)
        filler.unlink()
        assert wait_for(lambda: stream.acks and stream.acks[-1] == seq, timeout=30), (seq, stream.acks[-3:])
        stream.send(None)
        node = collector.node("cramped")
        log_text = log()
    assert acks_while_full[-1] < seq
    assert "cannot rollback" not in log_text
    assert (node["reports_total"], node["last_seq"]) == (seq, seq)


def test_a_new_stream_learns_at_once_what_is_already_durable(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        first = _Stream(channel)
        first.send(_hello("resumer"))
        # A node the collector does not know: its first ack says it holds nothing of it.
        assert wait_for(lambda: first.attached == [(0, 0)], timeout=10), first.attached
        for seq in (1, 2, 3):
            first.send(_report("resumer", seq))
        assert wait_for(lambda: first.acks and first.acks[-1] == 3, timeout=10)
        # Killed after the commit; suppose the ack never left: the agent holds (or, its spool
        # full, has counted as dropped) reports the collector has stored.
        collector.kill(signal.SIGKILL)
        collector.start()
        second = _Stream(channel)
        second.send(_hello("resumer"))
        acked_before_any_report = wait_for(lambda: second.attached == [(3, 3)], timeout=10)
        second.send(_report("resumer", 4))
        assert wait_for(lambda: second.acks and second.acks[-1] == 4, timeout=10)
        second.send(None)
        second.thread.join(10)
        node = collector.node("resumer")
    assert acked_before_any_report, second.attached
    assert first.acks[-1] == 3 and second.acks == [4]
    assert (node["reports_total"], node["duplicates_total"], node["gap_reports_total"]) == (4, 0, 0)
