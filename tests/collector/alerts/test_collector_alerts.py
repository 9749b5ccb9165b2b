"""Alerts through a running collector: rules on ingested reports, the book in the collector's
SQLite file, ``nodeagent-collector alerts``, and a collector restart that keeps the alert."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import grpc

from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.fleet import Collector, cli, free_port, processes, wait_for

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

# Reports 10 s apart ending about now: the collector refuses times far from its clock.
T0 = time.time() - 60


def _report(seq: int, *, lost: bool) -> bytes:
    report = pb.NodeReport(node_id="gpu-node", epoch=1, seq=seq, time_unix_seconds=T0 + 10 * seq)
    for index in range(2):
        report.gpus.add(index=index, uuid=f"GPU-{index}", lost=lost and index == 1, utilization_gpu_ratio=0.9)
    return frame_report(report.SerializeToString())


def _stream(address: str, messages: list[bytes]) -> list[int]:
    hello = pb.AgentMessage(hello=pb.NodeInfo(node_id="gpu-node")).SerializeToString()
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
        )
        return [ack.acked_seq for ack in call(iter([hello, *messages]), timeout=10)]


def _alerts(collector: Collector, *extra: str) -> list[dict[str, object]]:
    return list(json.loads(cli("collector", "alerts", "--json", "--collector", collector.address, *extra)))


def test_lost_gpu_alert_fires_survives_a_restart_and_resolves(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        _stream(collector.address, [_report(1, lost=False), _report(2, lost=True)])
        assert wait_for(lambda: _alerts(collector), timeout=10)
        firing = _alerts(collector)
        collector.kill(signal.SIGKILL)
        collector.start()
        after_restart = _alerts(collector)
        _stream(collector.address, [_report(3, lost=False)])
        assert wait_for(lambda: not _alerts(collector), timeout=10)
        history = _alerts(collector, "--all")
    assert [(a["name"], a["key"], a["severity"], a["state"]) for a in firing] == [
        ("GPULost", "gpu:1", "critical", "firing")
    ]
    assert after_restart == firing
    assert [(a["name"], a["state"]) for a in history] == [("GPULost", "resolved")]
    assert history[0]["starts_at"] == firing[0]["starts_at"]


def test_a_node_that_stops_is_watched_at_the_next_flush_not_a_watch_period_later() -> None:
    """``nodes`` says `stopped` the moment the stream ends; NodeStopped must not lag it by the
    node watch's period (a user's `alerts` right after would miss it)."""
    from nodeagent.collector.alerts.alerting import NODE_DOWN_CHECK_SECONDS, Alerting
    from nodeagent.collector.alerts.config import AlertConfig

    alerting = Alerting(AlertConfig(), [])
    stopped: dict[str, float] = {}
    now = 1000.0
    assert alerting.take(now, dict, stopped=lambda: stopped) == []  # the watch ran: next one a period on
    stopped["n1"] = now + 0.05
    assert alerting.take(now + 0.05, dict, stopped=lambda: stopped) == []  # not due yet
    alerting.watch_soon()
    signals = alerting.take(now + 0.1, dict, stopped=lambda: stopped)
    assert ("NodeStopped", "n1", True) in [(s.name, s.node_id, s.firing) for s in signals]
    assert NODE_DOWN_CHECK_SECONDS > 0.1  # the watch was not due by its own period
