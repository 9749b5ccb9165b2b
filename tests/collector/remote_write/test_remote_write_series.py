"""A receiver gets the same bytes from the template encoder as from building every series from
the agent's page, sample by sample, as remote write first did (the reference below): for full
8-GPU reports, while the set of series changes, and through the sender's batches, which it
retries or drops by the receiver's answer."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace

import cramjam

from nodeagent.collector.jobs.families import job_families
from nodeagent.collector.remote_write.child import SeriesBuilder
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.records import read_report, report_record, verdict_bytes
from nodeagent.collector.remote_write.sender import RemoteWriter, RemoteWriteStats
from nodeagent.collector.remote_write.series import JobSeries, NodeSeries, verdict_row
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.exposition.dcgm import dcgm_families, gpu_labels, nvlink_families
from nodeagent.core.exposition.node import node_families
from nodeagent.core.exposition.text import TextFamily
from nodeagent.prompb import remote_pb2 as prompb
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.http_receiver import http_receiver
from tests.fakes.jobs import job_verdict


class ReferenceSeries:
    """Remote write's first encoder: the page read back line by line (as Prometheus reads it:
    names as written, where prometheus_client's parser adds ``_total`` to dcgm-exporter's
    counters), one ``TimeSeries`` built label by label for every sample, the verdict's after."""

    def __init__(self, node_id: str) -> None:
        self.node = ("node", node_id)
        self.node_id = node_id
        self.info: pb.NodeInfo | None = None
        self.labels: dict[int, dict[str, str]] = {}
        self.last_xid: dict[int, int] = {}

    def series(self, report: pb.NodeReport, verdict: NodeVerdict | None) -> list[prompb.TimeSeries]:
        if report.HasField("info"):
            self.info = pb.NodeInfo()
            self.info.CopyFrom(report.info)
            self.labels = gpu_labels(report.info, self.node_id)
        for event in report.events:
            if event.kind == "xid" and event.subject.startswith("gpu:") and event.subject[4:].isdigit():
                xid = event.attributes.get("xid", "")
                if xid.isdigit():
                    self.last_xid[int(event.subject[4:])] = int(xid)
        millis = int(report.time_unix_seconds * 1000)
        families = [
            *dcgm_families(report, self.labels, self.last_xid),
            *nvlink_families(report, self.labels),
            *node_families(report, self.info),
        ]
        out = [
            _series(sorted((*labels, self.node, ("__name__", name))), value, millis)
            for name, labels, value in _samples(families)
        ]
        if verdict is not None:
            v, node = verdict, self.node
            state = (("cause", v.cause or ""), ("state", v.state), ("tier", v.tier or ""))
            out.append(_series(sorted((("__name__", "nodeagent_node_state"), node, *state)), 1.0, millis))
            if v.starvation_ratio is not None:
                out.append(_series([("__name__", "nodeagent_node_starvation_ratio"), node], v.starvation_ratio, millis))
            for g in v.gpus:
                gpu = ("gpu", str(g.index))
                gstate = (("cause", g.cause or ""), ("state", g.state), ("tier", g.tier or ""), ("uuid", g.uuid))
                out.append(_series(sorted((("__name__", "nodeagent_gpu_state"), gpu, node, *gstate)), 1.0, millis))
                if g.starvation_ratio is not None:
                    ratio = [("__name__", "nodeagent_gpu_starvation_ratio"), gpu, node]
                    out.append(_series(ratio, g.starvation_ratio, millis))
                lost = [("__name__", "nodeagent_gpu_data_starved_seconds_total"), gpu, node]
                out.append(_series(lost, g.gpu_seconds_lost, millis))
        return out


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _samples(families: list[TextFamily]) -> list[tuple[str, list[tuple[str, str]], float]]:
    """(name, labels, value) of every sample line, labels unescaped."""
    out = []
    for family in families:
        for line in family.lines:
            head, _, value = line.rstrip("\n").rpartition(" ")
            name, _, text = head.partition("{")
            labels = [(m[1], re.sub(r"\\(.)", _unescaped, m[2])) for m in _LABEL.finditer(text[:-1])]
            out.append((name, labels, float(value)))
    return out


def _unescaped(match: re.Match[str]) -> str:
    return "\n" if match[1] == "n" else match[1]


def _series(labels: list[tuple[str, str]], value: float, millis: int) -> prompb.TimeSeries:
    ts = prompb.TimeSeries()
    for name, text in labels:
        ts.labels.add(name=name, value=text)
    ts.samples.add(value=value, timestamp=millis)
    return ts


