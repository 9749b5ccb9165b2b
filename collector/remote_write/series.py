"""A report and its verdict as remote-write series: the agent's ``/metrics`` families (dcgm-exporter's
``DCGM_FI_*``, node_exporter's ``node_*``, from ``core/exposition/``) plus a ``node`` label, and the
detector's series under the collector's ``/metrics`` names, serialized as a ``WriteRequest``.

Cost: building a ``TimeSeries`` with its eight or so ``Label`` messages for every sample was
most of the remote-write thread's CPU (about 19 us a sample of 22, and it shares the interpreter
lock with the ingest loop). A node sends the same series report after report, so each node keeps
one ``WriteRequest`` holding its series, labels made once, and a report only sets each sample's
value and timestamp and serializes it. The template is rebuilt from labels kept per series when
the set of series changes (per-core CPU times every 30 s, a lost GPU, a verdict's state label).

The job roll-up's verdicts are series too (``JobSeries``), under the collector's ``/metrics``
names (``collector/jobs/families.py``), once per evaluation of each job rather than with
every report of each of its nodes: a job's series are sent when its verdict is newer than the
one sent last, stamped with the verdict's time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from nodeagent.collector.history.split import CATEGORIES
from nodeagent.collector.jobs.families import job_families
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.states.words import shown_state
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.exposition.dcgm import dcgm_families, gpu_labels, nvlink_families
from nodeagent.core.exposition.node import node_families
from nodeagent.core.exposition.text import TextFamily, parse_series, series_values
from nodeagent.prompb import remote_pb2 as prompb
from nodeagent.v1 import nodeagent_pb2 as pb

Labels = tuple[tuple[str, str], ...]
# What identifies a series in a node's template: a sample line's ``name{labels}`` text (the
# agent's page), or a verdict series' sorted labels, ``__name__`` and ``node`` included.
SeriesKey = str | Labels
# What the series need of a node's verdict, in plain values (``verdict_row``): the shown state
# word, cause, tier, starvation ratio, and per GPU (index, state, cause, tier, uuid, starvation
# ratio, GPU seconds lost). Plain values so that the ingest side hands it over with ``marshal``
# in a microsecond or two (``records.py``), and the writer's process needs no detector.
GpuRow = tuple[int, str, str, str, str, float | None, float]
VerdictRow = tuple[str, str, str, float | None, tuple[GpuRow, ...]]
# Labels kept per node; a node's page has a few hundred series (a thousand or two with per-link
# NVLink and per-core CPU times), verdicts add a set per state a GPU takes.
MAX_SERIES_PER_NODE = 20_000


@dataclass(frozen=True, slots=True)
class EncodedReport:
    """One report's series: a serialized ``WriteRequest`` and how many samples it holds (one a series)."""

    body: bytes
    samples: int


class NodeSeries:
    """One node's topology, last XIDs (reports carry them only when they change) and series template."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.info: pb.NodeInfo | None = None
        self.gpu_labels: dict[int, dict[str, str]] = {}
        self.last_xid: dict[int, int] = {}
        self._node = ("node", node_id)
        # The series of the last report, in its order, and each one's only sample in the template.
        self._keys: list[SeriesKey] = []
        self._template = prompb.WriteRequest()
        self._samples: list[prompb.Sample] = []
        # Each series' labels as a serialized one-series WriteRequest, to rebuild templates from.
        self._parts: dict[SeriesKey, bytes] = {}
        # The GPU-seconds by job and category of its closed minutes, as the collector last sent them.
        self.gpu_seconds: dict[str, tuple[float, ...]] = {}

    def encode(self, report: pb.NodeReport, verdict: NodeVerdict | VerdictRow | None) -> EncodedReport:
        """Every series of this report, stamped with the report's time."""
        request = self.fill(report, verdict)
        return EncodedReport(request.SerializeToString(), len(self._keys))

    def fill(self, report: pb.NodeReport, verdict: NodeVerdict | VerdictRow | None) -> prompb.WriteRequest:
        """The node's template with this report's values and time: valid until the next call."""
        if report.HasField("info"):
            # A copy: a reference into the received message would keep all of it in memory.
            info = pb.NodeInfo()
            info.CopyFrom(report.info)
            self.set_info(info)
        # As the agent's /metrics keeps it (DCGM_FI_DEV_XID_ERRORS: the last XID of each GPU).
        for event in report.events:
            if event.kind == "xid" and event.subject.startswith("gpu:") and event.subject[4:].isdigit():
                xid = event.attributes.get("xid", "")
                if xid.isdigit():
                    self.last_xid[int(event.subject[4:])] = int(xid)
        # The families are the agent's /metrics text; read back, the series carry exactly the names,
        # labels and values a scrape of that page sees.
        page, values = series_values(self._families(report))
        keys: list[SeriesKey] = list(page)
        if verdict is not None:
            row = verdict_row(verdict) if isinstance(verdict, NodeVerdict) else verdict
            for labels, value in _verdict_series(row, self._node):
                keys.append(labels)
                values.append(value)
        for job, totals in sorted(self.gpu_seconds.items()):
            for category, value in zip(CATEGORIES, totals, strict=False):
                keys.append(_gpu_seconds_labels(self._node, job, category))
                values.append(value)
        if keys != self._keys:
            self._rebuild(keys)
        millis = int(report.time_unix_seconds * 1000)
        for sample, value in zip(self._samples, values, strict=True):
            sample.value = value
            sample.timestamp = millis
        return self._template

    def set_info(self, info: pb.NodeInfo) -> None:
        """The node's topology (a report carries it when it changes, or the collector hands it on
        to a restarted remote-write process)."""
        self.info = info
        self.gpu_labels = gpu_labels(info, self.node_id)

    def _families(self, report: pb.NodeReport) -> Iterator[TextFamily]:
        yield from dcgm_families(report, self.gpu_labels, self.last_xid)
        yield from nvlink_families(report, self.gpu_labels)
        yield from node_families(report, self.info)

    def _rebuild(self, keys: list[SeriesKey]) -> None:
        """A template for these series, in this order. Each series' labels are a serialized
        one-series ``WriteRequest`` made once and kept: joined, they parse as the request of all
        of them (protobuf merges concatenated messages), and each gets an empty sample to fill."""
        parts = self._parts
        if len(parts) + len(keys) > MAX_SERIES_PER_NODE:
            parts.clear()
        joined = []
        for key in keys:
            part = parts.get(key)
            if part is None:
                part = parts[key] = self._labels_only(key)
            joined.append(part)
        template = prompb.WriteRequest.FromString(b"".join(joined))
        self._samples = [series.samples.add() for series in template.timeseries]
        self._keys, self._template = keys, template

    def _labels_only(self, key: SeriesKey) -> bytes:
        request = prompb.WriteRequest()
        series = request.timeseries.add()
        for name, text in self._labels(key):
            series.labels.add(name=name, value=text)
        return request.SerializeToString()

    def _labels(self, key: SeriesKey) -> Labels:
        """The series' labels sorted by name, as remote write wants them."""
        if isinstance(key, str):
            name, labels = parse_series(key)
            return tuple(sorted((*labels, self._node, ("__name__", name))))
        return key


