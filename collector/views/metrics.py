"""The collector's ``/metrics`` and ``/healthz``.

``/metrics`` is two parts, both made at scrape time from what the collector keeps anyway:

- the collector's own families (ingest, store flushes, firing alerts, alert deliveries, the
  process), through a prometheus_client registry and its encoder;
- the fleet's per-node and per-GPU families (``nodeagent.collector.views.metrics_fleet``), written directly:
  at 10,000 nodes they are half a million samples, which prometheus_client's encoder would take
  seconds of the collector's CPU to write.

The scrape runs on the HTTP server's threads. It never touches SQLite itself: firing alerts come
from the alert book on the store's thread (an in-memory call queued behind the current flush).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import structlog
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from nodeagent import __version__
from nodeagent.collector.ingest.flush_stats import Histogram
from nodeagent.collector.views.metrics_fleet import FleetMetrics

if TYPE_CHECKING:
    from nodeagent.collector.views.fleet_state import FleetState

log = structlog.get_logger("nodeagent.collector")

# How long a scrape waits for the alert book behind a flush before leaving the alerts out.
ALERTS_TIMEOUT_SECONDS: Final = 5.0
# /healthz fails when no flush has completed for this long (a stuck disk or event loop).
FLUSH_STALE_SECONDS: Final = 15.0


class CollectorMetrics(Collector):
    """The collector's own families, read from the server at scrape time."""

    def __init__(self, server: FleetState) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server, ingest = self.server, self.server.ingest
        info = GaugeMetricFamily("nodeagent_build_info", "The running nodeagent.", labels=["version", "component"])
        info.add_metric([__version__, "collector"], 1.0)
        yield info
        yield CounterMetricFamily(
            "nodeagent_ingest_reports", "New reports accepted and stored, all nodes, since start.",
            value=ingest.reports_total,
        )  # fmt: skip
        yield CounterMetricFamily(
            "nodeagent_ingest_duplicate_reports", "Reports received again and acknowledged without storing them.",
            value=ingest.duplicates_total,
        )  # fmt: skip
        rejected = CounterMetricFamily(
            "nodeagent_ingest_streams_rejected", "Agent streams refused, by gRPC status and reason.",
            labels=["code", "reason"],
        )  # fmt: skip
        for (code, reason), count in sorted(dict(server.rejected).items()):
            rejected.add_metric([code, reason], count)
        yield rejected
        yield CounterMetricFamily(
            "nodeagent_ingest_streams_replaced", "Streams ended because a newer stream of the same node arrived.",
            value=server.replaced_total,
        )  # fmt: skip
        nodes = list(ingest.nodes.values())
        yield GaugeMetricFamily(
            "nodeagent_ingest_streams_connected", "Agent streams open now.",
            value=sum(1 for node in nodes if node.stream is not None),
        )  # fmt: skip
        yield GaugeMetricFamily("nodeagent_ingest_nodes", "Nodes this collector knows.", value=len(nodes))
        retired = CounterMetricFamily(
            "nodeagent_ingest_nodes_retired", "Nodes retired: forgotten by an operator, or silent past the age.",
            labels=["reason"],
        )  # fmt: skip
        for reason, count in sorted(ingest.retirement.retired_total.items()):
            retired.add_metric([reason], count)
        yield retired
        yield from self._refused_and_store()
        yield from _job_stage(server)
        yield from self._alerts()

    def _refused_and_store(self) -> Iterator[Metric]:
        """Reports acknowledged and not stored, and the store's own families."""
        server, ingest = self.server, self.server.ingest
        refused = CounterMetricFamily(
            "nodeagent_ingest_reports_refused",
            "New reports acknowledged but not stored: their time too far from this collector's clock.",
            labels=["reason"],
        )  # fmt: skip
        for reason, count in sorted(ingest.clock_refusals.totals.items()):
            refused.add_metric([reason], count)
        yield refused
        stats = ingest.flusher.stats
        yield _histogram(
            "nodeagent_store_flush_duration_seconds",
            "Time to write one batch to SQLite and commit it (flushes that wrote something).",
            stats.duration_seconds,
        )  # fmt: skip
        yield _histogram("nodeagent_store_flush_rows", "Nodes written per flush that wrote something.", stats.rows)
        yield CounterMetricFamily(
            "nodeagent_store_flushes_empty", "Flushes with nothing to write (not in the flush histograms).",
            value=stats.empty_total,
        )  # fmt: skip
        yield CounterMetricFamily(
            "nodeagent_store_flush_failures", "Flushes that failed (the collector stops acknowledging).",
            value=stats.failures_total,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "nodeagent_store_failing_seconds",
            "Seconds flushes have been failing, 0 while they commit (CollectorStoreFailing fires at 10).",
            value=ingest.flusher.failing_for(),
        )  # fmt: skip
        repairs = CounterMetricFamily(
            "nodeagent_store_repairs",
            "Damaged rows the store found and repaired since start, by what they were (docs/delivery.md).",
            labels=["what"],
        )
        for what, count in sorted(server.writer.store.repairs().items()):
            repairs.add_metric([what], count)
        yield repairs
        yield CounterMetricFamily(
            "nodeagent_store_lost_commits",
            "Commits the database had made and no longer held at start (its -wal deleted after a crash?).",
            value=server.writer.store.generation.lost_commits,
        )  # fmt: skip
        guard = ingest.flusher.history_guard
        if guard.enabled:
            yield GaugeMetricFamily(
                "nodeagent_store_history_available",
                "1 while the history is kept; 0 once damage stopped it for this run (HistoryUnavailable).",
                value=1.0 if guard.available else 0.0,
            )

    def _alerts(self) -> Iterator[Metric]:
        alerting = self.server.alerting
        firing = GaugeMetricFamily(
            "nodeagent_alerts_firing", "Alerts firing now: 1 per alert (subject: the part of the node it is about).",
            labels=["alertname", "node", "severity", "subject"],
        )  # fmt: skip
        try:
            alerts = self.server.writer.call_sync(alerting.recent, False, timeout=ALERTS_TIMEOUT_SECONDS)
        except TimeoutError:
            log.warning("metrics: the alert book did not answer in time; alerts left out of this scrape")
            alerts = None
        if alerts is not None:
            for alert in alerts:
                # A job's alert (JobStraggler) names its node among its labels: the straggler.
                node = alert.node_id or alert.labels.get("node", "")
                firing.add_metric([alert.name, node, alert.severity, alert.labels.get("subject", "")], 1.0)
            yield firing
        stats = alerting.dispatcher.stats()
        deliveries = CounterMetricFamily(
            "nodeagent_alert_deliveries", "Alert transitions handed to each sink, by result.",
            labels=["sink", "result"],
        )  # fmt: skip
        for sink, counts in sorted(stats.sinks.items()):
            deliveries.add_metric([sink, "delivered"], counts.delivered_total)
            deliveries.add_metric([sink, "failed"], counts.failed_total)
        yield deliveries
        yield CounterMetricFamily(
            "nodeagent_alert_transitions_dropped",
            "Transitions not queued for the sinks because the queue was full (sent again on the next start).",
            value=stats.dropped_total,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "nodeagent_alert_queued_transitions", "Transitions waiting for the sinks.", value=stats.queued
        )
        yield from _remote_write(self.server)


