"""A report and its verdict as remote-write series: the agent's ``/metrics`` families (dcgm-exporter's
``DCGM_FI_*``, node_exporter's ``node_*``, from ``core/exposition/``) plus a ``node`` label, and the
detector's series under the collector's ``/metrics`` names."""

from __future__ import annotations

from collections.abc import Iterator

from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.exposition.dcgm import dcgm_families, gpu_labels, nvlink_families
from nodeagent.core.exposition.node import node_families
from nodeagent.core.metrics_text import SampleReader, TextFamily
from nodeagent.prompb import remote_pb2 as prompb
from nodeagent.v1 import nodeagent_pb2 as pb

Labels = tuple[tuple[str, str], ...]


class NodeSeries:
    """One node's topology and last XIDs (reports carry them only when they change)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.info: pb.NodeInfo | None = None
        self.gpu_labels: dict[int, dict[str, str]] = {}
        self.last_xid: dict[int, int] = {}
        self.reader = SampleReader()

    def series(self, report: pb.NodeReport, verdict: NodeVerdict | None) -> list[prompb.TimeSeries]:
        """Every series of this report, stamped with the report's time."""
        if report.HasField("info"):
            # A copy: a reference into the received message would keep all of it in memory.
            self.info = pb.NodeInfo()
            self.info.CopyFrom(report.info)
            self.gpu_labels = gpu_labels(report.info, self.node_id)
        # As the agent's /metrics keeps it (DCGM_FI_DEV_XID_ERRORS: the last XID of each GPU).
        for event in report.events:
            if event.kind == "xid" and event.subject.startswith("gpu:") and event.subject[4:].isdigit():
                xid = event.attributes.get("xid", "")
                if xid.isdigit():
                    self.last_xid[int(event.subject[4:])] = int(xid)
        millis = int(report.time_unix_seconds * 1000)
        out: list[prompb.TimeSeries] = []
        node = ("node", self.node_id)
        # The families are the agent's /metrics text; read back, the series carry exactly the names
        # and labels a scrape of that page sees.
        for name, labels, value in self.reader.samples(self._families(report)):
            out.append(_series(sorted((*labels, node, ("__name__", name))), value, millis))
        if verdict is not None:
            out.extend(_verdict_series(verdict, node, millis))
        return out

    def _families(self, report: pb.NodeReport) -> Iterator[TextFamily]:
        yield from dcgm_families(report, self.gpu_labels, self.last_xid)
        yield from nvlink_families(report, self.gpu_labels)
        yield from node_families(report, self.info)


def _series(labels: list[tuple[str, str]] | Labels, value: float, millis: int) -> prompb.TimeSeries:
    ts = prompb.TimeSeries()
    for name, text in labels:
        ts.labels.add(name=name, value=text)
    ts.samples.add(value=value, timestamp=millis)
    return ts


def _verdict_series(v: NodeVerdict, node: tuple[str, str], millis: int) -> Iterator[prompb.TimeSeries]:
    """The collector's /metrics names (collector/metrics_fleet.py) for the verdict."""
    state = (("cause", v.cause or ""), ("state", v.state), ("tier", v.tier or ""))
    yield _series(sorted((("__name__", "nodeagent_node_state"), node, *state)), 1.0, millis)
    if v.starvation_ratio is not None:
        yield _series((("__name__", "nodeagent_node_starvation_ratio"), node), v.starvation_ratio, millis)
    for g in v.gpus:
        gpu = ("gpu", str(g.index))
        gstate = (("cause", g.cause or ""), ("state", g.state), ("tier", g.tier or ""), ("uuid", g.uuid))
        yield _series(sorted((("__name__", "nodeagent_gpu_state"), gpu, node, *gstate)), 1.0, millis)
        if g.starvation_ratio is not None:
            yield _series((("__name__", "nodeagent_gpu_starvation_ratio"), gpu, node), g.starvation_ratio, millis)
        yield _series((("__name__", "nodeagent_gpu_data_starved_seconds_total"), gpu, node), g.gpu_seconds_lost, millis)
