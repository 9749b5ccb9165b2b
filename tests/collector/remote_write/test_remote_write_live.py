"""Remote write into a real Prometheus (Debian's, `--web.enable-remote-write-receiver` on
loopback): the simulator's values come back through Prometheus' HTTP API, an outage inside the
queue bound loses nothing, an overflow is counted exactly; and bad receivers never touch ingest."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cramjam
import pytest

from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.sender import RemoteWriter
from nodeagent.collector.remote_write.series import EncodedReport
from nodeagent.prompb import remote_pb2 as prompb
from tests.conftest import require
from tests.fakes.fleet import Collector, free_port, processes, wait_for
from tests.fakes.http_receiver import http_receiver
from tests.fakes.remote_write_node import Node
from tests.fakes.tsdb import Prometheus

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

STARVED, HEALTHY = "rw-ordinary-cloud", "rw-fast-cloud"
REPORTS = 600  # 10 simulated minutes at 1 s, ending now: Prometheus takes samples this recent
QUEUE_SAMPLES = 10_000


def _counter(text: str, result: str) -> float:
    match = re.search(rf'nodeagent_remote_write_samples_total{{result="{result}",url="[^"]*"}} (\S+)', text)
    assert match, text[-3000:]
    return float(match.group(1))


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    require(Prometheus.available(), "needs prometheus (Debian package; `make system-deps`)")
    server = Prometheus(tmp_path / "prometheus").start()
    try:
        yield server
    finally:
        server.stop()


def test_prometheus_gets_the_simulated_series_and_an_outage_loses_nothing(
    tmp_path: Path, prometheus: Prometheus
) -> None:
    start = time.time() - REPORTS - 120
    starved, healthy = Node(STARVED, "ordinary-cloud", start), Node(HEALTHY, "fast-cloud", start)
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(),
        args=["--remote-write-url", prometheus.write_url, "--remote-write-resolution-seconds", "0",
              "--remote-write-queue-samples", str(QUEUE_SAMPLES)],
    )  # fmt: skip
    with processes() as started:
        started.append(collector.start())

        def offered() -> int:
            return starved.series_total + healthy.series_total

        def latest() -> float:
            """Where to query: the newest report's time. Under load the simulated reports run ahead
            of the wall clock, and a query at time.time() would miss the newest samples."""
            return max(time.time(), *(node.sent[-1].time_unix_seconds for node in (starved, healthy) if node.sent))

        def settled() -> bool:
            text = collector.metrics()
            return _counter(text, "sent") + _counter(text, "dropped_queue_full") == offered()

        # In steps the queue holds (a collector ingests far faster than one receiver takes).
        for _ in range(REPORTS // 20):
            for node in (starved, healthy):
                node.stream(collector.address, node.reports(20))
            assert wait_for(settled, 60, 0.2), collector.metrics()[-2000:]
        assert _counter(collector.metrics(), "dropped_queue_full") == 0
        now = latest()
        assert prometheus.stored_samples(STARVED, now) == starved.series_total
        # GPU 3 of the healthy node: every value the simulator produced, at its report's time.
        result = prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{node="{HEALTHY}",gpu="3"}}[2h]', now)
        assert len(result) == 1
        assert result[0]["metric"]["UUID"] == healthy.sim.info().gpu.gpus[3].uuid
        got = [(round(float(t) * 1000), float(v)) for t, v in result[0]["values"]]
        want = [(int(r.time_unix_seconds * 1000), r.gpus[3].utilization_gpu_ratio * 100) for r in healthy.sent]
        assert [t for t, _ in got] == [t for t, _ in want]
        assert [v for _, v in got] == pytest.approx([v for _, v in want])
        # The starved node's ratio is the detector's.
        ratio = prometheus.query(
            f'nodeagent_node_starvation_ratio{{node="{STARVED}"}}', starved.sent[-1].time_unix_seconds
        )
        expected = starved.detector.verdict.starvation_ratio
        assert expected is not None and expected > 0.2
        assert float(ratio[0]["value"][1]) == pytest.approx(expected)
        state = prometheus.query(f'nodeagent_node_state{{node="{STARVED}"}}', starved.sent[-1].time_unix_seconds)
        assert {s["metric"]["state"] for s in state} == {"starved"}

        # An outage inside the queue bound loses nothing.
        prometheus.stop()
        before = starved.series_total
        starved.stream(collector.address, starved.reports(10))
        assert starved.series_total - before < QUEUE_SAMPLES
        time.sleep(1.0)  # a few failed attempts
        prometheus.start()
        assert wait_for(settled, 90, 0.5), collector.metrics()[-2000:]
        assert _counter(collector.metrics(), "dropped_queue_full") == 0
        assert prometheus.stored_samples(STARVED, latest()) == starved.series_total

        # An overflow: every sample is either stored or counted as dropped, none twice.
        prometheus.stop()
        before = starved.series_total
        starved.stream(collector.address, starved.reports(120))
        assert starved.series_total - before > QUEUE_SAMPLES
        prometheus.start()
        assert wait_for(settled, 90, 0.5), collector.metrics()[-2000:]
        dropped = _counter(collector.metrics(), "dropped_queue_full")
        assert dropped > 0
        assert prometheus.stored_samples(STARVED, latest()) + dropped == starved.series_total
        assert collector.reports(STARVED) == REPORTS + 130  # ingest never waited for Prometheus


def test_a_report_sent_again_with_another_verdict_costs_only_its_own_samples(prometheus: Prometheus) -> None:
    """A report a dead shard had written, sent again through another collector: its verdict series
    are that collector's, another value at the series' newest timestamp, and Prometheus refuses the
    whole request ("duplicate sample for timestamp"). The other nodes' reports in the same batch
    must still be stored: the batch is split down to the refused report."""
    millis = int(time.time() * 1000)
    first = RemoteWriter(RemoteWriteConfig(url=prometheus.write_url, resolution_seconds=0))
    first.enqueue(_report("n1", millis, starved_seconds=1.0))
    second = RemoteWriter(RemoteWriteConfig(url=prometheus.write_url, resolution_seconds=0, backoff_seconds=0.01))
    for report in (_report("n2", millis), _report("n3", millis), _report("n1", millis, starved_seconds=2.0),
                   _report("n4", millis), _report("n5", millis)):  # fmt: skip
        second.enqueue(report)
    for writer in (first, second):
        _run_until_sent(writer)
    assert first.stats.samples_sent_total == 2
    # n1's report went again and was refused on its own; the four other nodes' went through.
    assert (second.stats.samples_sent_total, second.stats.samples_refused_total) == (8, 2)
    at = millis / 1000 + 1
    for node in ("n2", "n3", "n4", "n5"):
        assert prometheus.query(f'node_context_switches_total{{node="{node}"}}', at), node
    kept = prometheus.query('nodeagent_gpu_data_starved_seconds_total{node="n1"}[5m]', at)
    assert [v for _t, v in kept[0]["values"]] == ["1"]  # the first writer's value stays


def _run_until_sent(writer: RemoteWriter) -> None:
    writer.start()
    try:
        assert wait_for(lambda: writer.stats.queued_samples == 0, 30, 0.05), writer.stats
    finally:
        writer.stop()


def _report(node: str, millis: int, starved_seconds: float = 0.0) -> EncodedReport:
    """One report's series as the remote-write process encodes them: a counter of the agent's and a
    verdict series of the collector's."""
    request = prompb.WriteRequest()
    values = (("node_context_switches_total", 1000.0), ("nodeagent_gpu_data_starved_seconds_total", starved_seconds))
    for name, value in values:
        series = request.timeseries.add()
        for label, text in (("__name__", name), ("gpu", "0"), ("node", node)):
            series.labels.add(name=label, value=text)
        series.samples.add(value=value, timestamp=millis)
    return EncodedReport(request.SerializeToString(), len(request.timeseries))