def _job_stage(server: FleetState) -> Iterator[Metric]:
    """The job roll-up's two stages and the messages between them (docs/fleet-scale.md)."""
    rollup = server.ingest.jobs
    yield CounterMetricFamily(
        "nodeagent_collector_job_steps_sent", "Node stage: one node's values for one job at one window step, sent.",
        value=rollup.steps_sent_total,
    )  # fmt: skip
    yield CounterMetricFamily(
        "nodeagent_collector_job_steps_received", "Job stage: node steps received for the jobs this process owns.",
        value=rollup.steps_received_total,
    )  # fmt: skip
    yield GaugeMetricFamily(
        "nodeagent_collector_jobs_owned", "Multi-node jobs this process owns and judges.", value=len(rollup.verdicts())
    )
    messenger = server.job_messenger
    if messenger is not None:
        messages = CounterMetricFamily(
            "nodeagent_collector_job_messages",
            "Job roll-up messages to and from other workers and collectors, by outcome (dropped: not "
            "delivered or the queue full; bad: refused on arrival).",
            labels=["outcome"],
        )  # fmt: skip
        for outcome, count in (
            ("sent", messenger.sent_total), ("dropped", messenger.dropped_total),
            ("received", messenger.received_total), ("bad", messenger.bad_total),
        ):  # fmt: skip
            messages.add_metric([outcome], count)
        yield messages