def _reference_request(series: list[prompb.TimeSeries]) -> bytes:
    request = prompb.WriteRequest()
    request.timeseries.extend(series)
    return request.SerializeToString()


def _reports(
    scenario: str, node_id: str, count: int, step_seconds: float = 1.0
) -> list[tuple[pb.NodeReport, NodeVerdict]]:
    sim = Simulation(scenario, node_id=node_id, seed=3)
    detector = NodeDetector(node_id, DetectorConfig())
    out = []
    for seq in range(1, count + 1):
        report = sim.step(step_seconds)
        report.epoch, report.seq = 1, seq
        if seq == 1:
            report.info.CopyFrom(sim.info())
            # A label value the exposition escapes.
            report.info.hostname = 'rack "7"\\node\n2'
        _add_links_and_cores(report, seq)
        out.append((report, detector.observe(report)))
    return out


def _add_links_and_cores(report: pb.NodeReport, seq: int) -> None:
    """What the simulator leaves out and a real node has: per-link NVLink counters (the ``link``
    label inside a GPU's labels) and per-core CPU times, with counters past 2^53."""
    for gpu in report.gpus:
        for link in range(12):
            gpu.nvlinks.add(
                link=link, active=link != 11, rx_bytes_total=2**60 + seq * 977 + link, tx_bytes_total=seq * 1013,
                replay_errors_total=link % 3, crc_flit_errors_total=0,
            )  # fmt: skip
    for core in ("", *(str(i) for i in range(16))):
        report.host.cpus.add(cpu=core, user_seconds_total=seq * 0.37 + len(core), idle_seconds_total=seq / 3)


def _assert_same(ours: bytes, theirs: bytes) -> None:
    if ours != theirs:  # decoded first, for a readable difference
        assert prompb.WriteRequest.FromString(ours) == prompb.WriteRequest.FromString(theirs)
    assert ours == theirs


def test_a_full_8gpu_report_is_the_same_write_request_byte_for_byte() -> None:
    ours, reference = NodeSeries("rw-same"), ReferenceSeries("rw-same")
    for report, verdict in _reports("ordinary-cloud", "rw-same", 5):
        encoded = ours.encode(report, verdict)
        series = reference.series(report, verdict)
        assert encoded.samples == len(series)
        _assert_same(encoded.body, _reference_request(series))
    decoded = prompb.WriteRequest.FromString(encoded.body)
    names = {lb.value for ts in decoded.timeseries for lb in ts.labels if lb.name == "__name__"}
    # All eight GPUs, their links, the host, the verdict: a full report, not an empty template.
    assert {"DCGM_FI_DEV_GPU_UTIL", "nodeagent_gpu_nvlink_up", "node_cpu_seconds_total", "node_load1"} <= names
    assert {"nodeagent_node_state", "nodeagent_gpu_starvation_ratio"} <= names
    gpus = {lb.value for ts in decoded.timeseries for lb in ts.labels if lb.name == "gpu"}
    assert gpus == {str(i) for i in range(8)}
    assert {ts.samples[0].timestamp for ts in decoded.timeseries} == {int(report.time_unix_seconds * 1000)}


def test_a_changing_set_of_series_stays_the_same_as_the_reference() -> None:
    """A lost GPU and one that comes back, a field a GPU stops giving, an XID, a verdict that moves
    from idle to warmup to busy (its state is a label), and no verdict at all."""
    ours, reference = NodeSeries("rw-change"), ReferenceSeries("rw-change")
    reports = _reports("job-start", "rw-change", 50, step_seconds=4.0)
    states = set()
    for index, (report, verdict) in enumerate(reports):
        given: NodeVerdict | None = verdict
        if 5 <= index < 8:
            report.gpus[2].lost = True
        if 10 <= index < 13:
            report.gpus[5].ClearField("power_watts")
        if index == 15:
            event = report.events.add(kind="xid", subject="gpu:1")
            event.attributes["xid"] = "79"
        if index == 18:
            given = None
        states.add(verdict.state)
        encoded = ours.encode(report, given)
        _assert_same(encoded.body, _reference_request(reference.series(report, given)))
    assert {"idle", "warmup", "busy"} <= states


