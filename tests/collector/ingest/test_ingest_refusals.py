"""Bad input gets the right gRPC status and closes only its own stream.

A real agent streams to the collector the whole time; every bad client is answered while it
keeps flowing, and at the end every one of its reports was stored exactly once.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.certs import Authority
from tests.fakes.fleet import Agent, Collector, free_port, processes
from tests.fakes.trees import REPO

GOOD_REPORTS = 160


def _hello(node: str) -> bytes:
    return pb.AgentMessage(hello=pb.NodeInfo(node_id=node, hostname=node)).SerializeToString()


def _report(node: str, seq: int, **edit: object) -> pb.NodeReport:
    report = pb.NodeReport(node_id=node, epoch=7, seq=seq, time_unix_seconds=1.7e9 + seq)
    report.nics.add(name="eth0", rx_bytes_total=10**9, speed_bytes_per_second=6.25e9)
    gpu = report.gpus.add(index=0, uuid="GPU-0", utilization_gpu_ratio=0.5, power_watts=300.0)
    gpu.processes.add(pid=42, name="python")
    return report


def _send(
    channel: grpc.Channel, messages: Sequence[bytes], metadata: Sequence[tuple[str, str]] = ()
) -> grpc.StatusCode:
    """Stream ``messages``; the status the collector ends the stream with (OK if it accepted them)."""
    call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString)
    try:
        for _ack in call(iter(messages), timeout=10, metadata=tuple(metadata)):
            pass
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def _bad_cases(node: str) -> Iterator[tuple[str, list[bytes], grpc.StatusCode]]:
    good = _report(node, 1).SerializeToString()
    yield "no hello first", [frame_report(good)], grpc.StatusCode.INVALID_ARGUMENT
    whole = pb.AgentMessage(report=_report(node, 1)).SerializeToString()
    yield "truncated message", [_hello(node), whole[: len(whole) // 2]], grpc.StatusCode.INVALID_ARGUMENT
    yield "oversized message", [_hello(node), b"\x12" + b"\xff" * 2 * 1024 * 1024], grpc.StatusCode.RESOURCE_EXHAUSTED
    nan = _report(node, 1)
    nan.gpus[0].power_watts = math.nan
    yield "NaN", [_hello(node), frame_report(nan.SerializeToString())], grpc.StatusCode.INVALID_ARGUMENT
    ratio = _report(node, 1)
    ratio.gpus[0].utilization_gpu_ratio = 7.0
    yield "ratio above 1", [_hello(node), frame_report(ratio.SerializeToString())], grpc.StatusCode.INVALID_ARGUMENT
    negative = _report(node, 1)
    negative.nics[0].rx_bytes_total = 2**64 - 5  # what -5 becomes in a uint64 field
    yield "negative count", [_hello(node), frame_report(negative.SerializeToString())], grpc.StatusCode.INVALID_ARGUMENT
    negative_gauge = _report(node, 1)
    negative_gauge.nics[0].speed_bytes_per_second = -1.0
    bad = frame_report(negative_gauge.SerializeToString())
    yield "negative gauge", [_hello(node), bad], grpc.StatusCode.INVALID_ARGUMENT
    huge = _report(node, 1)
    for index in range(10_000):
        huge.gpus.add(index=index)
    yield "10,000 GPUs", [_hello(node), frame_report(huge.SerializeToString())], grpc.StatusCode.INVALID_ARGUMENT
    backwards = [frame_report(_report(node, seq).SerializeToString()) for seq in (5, 6, 3)]
    yield "seq backwards", [_hello(node), *backwards], grpc.StatusCode.INVALID_ARGUMENT
    other = frame_report(_report("someone-else", 1).SerializeToString())
    yield "report for another node", [_hello(node), other], grpc.StatusCode.INVALID_ARGUMENT
    yield "bad node id", [_hello("bad node/../id")], grpc.StatusCode.INVALID_ARGUMENT


def test_bad_input_is_refused_while_a_good_stream_flows(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        good = Agent(
            ["--collector", collector.address, "--node-id", "good-node", "--interval", "0.05",
             "--no-collector.gpu", "--max-reports", str(GOOD_REPORTS), "--deadline", "60"]
        ).start(tmp_path / "good.log")  # fmt: skip
        started.append(good)
        seen: dict[str, grpc.StatusCode] = {}
        closed = _garbage_closes_connection(collector.port)
        with grpc.insecure_channel(collector.address) as channel:
            for name, messages, _want in _bad_cases("bad-node"):
                seen[name] = _send(channel, messages)
            # The collector still takes a well-formed stream from the refused node.
            seen["well-formed"] = _send(
                channel, [_hello("bad-node"), frame_report(_report("bad-node", 1).SerializeToString())]
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
    collector = Collector(
        db=tmp_path / "c.db", port=free_port(),
        args=["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.cert_file)],
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
        message = [_hello("node-y"), frame_report(_report("node-y", 1).SerializeToString())]
        with grpc.insecure_channel(collector.address) as channel:
            seen["plaintext to the TLS port"] = _send(channel, message)
        with _tls_channel(collector.address, ca.cert_file, foreign.cert, foreign.key) as channel:
            seen["client certificate from another CA"] = _send(channel, message)
        with _tls_channel(collector.address, ca.cert_file, other_node.cert, other_node.key) as channel:
            seen["certificate of node-x claiming node-y"] = _send(channel, message)
            mine = [_hello("node-x"), frame_report(_report("node-x", 1).SerializeToString())]
            seen["certificate of node-x as node-x"] = _send(channel, mine)
        code, _summary = good.wait(timeout=60)
        assert code == 0, good.tail()
        listed = {n["node_id"]: n for n in collector.nodes(*_query_tls(ca, good_cert))}
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
    collector = Collector(db=tmp_path / "c.db", port=free_port(), args=["--token-file", str(token)])
    message = [_hello("node-t"), frame_report(_report("node-t", 1).SerializeToString())]
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            missing = _send(channel, message)
            wrong = _send(channel, message, [("authorization", "Bearer nope")])
            right = _send(channel, message, [("authorization", "Bearer s3cret-token")])
        nodes = collector.nodes("--token-file", str(token))
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
    collector = Collector(db=tmp_path / "c.db", port=free_port("0.0.0.0"), host="0.0.0.0", args=["--insecure"])
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


def _tls_channel(address: str, ca: Path, cert: Path, key: Path) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(ca.read_bytes(), key.read_bytes(), cert.read_bytes())
    return grpc.secure_channel(address, credentials)


def _query_tls(ca: Authority, pem: object) -> list[str]:
    return ["--tls-ca", str(ca.cert_file), "--tls-cert", str(pem.cert), "--tls-key", str(pem.key)]  # type: ignore[attr-defined]
