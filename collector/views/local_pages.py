"""What this collector's HTTP listener answers for ``path?query``, without a listener: the ``Page``
RPC's answer (``/metrics``, ``/healthz``, the fleet page and its ``/api/...`` JSON) as a ``PageResponse``.

The same objects serve both: the listener (``service/server.py``) takes its ``/metrics`` and its
pages from here, so a page asked over gRPC is the page a browser gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from nodeagent.collector.views.fleet_page import FleetPage
from nodeagent.collector.views.metrics import MetricsExposition
from nodeagent.core.exposition.http_reply import TEXT_CONTENT_TYPE
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.collector.views.fleet_state import FleetState

METRICS_PATH: Final = "/metrics"
HEALTH_PATH: Final = "/healthz"
_NOT_FOUND: Final = pb.PageResponse(status=404, content_type="text/plain; charset=utf-8", body=b"not found\n")


class LocalPages:
    """``/metrics`` and the fleet page of one collector (its own nodes only)."""

    def __init__(self, server: FleetState) -> None:
        self.exposition = MetricsExposition(server)
        self.fleet = FleetPage(server)

    def answer(self, path: str, query: str) -> pb.PageResponse:
        """The page for ``path?query``; runs on a thread (the fleet page waits on the store's)."""
        if path == METRICS_PATH:
            return pb.PageResponse(status=200, content_type=TEXT_CONTENT_TYPE, body=self.exposition.render())
        if path == HEALTH_PATH:  # a front's /healthz asks its workers this
            ok, detail = self.exposition.health()
            body = f"{detail}\n".encode()
            return pb.PageResponse(status=200 if ok else 503, content_type=TEXT_CONTENT_TYPE, body=body)
        found = self.fleet.route(path, query)
        if found is None:
            return _NOT_FOUND
        status, content_type, body = found
        return pb.PageResponse(status=int(status.split(" ", 1)[0]), content_type=content_type, body=body)