def test_the_sender_posts_the_batch_the_reference_builds() -> None:
    """Reports of two nodes in one batch: the joined per-report bytes are the WriteRequest of all
    their series, in order, as one message built from them would be serialized."""
    reports = [*_reports("healthy", "rw-a", 3), *_reports("storage-bound", "rw-b", 3)]
    reference = {"rw-a": ReferenceSeries("rw-a"), "rw-b": ReferenceSeries("rw-b")}
    expected = _reference_request(
        [ts for report, verdict in reports for ts in reference[report.node_id].series(report, verdict)]
    )
    with http_receiver() as receiver:
        writer = RemoteWriter(RemoteWriteConfig(url=receiver.url, resolution_seconds=0, batch_samples=100_000))
        _push(writer, reports, done=lambda stats: stats.samples_sent_total > 0)
    assert len(receiver.accepted) == 1
    _assert_same(bytes(cramjam.snappy.decompress_raw(receiver.accepted[0])), expected)
    assert writer.stats.samples_sent_total == len(prompb.WriteRequest.FromString(expected).timeseries)


def test_the_sender_retries_a_503_and_drops_only_the_report_a_400_refuses() -> None:
    reports = _reports("healthy", "rw-a", 2)
    # 503: the batch again; 400: the batch in halves, of which the first is refused on its own.
    with http_receiver([503, 400, 400], error_body="duplicate sample for timestamp") as receiver:
        writer = RemoteWriter(RemoteWriteConfig(url=receiver.url, resolution_seconds=0, backoff_seconds=0.01))
        _push(writer, reports, done=lambda stats: stats.samples_refused_total > 0)
    assert [attempt.outcome for attempt in receiver.attempts] == [503, 400, 400, 200]
    stats = writer.stats
    assert (stats.requests_total, stats.request_failures_total) == (4, 3)
    first, second = (len(prompb.WriteRequest.FromString(_body(a.body)).timeseries) for a in receiver.attempts[2:])
    assert (stats.samples_refused_total, stats.samples_sent_total) == (first, second)
    assert first > 0 and second > 0


def test_a_refusal_of_the_receiver_itself_is_not_split() -> None:
    """401, 403, 404: the receiver refuses any request alike; posting halves would only multiply them."""
    reports = _reports("healthy", "rw-a", 4)
    with http_receiver([401], error_body="unauthorized") as receiver:
        writer = RemoteWriter(RemoteWriteConfig(url=receiver.url, resolution_seconds=0, backoff_seconds=0.01))
        _push(writer, reports, done=lambda stats: stats.samples_refused_total > 0)
    assert [attempt.outcome for attempt in receiver.attempts] == [401]
    assert writer.stats.samples_sent_total == 0


def _body(compressed: bytes) -> bytes:
    return bytes(cramjam.snappy.decompress_raw(compressed))


def _push(
    writer: RemoteWriter, reports: list[tuple[pb.NodeReport, NodeVerdict]], done: Callable[[RemoteWriteStats], bool]
) -> None:
    """Hand the reports over as ingest does (their records, read back and built in the
    remote-write process's builder) before the thread starts (one batch), then run it until the
    queue is empty and ``done`` holds."""
    builder = SeriesBuilder(0.0)
    for report, verdict in reports:
        writer.enqueue(builder.report(*_handed_over(report, verdict)))
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while writer.stats.queued_samples or not done(writer.stats):
            assert time.monotonic() < deadline, writer.stats
            time.sleep(0.05)
    finally:
        writer.stop()


def _handed_over(report: pb.NodeReport, verdict: NodeVerdict | None) -> tuple[pb.NodeReport, object]:
    """What the remote-write process reads of a report ingest hands over."""
    row = verdict_row(verdict) if verdict is not None else None
    return read_report(report_record(verdict_bytes(row), report.SerializeToString()))


def test_the_handed_over_record_builds_the_same_bytes_as_the_report_itself() -> None:
    reports = [*_reports("healthy", "rw-a", 4), *_reports("storage-bound", "rw-b", 4)]
    direct, handed = SeriesBuilder(0.0), SeriesBuilder(0.0)
    for report, verdict in reports:
        assert handed.report(*_handed_over(report, verdict)).body == direct.report(report, verdict_row(verdict)).body  # type: ignore[arg-type]


