"""The computing source's evidence in words, sent when it says something new.

Each GPU's ``computing_source`` goes in every report (the collector's estimator follows it), but
its ``computing_source_reason`` is words, 20-90 bytes a GPU: sent every second it would be a third
of an 8-GPU report. The daemon sends a GPU's reason when its source changes and once a minute
besides (a collector that restarted, or took the node over, learns it within the minute); the
collector keeps the last one it heard (``GpuTrack.source_reason``). ``nodeagent sample`` and
``top`` show every report's reason: they do not pass through here.

Cost: one comparison a GPU a tick; a dict entry a GPU.
"""

from __future__ import annotations

from typing import Final

from nodeagent.v1 import nodeagent_pb2 as pb

RESEND_SECONDS: Final = 60.0


class SourceReasons:
    def __init__(self, resend_seconds: float = RESEND_SECONDS) -> None:
        self.resend_seconds = resend_seconds
        self._sent: dict[int, tuple[str, float]] = {}  # GPU index -> (source, when its reason went)

    def thin(self, report: pb.NodeReport) -> None:
        """Clear each GPU's reason in ``report`` that the collector already heard for its source."""
        now = report.time_unix_seconds
        sent = self._sent
        for gpu in report.gpus:
            if not gpu.computing_source_reason:
                continue
            last = sent.get(gpu.index)
            if last is not None and last[0] == gpu.computing_source and 0.0 <= now - last[1] < self.resend_seconds:
                gpu.ClearField("computing_source_reason")
            else:
                sent[gpu.index] = (gpu.computing_source, now)
