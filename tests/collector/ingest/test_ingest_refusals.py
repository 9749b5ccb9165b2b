"""Bad input gets the right gRPC status and closes only its own stream.

A real agent streams to the collector the whole time; every bad client is answered while it
keeps flowing, and at the end every one of its reports was stored exactly once.
"""

from __future__ import annotations

import asyncio
import math
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.node_state import StreamHandle, StreamRefusedError
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.core.wire.framing import frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.certs import Authority
from tests.fakes.fleet import Agent, Collector, free_port, processes, wait_for
from tests.fakes.ingest_client import (
    framed,
    hello_message,
    send_messages,
    small_report,
    streamed,
    tls_channel,
)
from tests.fakes.trees import REPO

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

GOOD_REPORTS = 160


def _bad_cases(node: str) -> Iterator[tuple[str, list[bytes], grpc.StatusCode]]:
    good = small_report(node, 1).SerializeToString()
    yield "no hello first", [frame_report(good)], grpc.StatusCode.INVALID_ARGUMENT
    whole = pb.AgentMessage(report=small_report(node, 1)).SerializeToString()
    yield "truncated message", [hello_message(node), whole[: len(whole) // 2]], grpc.StatusCode.INVALID_ARGUMENT
    yield (
        "oversized message",
        [hello_message(node), b"\x12" + b"\xff" * 2 * 1024 * 1024],
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    nan = small_report(node, 1)
    nan.gpus[0].power_watts = math.nan
    yield "NaN", [hello_message(node), frame_report(nan.SerializeToString())], grpc.StatusCode.INVALID_ARGUMENT
    ratio = small_report(node, 1)
    ratio.gpus[0].utilization_gpu_ratio = 7.0
    yield (
        "ratio above 1",
        [hello_message(node), frame_report(ratio.SerializeToString())],
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    negative = small_report(node, 1)
    negative.nics[0].rx_bytes_total = 2**64 - 5  # what -5 becomes in a uint64 field
    yield (
        "negative count",
        [hello_message(node), frame_report(negative.SerializeToString())],
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    negative_gauge = small_report(node, 1)
    negative_gauge.nics[0].speed_bytes_per_second = -1.0
    bad = frame_report(negative_gauge.SerializeToString())
    yield "negative gauge", [hello_message(node), bad], grpc.StatusCode.INVALID_ARGUMENT
    huge = small_report(node, 1)
    for index in range(10_000):
        huge.gpus.add(index=index)
    yield "10,000 GPUs", [hello_message(node), frame_report(huge.SerializeToString())], grpc.StatusCode.INVALID_ARGUMENT
    backwards = [frame_report(small_report(node, seq).SerializeToString()) for seq in (5, 6, 3)]
    yield "seq backwards", [hello_message(node), *backwards], grpc.StatusCode.INVALID_ARGUMENT
    other = frame_report(small_report("someone-else", 1).SerializeToString())
    yield "report for another node", [hello_message(node), other], grpc.StatusCode.INVALID_ARGUMENT
    yield "bad node id", [hello_message("bad node/../id")], grpc.StatusCode.INVALID_ARGUMENT


def test_bad_input_is_refused_while_a_good_stream_flows(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        good = Agent(
            ["--collector", collector.address, "--node-id", "good-node", "--interval", "0.05",
             "--no-collector.gpu", "--max-reports", str(GOOD_REPORTS), "--deadline", "60"]
        ).start(tmp_path / "good.log")  # fmt: skip
        started.append(good)
        # The refusals are to happen while the good stream flows: wait for its first stored report.
        assert wait_for(lambda: collector.reports("good-node") > 0, timeout=30), good.tail()
        seen: dict[str, grpc.StatusCode] = {}
        closed = _garbage_closes_connection(collector.port)
        with grpc.insecure_channel(collector.address) as channel:
            for name, messages, _want in _bad_cases("bad-node"):
                seen[name] = send_messages(channel, messages)
            # The collector still takes a well-formed stream from the refused node.
            seen["well-formed"] = send_messages(
                channel, [hello_message("bad-node"), frame_report(small_report("bad-node", 1).SerializeToString())]
            )
        flowing_meanwhile = collector.node("good-node")["reports_total"]
        code, summary = good.wait(timeout=60)
        assert code == 0, good.tail()
        node = collector.node("good-node")
    assert closed, "garbage on the port should make the server close that connection"
    want = {name: status for name, _messages, status in _bad_cases("bad-node")}
    want["well-formed"] = grpc.StatusCode.OK
    assert seen == want
    assert 0 < flowing_meanwhile < GOOD_REPORTS  # the good stream was mid-run during the refusals
    assert (node["reports_total"], node["gap_reports_total"], summary["dropped_total"]) == (GOOD_REPORTS, 0, 0)


def test_tls_refusals_and_node_identity(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "fleet")
    stranger = Authority(tmp_path, "stranger")
    server = ca.issue("collector", dns=("localhost",), ips=("127.0.0.1",), server=True)
    good_cert = ca.issue("good-node", dns=("good-node",), server=False)
    other_node = ca.issue("node-x", dns=("node-x",), server=False)
    foreign = stranger.issue("node-y", dns=("node-y",), server=False)
    operator = ca.issue("ops", dns=("ops",), server=False)
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(),
        args=["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.cert_file),
              "--operator-identity", "ops"],
    )  # fmt: skip
    with processes() as started:
        started.append(collector.start())
        good = Agent(
            ["--collector", collector.address, "--node-id", "good-node", "--interval", "0.05", "--no-collector.gpu",
             "--max-reports", "80", "--deadline", "60", "--tls-ca", str(ca.cert_file),
             "--tls-cert", str(good_cert.cert), "--tls-key", str(good_cert.key)]
        ).start(tmp_path / "good.log")  # fmt: skip
        started.append(good)
        seen = {}
        message = [hello_message("node-y"), frame_report(small_report("node-y", 1).SerializeToString())]
        with grpc.insecure_channel(collector.address) as channel:
            seen["plaintext to the TLS port"] = send_messages(channel, message)
        with tls_channel(collector.address, ca.cert_file, foreign.cert, foreign.key) as channel:
            seen["client certificate from another CA"] = send_messages(channel, message)
        with tls_channel(collector.address, ca.cert_file, other_node.cert, other_node.key) as channel:
            seen["certificate of node-x claiming node-y"] = send_messages(channel, message)
            mine = [hello_message("node-x"), frame_report(small_report("node-x", 1).SerializeToString())]
            seen["certificate of node-x as node-x"] = send_messages(channel, mine)
        code, _summary = good.wait(timeout=60)
        assert code == 0, good.tail()
        listed = {n["node_id"]: n for n in collector.nodes(*_query_tls(ca, operator))}
    assert seen == {
        "plaintext to the TLS port": grpc.StatusCode.UNAVAILABLE,
        "client certificate from another CA": grpc.StatusCode.UNAVAILABLE,
        "certificate of node-x claiming node-y": grpc.StatusCode.PERMISSION_DENIED,
        "certificate of node-x as node-x": grpc.StatusCode.OK,
    }
    assert listed["good-node"]["reports_total"] == 80
    assert set(listed) == {"good-node", "node-x"}


def test_bearer_token_is_required_when_configured(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    operator = tmp_path / "operator-token"
    operator.write_text("operator-token\n")
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(),
        args=["--token-file", str(token), "--operator-token-file", str(operator)],
    )  # fmt: skip
    message = [hello_message("node-t"), frame_report(small_report("node-t", 1).SerializeToString())]
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            missing = send_messages(channel, message)
            wrong = send_messages(channel, message, [("authorization", "Bearer nope")])
            right = send_messages(channel, message, [("authorization", "Bearer s3cret-token")])
        nodes = collector.nodes("--token-file", str(operator))
        log = collector.log.read_text() if collector.log else ""
    assert (missing, wrong, right) == (grpc.StatusCode.UNAUTHENTICATED,) * 2 + (grpc.StatusCode.OK,)
    assert [n["node_id"] for n in nodes] == ["node-t"]
    assert "s3cret-token" not in log


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--listen", "0.0.0.0:0"], 2, "refusing plaintext on non-loopback address 0.0.0.0"),
        (["--listen", "127.0.0.1:0", "--tls-cert", "/nonexistent.pem", "--tls-key", "/x"], 2, "no such file"),
        (["--listen", "nonsense"], 2, "is not HOST:PORT"),
    ],
)
def test_serve_refuses_unsafe_or_broken_setups(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "serve", "--db", str(tmp_path / "c.db"), *args],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == code
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_insecure_flag_serves_beyond_loopback_with_a_warning(tmp_path: Path) -> None:
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port("0.0.0.0"), host="0.0.0.0", args=["--insecure"]
    )
    with processes() as started:
        started.append(collector.start())
        time.sleep(0.3)
        log = collector.log.read_text() if collector.log else ""
    assert "serving plaintext on 0.0.0.0 (--insecure)" in log


def _garbage_closes_connection(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)) * 8)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if not sock.recv(65536):
                    return True
            except (ConnectionResetError, TimeoutError):
                return True
    return False


