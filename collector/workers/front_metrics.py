"""The front's own families on the merged ``/metrics``: its workers, their restarts, its redirects.

Its process and build families carry ``worker="front"``, as each worker's carry ``worker="i"``,
so the merged page holds each series once.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from nodeagent import __version__
from nodeagent.collector.views.metrics import LabelledCollector
from nodeagent.collector.workers.front import FrontServer

FRONT_LABEL = "front"


class FrontMetrics(Collector):
    def __init__(self, front: FrontServer) -> None:
        self.front = front
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.registry.register(LabelledCollector(ProcessCollector(registry=None), "worker", FRONT_LABEL))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "nodeagent_build_info", "The running nodeagent.", labels=["version", "component", "worker"]
        )
        info.add_metric([__version__, "collector", FRONT_LABEL], 1.0)
        yield info
        workers = self.front.supervisor.workers
        up = GaugeMetricFamily("nodeagent_collector_worker_up", "1 while the worker process serves.", labels=["worker"])
        restarts = CounterMetricFamily(
            "nodeagent_collector_worker_restarts",
            "Times the worker process was started again, after it died or failed to start.",
            labels=["worker"],
        )  # fmt: skip
        redirects = CounterMetricFamily(
            "nodeagent_collector_redirects", "Agent streams the front sent to the worker that owns their node.",
            labels=["worker"],
        )  # fmt: skip
        for worker in workers:
            up.add_metric([str(worker.index)], 1.0 if worker.up else 0.0)
            restarts.add_metric([str(worker.index)], worker.restarts_total)
            redirects.add_metric([str(worker.index)], self.front.redirects_total[worker.index])
        yield GaugeMetricFamily(
            "nodeagent_collector_workers_up", "Worker processes serving now (of --workers).",
            value=sum(1 for w in workers if w.up),
        )  # fmt: skip
        yield from (up, restarts, redirects)
        refused = CounterMetricFamily(
            "nodeagent_collector_front_streams_refused", "Agent streams the front refused, by reason.",
            labels=["reason"],
        )  # fmt: skip
        for reason, count in sorted(self.front.refused_total.items()):
            refused.add_metric([reason], count)
        yield refused