def test_bad_receivers_do_not_touch_ingest(tmp_path: Path) -> None:
    start = time.time() - 100
    with http_receiver(script=[400] * 1000, error_body="out of order sample") as refusing, processes() as started:
        closed = f"http://127.0.0.1:{free_port()}/api/v1/write"
        collector = Collector(
            workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(),
            args=["--remote-write-url", refusing.url, "--remote-write-url", closed,
                  "--remote-write-resolution-seconds", "0"],
        )  # fmt: skip
        started.append(collector.start())
        node = Node("rw-bad", "fast-cloud", start)
        node.stream(collector.address, node.reports(30))
        assert collector.reports("rw-bad") == 30
        assert wait_for(lambda: _counter(collector.metrics(), "refused") > 0, 30, 0.2)
        attempt = refusing.attempts[0]
        assert attempt.headers["content-encoding"] == "snappy"
        assert attempt.headers["x-prometheus-remote-write-version"] == "0.1.0"
        request = prompb.WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(attempt.body)))
        assert {lb.value for ts in request.timeseries for lb in ts.labels if lb.name == "node"} == {"rw-bad"}
        collector.kill(signal.SIGTERM)
        assert collector.log is not None
        log = collector.log.read_text()
    refused = [line for line in log.splitlines() if "remote write refused" in line]
    assert len(refused) == 1 and "HTTP 400: out of order sample" in refused[0]  # at most once a minute
    failed = [line for line in log.splitlines() if "remote write failed; retrying" in line]
    assert failed and "Connection refused" in failed[0]


@pytest.mark.parametrize(
    ("url", "needle"),
    [("ftp://127.0.0.1/x", "not an http:// or https:// URL"), ("http://127.0.0.1:99999/x", "Port out of range")],
)
def test_a_bad_remote_write_url_is_named(tmp_path: Path, url: str, needle: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "serve", "--db", str(tmp_path / "c.db"),
         "--remote-write-url", url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert needle in lines[-1] and url in lines[-1]