def _query_tls(ca: Authority, pem: object) -> list[str]:
    return ["--tls-ca", str(ca.cert_file), "--tls-cert", str(pem.cert), "--tls-key", str(pem.key)]  # type: ignore[attr-defined]


POISON = [(1, 1), (1, 2**63 - 1), (2, 1), (2, 5)]


def test_one_client_cannot_stop_the_storage_of_the_others(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        before = streamed(channel, [hello_message("good"), *(framed("good", 7, seq) for seq in range(1, 6))])
        # Each of these passes validation; their gaps add up to 2^63, one past SQLite's INTEGER.
        evil = [
            streamed(channel, [hello_message("evil"), *(framed("evil", e, s) for e, s in POISON)]) for _ in range(2)
        ]
        # Whatever of it was taken, later streams of the evil node can go on only within bounds.
        rest = streamed(channel, [hello_message("evil"), *(framed("evil", e, s) for e, s in POISON[2:])])
        time.sleep(1.0)  # flushes come and go meanwhile
        after = streamed(channel, [hello_message("good"), *(framed("good", 7, seq) for seq in range(6, 11))])
        other = streamed(channel, [hello_message("newcomer"), framed("newcomer", 1, 1)])
        nodes = {n["node_id"]: n for n in collector.nodes()}
        log = collector.log.read_text() if collector.log else ""
    # Before: every flush failed from the first evil stream on; nothing was acknowledged again.
    assert (before, after, other) == ((grpc.StatusCode.OK, 5), (grpc.StatusCode.OK, 10), (grpc.StatusCode.OK, 1))
    assert (nodes["good"]["reports_total"], nodes["good"]["last_seq"]) == (10, 10)
    assert nodes["newcomer"]["reports_total"] == 1
    assert "store flush failed" not in log
    # The jump to 2^63 - 1 is refused; what the evil node may do within bounds it still can.
    assert [status for status, _acked in evil] == [grpc.StatusCode.INVALID_ARGUMENT] * 2
    assert rest[0] == grpc.StatusCode.OK
    assert nodes["evil"]["gap_reports_total"] < 2**32


def test_a_row_the_store_refuses_fails_only_its_own_node(tmp_path: Path) -> None:
    asyncio.run(_row_refused(tmp_path))


async def _row_refused(tmp_path: Path) -> None:
    writer = StoreWriter(tmp_path / "c.db")
    ingest = build_ingest(writer, Alerting(AlertConfig(), []), flush_seconds=0.01)
    streams = {node: StreamHandle(node, "test") for node in ("fine", "broken")}
    for node, stream in streams.items():
        ingest.attach(stream, pb.NodeInfo(node_id=node, hostname=node))
        ingest.accept(stream, small_report(node, 1), b"")
    # A value SQLite cannot hold, however it got there.
    ingest.nodes["broken"].row.spool_dropped_total = 2**64
    await ingest.flusher.flush()
    ingest.accept(streams["fine"], small_report("fine", 2), b"")
    await ingest.flusher.flush()
    with pytest.raises(StreamRefusedError) as refused:
        ingest.accept(streams["broken"], small_report("broken", 2), b"")
    with pytest.raises(StreamRefusedError):
        ingest.attach(StreamHandle("broken", "test"), pb.NodeInfo(node_id="broken"))
    stored = {row.node_id: row for row in writer.call_sync(writer.store.nodes.load)}
    writer.close()
    assert ingest.flusher.failing_since is None and ingest.flusher.stats.failures_total == 0
    assert ingest.durable_seq(streams["fine"]) == 2
    assert ingest.durable_seq(streams["broken"]) == 0
    assert (refused.value.code, refused.value.reason) == ("UNAVAILABLE", "node_unstorable")
    assert "OverflowError" in refused.value.detail
    assert set(stored) == {"fine"} and stored["fine"].watermarks == {7: 2}


def test_a_stream_carries_at_most_two_epochs(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        three = streamed(channel, [hello_message("hopper"), *(framed("hopper", epoch, 1) for epoch in (1, 2, 3))])
        two = streamed(channel, [hello_message("hopper"), *(framed("hopper", epoch, 1) for epoch in (3, 4))])
    assert three[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert two[0] == grpc.StatusCode.OK


def _unknown_field(size_bytes: int) -> bytes:
    """A length-delimited field number 9999 that no NodeReport or NodeInfo has."""
    key = (9999 << 3) | 2
    return _varint(key) + _varint(size_bytes) + b"u" * size_bytes


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _flood_messages(node: str, unknown_bytes: int) -> list[bytes]:
    """Hello and one report, each carrying ``unknown_bytes`` of a field the schema does not have."""
    info = pb.NodeInfo(node_id=node, hostname=node).SerializeToString() + _unknown_field(unknown_bytes // 2)
    report = small_report(node, 1)
    report.info.node_id = node
    report.info.hostname = node
    raw = report.SerializeToString() + _unknown_field(unknown_bytes // 2)
    hello = b"\x0a" + _varint(len(info)) + info  # AgentMessage.hello is field 1
    return [hello, frame_report(raw)]


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.suffix != ".log0")


FLOOD_NODES = 100
FLOOD_BYTES = 900 * 1024
WARM_NODES = 10


def test_unknown_fields_are_neither_kept_nor_stored(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    collector = Collector(workers=ONE_PROCESS, db=db, port=free_port())
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        assert collector.proc is not None
        pid = collector.proc.pid

        def phase(prefix: str, count: int, unknown_bytes: int) -> tuple[int, int, set[tuple[grpc.StatusCode, int]]]:
            rss, size = _rss_bytes(pid), _db_bytes(db)
            results = {streamed(channel, _flood_messages(f"{prefix}-{i}", unknown_bytes)) for i in range(count)}
            time.sleep(0.5)
            return _rss_bytes(pid) - rss, _db_bytes(db) - size, results

        # A few big messages first, so grpc's and the allocator's buffers for them exist before
        # either measurement; then the baseline (no unknown fields) and the flood, node for node.
        phase("warm", WARM_NODES, FLOOD_BYTES)
        base_rss, base_db, base_results = phase("base", FLOOD_NODES, 0)
        flood_rss, flood_db, flood_results = phase("flood", FLOOD_NODES, FLOOD_BYTES)
        latest = pb_grpc.QueryStub(channel).LatestReport(pb.LatestReportRequest(node_id="flood-0"), timeout=5)
    assert base_results | flood_results == {(grpc.StatusCode.OK, 1)}
    mib = 1024 * 1024
    # Before: about +100 MB resident and +90 MB of database for the flood (each node's 900 KB kept).
    assert flood_rss < base_rss + 30 * mib, (flood_rss / mib, base_rss / mib)
    assert flood_db < base_db + 4 * mib, (flood_db / mib, base_db / mib)
    assert latest.ByteSize() < 4096


def test_nodes_beyond_the_bound_are_refused_and_the_others_go_on(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(), args=["--max-nodes", "3"])
    with processes() as started, grpc.insecure_channel(collector.address) as channel:
        started.append(collector.start())
        first = [streamed(channel, [hello_message(f"n{i}"), framed(f"n{i}", 1, 1)]) for i in range(3)]
        beyond = streamed(channel, [hello_message("n3"), framed("n3", 1, 1)])
        again = streamed(channel, [hello_message("n0"), framed("n0", 1, 2)])
        collector.kill(signal.SIGTERM)
        collector.start()  # the nodes it holds come back from the store, and still count
        after_restart = streamed(channel, [hello_message("n3"), framed("n3", 1, 1)])
        listed = {n["node_id"]: n["reports_total"] for n in collector.nodes()}
        log = collector.log.read_text() if collector.log else ""
    assert first == [(grpc.StatusCode.OK, 1)] * 3
    assert (beyond[0], after_restart[0]) == (grpc.StatusCode.RESOURCE_EXHAUSTED,) * 2
    assert again == (grpc.StatusCode.OK, 2)
    assert listed == {"n0": 2, "n1": 1, "n2": 1}
    assert "--max-nodes" in log
