"""A bare ingest client for tests that talk to the collector's stream directly: a hello, a small
report, one stream sent to its end, and a mutual-TLS channel."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc

from nodeagent.core.wire.framing import STREAM_METHOD
from nodeagent.v1 import nodeagent_pb2 as pb


def hello_message(node: str) -> bytes:
    """The serialized AgentMessage that opens a stream for ``node``."""
    return pb.AgentMessage(hello=pb.NodeInfo(node_id=node, hostname=node)).SerializeToString()


def small_report(node: str, seq: int) -> pb.NodeReport:
    """A valid report at epoch 7 with one NIC and one busy GPU."""
    report = pb.NodeReport(node_id=node, epoch=7, seq=seq, time_unix_seconds=1.7e9 + seq)
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


def tls_channel(address: str, ca: Path, cert: Path, key: Path) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(ca.read_bytes(), key.read_bytes(), cert.read_bytes())
    return grpc.secure_channel(address, credentials)
