"""What one scrape of the collector's /metrics costs with a large fleet.

Fills a collector's memory (a real ``Ingest`` on a scratch SQLite file) with N 8-GPU nodes that
each have a detector verdict and window evidence (from the ordinary-cloud simulation: starved,
every family present), then times, on this thread:

- the fleet families written by ``nodeagent.collector.views.metrics_fleet`` (what /metrics serves);
- the same samples through prometheus_client's own encoder (the reference: what the families
  would cost written the library's way);
- gzip level 1 of the text, as the HTTP server does when the scraper asks (Prometheus does).

Prints per fleet size the samples, the text's size, milliseconds per scrape and the ratio
against the reference. ``--metrics KEY=VALUE,...`` sets ``[metrics]`` (``per_gpu_families``,
``per_node_families``: true or false; ``per_gpu_max_nodes``: a count) as collector.toml would.

    python bench/metrics_scrape.py [--nodes 1000,10000] [--repeat 3] [--metrics per_gpu_families=false]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.collector.views.metrics_config import MetricsConfig, MetricsConfigError
from nodeagent.collector.views.metrics_fleet import FleetMetrics
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.tools.simulator import Simulation

T = TypeVar("T")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--metrics", default="", help="[metrics] settings: KEY=VALUE,... (default: its defaults)")
    args = parser.parse_args()
    settings = _metrics_settings(args.metrics)
    detector = _starved_detector()
    print(f"{'nodes':>6} {'samples':>8} {'text MB':>8} {'fleet ms':>9} {'us/sample':>9} "
          f"{'reference ms':>12} {'ratio':>6} {'gzip ms':>8} {'gzip MB':>8}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        writer = StoreWriter(Path(tmp) / "bench.db")
        alerting = Alerting(AlertConfig(), [])
        try:
            ingest = build_ingest(writer, alerting)
            for count in (int(n) for n in args.nodes.split(",")):
                _fill(ingest, count, detector)
                fleet = FleetMetrics(ingest, clock=lambda: detector.verdict.time_unix_seconds, settings=settings)
                text, fleet_s = _best(fleet.render, args.repeat)
                reference = _Reference(text)
                registry = CollectorRegistry(auto_describe=False)
                registry.register(reference)
                _, reference_s = _best(functools.partial(generate_latest, registry), args.repeat)
                data = text.encode()
                packed, gzip_s = _best(functools.partial(gzip.compress, data, compresslevel=1), args.repeat)
                samples = reference.samples
                print(f"{count:>6} {samples:>8} {len(data) / 1e6:>8.1f} {fleet_s * 1e3:>9.0f} "
                      f"{fleet_s / samples * 1e6:>9.2f} {reference_s * 1e3:>12.0f} {fleet_s / reference_s:>6.2f} "
                      f"{gzip_s * 1e3:>8.0f} {len(packed) / 1e6:>8.1f}")  # fmt: skip
        finally:
            writer.call_sync(alerting.close)
            writer.close()


def _metrics_settings(text: str) -> MetricsConfig:
    raw: dict[str, object] = {}
    for pair in filter(None, text.split(",")):
        key, _, value = pair.partition("=")
        raw[key.strip()] = {"true": True, "false": False}.get(value.strip(), value.strip())
        if isinstance(raw[key.strip()], str) and value.strip().isdigit():
            raw[key.strip()] = int(value)
    try:
        return MetricsConfig.from_mapping(raw, source="--metrics")
    except MetricsConfigError as err:
        print(f"metrics_scrape: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _starved_detector() -> NodeDetector:
    """A detector that has seen ten minutes of a starved node: verdict, GPUs and evidence set."""
    sim = Simulation("ordinary-cloud", node_id="bench", seed=1)
    detector = NodeDetector("bench", DetectorConfig())
    for _ in range(600):
        detector.observe(sim.step(1.0))
    return detector


def _fill(ingest: Ingest, count: int, detector: NodeDetector) -> None:
    now = detector.verdict.time_unix_seconds
    ingest.nodes.clear()
    for i in range(count):
        node_id = f"gpu-node-{i:05d}.cluster.example"
        row = NodeRow(node_id=node_id, first_seen=now - 600, last_seen=now, reports_total=600, gpu_count=8)
        ingest.nodes[node_id] = NodeState(row=row, detector=detector)


def _best(func: Callable[[], T], repeat: int) -> tuple[T, float]:
    best = float("inf")
    result = func()  # a warm-up, and the result
    for _ in range(repeat):
        started = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - started)
    return result, best


class _Reference(Collector):
    """The same families as prometheus_client Metric objects, built at collect time as a
    custom collector of the library would (one add per sample)."""

    def __init__(self, text: str) -> None:
        self.parsed = [(f.name, f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
                       for f in text_string_to_metric_families(text)]  # fmt: skip
        self.samples = sum(len(s) for *_, s in self.parsed)

    def collect(self) -> Iterator[Metric]:
        for name, kind, documentation, samples in self.parsed:
            family = Metric(name, documentation, kind)
            for sample_name, labels, value in samples:
                family.add_sample(sample_name, dict(labels), value)
            yield family


if __name__ == "__main__":
    main()