class JobSeries:
    """What was sent of each job: its series go again only with a newer verdict (a new evaluation)."""

    def __init__(self, resolution_seconds: float = 0.0) -> None:
        self.resolution_seconds = resolution_seconds
        # Job -> the time of the verdict last sent.
        self._sent: dict[str, float] = {}

    def encode(self, verdicts: tuple[JobVerdict, ...]) -> EncodedReport | None:
        """The series of the jobs whose verdict is new (at least ``resolution_seconds`` after the
        one sent), each stamped with its verdict's time; None when there is none. A few hundred
        series at most (one job, a handful each), built afresh: no template is worth keeping."""
        request = prompb.WriteRequest()
        sent = self._sent
        for verdict in verdicts:
            last = sent.get(verdict.job)
            t = verdict.time_unix_seconds
            if last is not None and t - last < max(self.resolution_seconds, 1e-9):
                continue
            sent[verdict.job] = t
            millis = int(t * 1000)
            texts, values = series_values(job_families([verdict]))
            for text, value in zip(texts, values, strict=True):
                name, labels = parse_series(text)
                series = request.timeseries.add()
                for label_name, label_value in sorted((("__name__", name), *labels)):
                    series.labels.add(name=label_name, value=label_value)
                series.samples.add(value=value, timestamp=millis)
        live = {v.job for v in verdicts}
        for job in [job for job in sent if job not in live]:
            del sent[job]  # a job the roll-up no longer follows: its next verdict is new again
        if not request.timeseries:
            return None
        return EncodedReport(request.SerializeToString(), len(request.timeseries))


def verdict_row(v: NodeVerdict) -> VerdictRow:
    """What the series take of a verdict, as plain values (``VerdictRow``)."""
    word = shown_state(v.state, gpu_count=len(v.gpus))  # at report time: never down, no-gpu as /metrics says
    gpus = tuple(
        (g.index, g.state, g.cause or "", g.tier or "", g.uuid, g.starvation_ratio, g.gpu_seconds_lost) for g in v.gpus
    )
    return word, v.cause or "", v.tier or "", v.starvation_ratio, gpus


def _gpu_seconds_labels(node: tuple[str, str], job: str, category: str) -> Labels:
    """``nodeagent_gpu_seconds_total``'s labels, sorted, as on the collector's /metrics."""
    return (("__name__", "nodeagent_gpu_seconds_total"), ("category", category), ("job_name", job), node)


def _verdict_series(v: VerdictRow, node: tuple[str, str]) -> Iterator[tuple[Labels, float]]:
    """The collector's /metrics names (collector/views/metrics_fleet.py) for the verdict: sorted labels, value."""
    word, cause, tier, ratio, gpus = v
    state = (("cause", cause), ("state", word), ("tier", tier))
    yield tuple(sorted((("__name__", "nodeagent_node_state"), node, *state))), 1.0
    if ratio is not None:
        yield (("__name__", "nodeagent_node_starvation_ratio"), node), ratio
    for index, gpu_state, gpu_cause, gpu_tier, uuid, gpu_ratio, lost in gpus:
        gpu = ("gpu", str(index))
        gstate = (("cause", gpu_cause), ("state", gpu_state), ("tier", gpu_tier), ("uuid", uuid))
        yield tuple(sorted((("__name__", "nodeagent_gpu_state"), gpu, node, *gstate))), 1.0
        if gpu_ratio is not None:
            yield (("__name__", "nodeagent_gpu_starvation_ratio"), gpu, node), gpu_ratio
        yield (("__name__", "nodeagent_gpu_data_starved_seconds_total"), gpu, node), lost
