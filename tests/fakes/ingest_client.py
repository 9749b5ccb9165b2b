"""A bare ingest client for tests that talk to the collector's stream directly: a hello, a small
report, one stream sent to its end (its status, and how far it was acknowledged), and a
mutual-TLS channel."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb


def hello_message(node: str) -> bytes:
    """The serialized AgentMessage that opens a stream for ``node``."""
    return pb.AgentMessage(hello=pb.NodeInfo(node_id=node, hostname=node)).SerializeToString()


def small_report(node: str, seq: int, time_unix_seconds: float | None = None) -> pb.NodeReport:
    """A valid report at epoch 7 with one NIC and one busy GPU, made now (by default): the
    collector refuses times too far from its own clock."""
    when = time.time() if time_unix_seconds is None else time_unix_seconds
    report = pb.NodeReport(node_id=node, epoch=7, seq=seq, time_unix_seconds=when)
    report.nics.add(name="eth0", rx_bytes_total=10**9, speed_bytes_per_second=6.25e9)
    gpu = report.gpus.add(index=0, uuid="GPU-0", utilization_gpu_ratio=0.5, power_watts=300.0)
    gpu.processes.add(pid=42, name="python")
    return report


def send_messages(
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


def framed(node: str, epoch: int, seq: int, time_unix_seconds: float | None = None) -> bytes:
    """``small_report`` in ``epoch``, framed as the stream carries it."""
    report = small_report(node, seq, time_unix_seconds)
    report.epoch = epoch
    return frame_report(report.SerializeToString())


def streamed(channel: grpc.Channel, messages: Sequence[bytes]) -> tuple[grpc.StatusCode, int]:
    """Stream ``messages`` and half-close: the final status and the highest seq acknowledged."""
    call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString)
    acked = 0
    try:
        for ack in call(iter(messages), timeout=20):
            acked = max(acked, ack.acked_seq)
    except grpc.RpcError as err:
        return err.code(), acked
    return grpc.StatusCode.OK, acked


def tls_channel(address: str, ca: Path, cert: Path, key: Path) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(ca.read_bytes(), key.read_bytes(), cert.read_bytes())
    return grpc.secure_channel(address, credentials)