def test_job_series_go_once_per_evaluation_under_the_metrics_names() -> None:
    """A job's series are sent with a new verdict (a new evaluation), under /metrics' names and
    labels, stamped with the verdict's time; the same verdict again sends nothing."""
    first = job_verdict("torch/a", nodes=("n1", "n2"))
    other = job_verdict("1234", source="slurm", state="busy", straggler_nodes=(), cause=None)
    series = JobSeries()
    sent = series.encode((first, other))
    assert sent is not None
    request = prompb.WriteRequest.FromString(sent.body)
    got = {_plain_labels(ts): (ts.samples[0].value, ts.samples[0].timestamp) for ts in request.timeseries}
    assert sent.samples == len(got)
    millis = int(first.time_unix_seconds * 1000)
    expected = {
        tuple(sorted((("__name__", name), *labels))): (value, millis)
        for name, labels, value in _samples(job_families([first, other]))
    }
    assert got == expected
    assert (("__name__", "nodeagent_job_straggler"), ("cause", "network"), ("job_name", "torch/a"),
            ("node", "n2")) in got  # fmt: skip
    assert series.encode((first, other)) is None  # nothing new was evaluated
    later = replace(first, time_unix_seconds=first.time_unix_seconds + 10, wait_ratio=0.6)
    again = series.encode((later, other))
    assert again is not None
    names = {dict(_plain_labels(ts))["job_name"] for ts in prompb.WriteRequest.FromString(again.body).timeseries}
    assert names == {"torch/a"}


def test_the_sender_sends_a_jobs_series_once_however_many_reports_come() -> None:
    """Twelve reports of two nodes, one roll-up snapshot: the job's series go once, beside every
    report's own; a new snapshot with a newer verdict goes again."""
    reports = [*_reports("healthy", "n1", 6), *_reports("healthy", "n2", 6)]
    first = (job_verdict("torch/a", nodes=("n1", "n2")),)
    builder = SeriesBuilder(0.0)
    with http_receiver() as receiver:
        writer = RemoteWriter(RemoteWriteConfig(url=receiver.url, resolution_seconds=0, batch_samples=100_000))
        for report, verdict in reports:
            writer.enqueue(builder.report(*_handed_over(report, verdict)))  # type: ignore[arg-type]
            jobs = builder.jobs(first)
            if jobs is not None:
                writer.enqueue(jobs)
        writer.start()
        try:
            assert _waited(lambda: len(receiver.accepted) == 1 and not writer.stats.queued_samples)
            later = builder.jobs((replace(first[0], time_unix_seconds=first[0].time_unix_seconds + 10),))
            assert later is not None
            writer.enqueue(later)
            assert _waited(lambda: len(receiver.accepted) == 2)
        finally:
            writer.stop()
    states = [
        ts
        for body in receiver.accepted
        for ts in prompb.WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(body))).timeseries
        if dict(_plain_labels(ts))["__name__"] == "nodeagent_job_state"
    ]
    assert [ts.samples[0].timestamp for ts in states] == [1_800_000_000_000, 1_800_000_010_000]


def _waited(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _plain_labels(ts: prompb.TimeSeries) -> tuple[tuple[str, str], ...]:
    return tuple((label.name, label.value) for label in ts.labels)


def test_the_split_counters_go_out_with_the_nodes_next_reports() -> None:
    """A ledger record sets the node's ``nodeagent_gpu_seconds_total`` series; its reports carry
    them, stamped with their time, as the collector's /metrics names them."""
    from nodeagent.collector.history.split import CATEGORIES
    from nodeagent.collector.remote_write.records import LEDGER, ledger_record, read_ledger

    totals = {"job-7": [100.0, 34.0] + [0.0] * (len(CATEGORIES) - 2)}
    record = ledger_record("oc", totals)
    assert record[:1] == LEDGER
    assert read_ledger(record) == ("oc", {"job-7": tuple(totals["job-7"])})
    builder = SeriesBuilder(0.0)
    builder.ledger(*read_ledger(record))
    sim = Simulation("ordinary-cloud", node_id="oc", seed=1)
    report = sim.step(1.0)
    encoded = builder.report(report, None)
    request = prompb.WriteRequest.FromString(encoded.body)
    found = {}
    for series in request.timeseries:
        labels = {label.name: label.value for label in series.labels}
        if labels["__name__"] == "nodeagent_gpu_seconds_total":
            assert labels["node"] == "oc" and labels["job_name"] == "job-7"
            assert series.samples[0].timestamp == int(report.time_unix_seconds * 1000)
            found[labels["category"]] = series.samples[0].value
    assert set(found) == set(CATEGORIES)
    assert found["computing"] == 100.0 and found["network"] == 34.0
