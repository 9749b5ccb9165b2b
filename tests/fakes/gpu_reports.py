"""Reports of the agent's real GPU source over the fake NVML, handed straight to a collector's
ingest: what the node page's tests read back."""

from __future__ import annotations

import time
from typing import Any

from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.server import CollectorServer
from nodeagent.v1 import nodeagent_pb2 as pb


async def ingest_gpu_reports(
    server: CollectorServer, info: pb.NodeInfo, gpu_source: Any, fake_nvml: Any, state: Any, count: int
) -> None:
    """``count`` reports of ``gpu_source`` for ``info``'s node, one a second ending now, the fake's
    state advanced a second before each; accepted by ``server``'s ingest and flushed."""
    stream = StreamHandle(info.node_id, "test")
    server.ingest.attach(stream, info)
    start = time.time() - count
    for seq in range(1, count + 1):
        state.advance(1.0)
        fake_nvml.write()
        report = pb.NodeReport(node_id=info.node_id, epoch=1, seq=seq, time_unix_seconds=start + seq)
        if seq == 1:
            report.info.CopyFrom(info)
        gpu_source.collect(report)
        server.ingest.accept(stream, report, report.SerializeToString())
    await server.ingest.flusher.flush()