def _remote_write(server: FleetState) -> Iterator[Metric]:
    """The remote-write process's counters (its shared page) and the hand-over's own."""
    process = server.remote_write
    if process is None:
        return
    samples = CounterMetricFamily(
        "nodeagent_remote_write_samples", "Samples for each remote-write receiver, by what became of them.",
        labels=["url", "result"],
    )  # fmt: skip
    requests = CounterMetricFamily(
        "nodeagent_remote_write_requests", "Remote-write requests, by result.", labels=["url", "result"]
    )
    queued = GaugeMetricFamily("nodeagent_remote_write_queued_samples", "Samples waiting.", labels=["url"])
    cpu = CounterMetricFamily(
        "nodeagent_remote_write_cpu_seconds", "CPU of each receiver's sender thread.", labels=["url"]
    )
    losses = zip(process.receivers(), process.lost_samples, process.in_doubt_samples, strict=True)
    for (url, s), lost, in_doubt in losses:
        samples.add_metric([url, "sent"], s.samples_sent_total)
        samples.add_metric([url, "dropped_queue_full"], s.samples_dropped_queue_full_total)
        samples.add_metric([url, "refused"], s.samples_refused_total)
        samples.add_metric([url, "lost_process_died"], lost)
        samples.add_metric([url, "in_doubt_process_died"], in_doubt)
        requests.add_metric([url, "sent"], s.requests_total - s.request_failures_total)
        requests.add_metric([url, "failed"], s.request_failures_total)
        queued.add_metric([url], s.queued_samples)
        cpu.add_metric([url], s.cpu_seconds_total)
    yield from (samples, requests, queued, cpu)
    dropped = CounterMetricFamily(
        "nodeagent_remote_write_reports_dropped",
        "Reports not handed to the remote-write process, by reason: never turned into series.",
        labels=["reason"],
    )  # fmt: skip
    for reason, count in process.dropped.items():
        dropped.add_metric([reason], count)
    yield dropped
    yield CounterMetricFamily(
        "nodeagent_remote_write_reports_handed_over", "Reports handed to the remote-write process.",
        value=process.handed_over,
    )  # fmt: skip
    yield CounterMetricFamily(
        "nodeagent_remote_write_process_restarts", "Times the remote-write process was started again after it died.",
        value=process.restarts_total,
    )  # fmt: skip
    yield CounterMetricFamily(
        "nodeagent_remote_write_process_cpu_seconds",
        "CPU of the remote-write process, all its threads (building series, compressing, posting).",
        value=process.counters.process_cpu_seconds(),
    )  # fmt: skip


class MetricsExposition:
    """What ``/metrics`` and ``/healthz`` answer for one collector server."""

    def __init__(self, server: FleetState) -> None:
        self.server = server
        self.registry = CollectorRegistry(auto_describe=False)
        own: list[Collector] = [CollectorMetrics(server), ProcessCollector(registry=None)]
        index = server.worker_index
        for collector in own:
            # A worker's own families carry worker="i": merged by its front, they stay distinct series.
            self.registry.register(collector if index is None else LabelledCollector(collector, "worker", str(index)))
        self.fleet = FleetMetrics(
            server.ingest,
            settings=server.metrics_config,
            worker=None if index is None else str(index),
            worth=server.worth_config,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry) + self.fleet.render().encode()

    def health(self) -> tuple[bool, str]:
        """Healthy while the gRPC server serves and flushes keep completing."""
        server = self.server
        if not server.serving:
            return False, "gRPC server not serving"
        flusher = server.flusher
        if flusher is None or flusher.done():
            return False, "store flusher stopped"
        failing = server.ingest.flusher.failing()
        if failing is not None:
            return False, failing
        last = server.ingest.flusher.stats.last_monotonic or server.started_monotonic
        age = time.monotonic() - last
        if age > FLUSH_STALE_SECONDS:
            return False, f"no store flush completed for {age:.1f} s"
        return True, "ok"


class LabelledCollector(Collector):
    """Every sample of ``inner`` with one more label (``worker="i"``)."""

    def __init__(self, inner: Collector, name: str, value: str) -> None:
        self.inner = inner
        self.label = {name: value}

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [sample._replace(labels={**sample.labels, **self.label}) for sample in family.samples]
            yield labelled


def _histogram(name: str, help_text: str, histogram: Histogram) -> HistogramMetricFamily:
    buckets = histogram.cumulative()
    # _count is the +Inf bucket's count, so the two agree even when a flush lands mid-scrape.
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=histogram.sum)
