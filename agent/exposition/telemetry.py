"""What the sampling loop hands to ``/metrics``: the latest report, the one before, how many were
made and the Xids of the last window.

Apart from the page (``page.py``) so that the daemon, which publishes every tick whether or not
``--metrics-listen`` is set, does not load the page's families, the HTTP server, httptools and
isal for nothing: those are imported where the page is served (about 1.2 MB resident,
docs/performance.md). The GPU labels are written from the node's info on the first scrape after
it changes, by the page's own ``dcgm.gpu_labels``.
"""

from __future__ import annotations

import time
from typing import Final

from nodeagent.v1 import nodeagent_pb2 as pb

MAX_RECENT_XIDS: Final = 4096  # Xids kept for DCGM_EXP_XID_ERRORS_COUNT's window
# dcgm-exporter's default window (core/exposition/gpu_health.py's, which a test holds equal):
# kept here so that publishing a report does not import the page's families.
XID_COUNT_WINDOW_SECONDS: Final = 300.0


class AgentTelemetry:
    """What the sampling loop hands to /metrics: the latest report and how many were made."""

    def __init__(self, node_id: str, interval_seconds: float) -> None:
        self.node_id = node_id
        self.interval_seconds = interval_seconds
        self.produced_total = 0
        # Never mutated once published: a scrape on another thread reads them as they are.
        self.latest: pb.NodeReport | None = None
        self.previous: pb.NodeReport | None = None
        # Reports carry the topology only when it changes: the last one seen.
        self.info: pb.NodeInfo | None = None
        # The GPU labels of ``_labels_info`` (written when a scrape first asks after a change).
        self._labels: dict[int, dict[str, str]] = {}
        self._labels_info: pb.NodeInfo | None = None
        # The last XID of each GPU since the agent started (DCGM_FI_DEV_XID_ERRORS).
        self.last_xid: dict[int, int] = {}
        # (time, GPU index, Xid) of the Xids of the last window (DCGM_EXP_XID_ERRORS_COUNT).
        self.recent_xids: tuple[tuple[float, int, int], ...] = ()
        self.last_tick_monotonic = time.monotonic()

    @property
    def gpu_labels(self) -> dict[int, dict[str, str]]:
        """dcgm-exporter's labels of each GPU, from the last info seen ({} before any)."""
        info = self.info  # one read: the loop may publish a new one meanwhile
        if info is not self._labels_info:
            from nodeagent.core.exposition.dcgm import gpu_labels  # noqa: PLC0415  (the page's, see above)

            self._labels = gpu_labels(info, self.node_id)
            self._labels_info = info
        return self._labels

    def publish(self, report: pb.NodeReport) -> None:
        if report.HasField("info"):
            self.info = report.info
        xids = dict(self.last_xid)
        seen = []
        for event in report.events:
            if event.kind == "xid" and event.subject.startswith("gpu:") and event.subject[4:].isdigit():
                xid = event.attributes.get("xid", "")
                if xid.isdigit():
                    xids[int(event.subject[4:])] = int(xid)
                    seen.append((event.time_unix_seconds or report.time_unix_seconds, int(event.subject[4:]), int(xid)))
        self.last_xid = xids
        horizon = report.time_unix_seconds - XID_COUNT_WINDOW_SECONDS
        if seen or (self.recent_xids and self.recent_xids[0][0] <= horizon):
            kept = [x for x in (*self.recent_xids, *seen) if x[0] > horizon]
            self.recent_xids = tuple(kept[-MAX_RECENT_XIDS:])
        self.previous, self.latest = self.latest, report
        self.produced_total += 1
        self.last_tick_monotonic = time.monotonic()
