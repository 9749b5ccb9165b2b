"""A simulated node whose reports a test sends itself over a real stream, so it knows every value
and how many samples the collector's remote write offers a receiver for them."""

from __future__ import annotations

import grpc

from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.remote_write.series import NodeSeries
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.tools.simulator.simulation import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb


class Node:
    """A simulated node whose reports the test sends itself, so it knows every value."""

    def __init__(self, node_id: str, scenario: str, start: float) -> None:
        self.sim = Simulation(scenario, node_id=node_id, start_time=start)
        self.node_id = node_id
        self.seq = 0
        self.sent: list[pb.NodeReport] = []
        self.detector = NodeDetector(node_id, DetectorConfig())
        self.series = NodeSeries(node_id)
        # The collector's history of the node: its closed minutes' split goes out with the series.
        self.history = NodeHistory(node_id, HistoryConfig())
        self.series_total = 0  # what the collector will offer the receiver for these reports

    def reports(self, count: int) -> list[pb.NodeReport]:
        out = []
        for _ in range(count):
            self.seq += 1
            report = self.sim.step(1.0)
            report.epoch, report.seq = 1, self.seq
            if self.seq == 1:
                report.info.CopyFrom(self.sim.info())
            verdict = self.detector.observe(report)
            self.history.observe(report, b"", verdict)
            closed = self.history.counters.closed
            self.series.gpu_seconds = {job: tuple(values) for job, values in closed.items()}
            self.series_total += self.series.encode(report, verdict).samples
            out.append(report)
        self.sent.extend(out)
        return out

    def stream(self, address: str, reports: list[pb.NodeReport]) -> None:
        hello = pb.AgentMessage(hello=self.sim.info()).SerializeToString()
        messages = [hello, *(frame_report(r.SerializeToString()) for r in reports)]
        with grpc.insecure_channel(address) as channel:
            call = channel.stream_stream(
                STREAM_METHOD, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString
            )
            acked = 0
            for ack in call(iter(messages), timeout=60):
                acked = max(acked, ack.acked_seq)
        assert acked == reports[-1].seq
