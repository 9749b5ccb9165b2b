"""The collector's composition root: every object of one collector process built here, each given
its collaborators through its constructor, in the order that feeds what. Read top to bottom, it
says what runs and what feeds what (as the OpenTelemetry Collector's ``service`` builds its
pipelines): the store, the alert book, the nodes held, the job roll-up, the silent nodes' rest and
retirement, the flush, the report stages, remote write, the intake, and the agents' streams.

``serve --workers 1`` builds one (``CollectorServer``), ``serve`` one per worker
(``collector/workers/``: each worker runs a ``CollectorServer``), tests and benches their ingest
alone (``build_ingest``). What needs the bound port (the queries, the fleet fan-out, the job
messages' routes) is built when the server starts (``server.CollectorServer.start``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.counters import SplitCounters
from nodeagent.collector.ingest.clock_bounds import ClockBounds, ClockRefusals
from nodeagent.collector.ingest.flush import Flusher
from nodeagent.collector.ingest.history_guard import HistoryGuard
from nodeagent.collector.ingest.intake import Ingest, load_nodes, rewaited, split_lost
from nodeagent.collector.ingest.node_state import DEFAULT_MAX_NODES, NodeState
from nodeagent.collector.ingest.report_stages import ReportStages
from nodeagent.collector.ingest.resting import Resting
from nodeagent.collector.ingest.retire import DEFAULT_RETIRE_AFTER_SECONDS, Retirement
from nodeagent.collector.ingest.streams import IngestStreams
from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.messages import Home
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.process import RemoteWriteProcess
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.files import make_private
from nodeagent.collector.store.reader import StoreReader
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.transport.security import AccessPolicy


@dataclass(frozen=True, slots=True)
class CollectorParts:
    """One collector's objects, built and wired; the server starts and stops them."""

    writer: StoreWriter
    # Queries read beside the writer, never on its thread (the flush's commit gates the acks).
    reader: StoreReader
    alerting: Alerting
    ingest: Ingest
    policy: AccessPolicy
    streams: IngestStreams


def build_collector(config: ServerConfig) -> CollectorParts:
    """One collector process's objects, from its configuration (a worker's included)."""
    settings = config.settings
    make_private(config.db_path)
    writer = StoreWriter(config.db_path)
    reader = StoreReader(config.db_path)
    alerting = Alerting(settings.alerts, settings.build_sinks())
    ingest = build_ingest(
        writer, alerting, detector_config=settings.detector, flush_seconds=config.flush_seconds,
        max_nodes=config.max_nodes, history=config.history, retire_after_seconds=config.retire_after_seconds,
        clock_bounds=config.clock_bounds, tenants=settings.tenants.names, worker=config.worker_index,
        remote_write=config.remote_write,
    )  # fmt: skip
    policy = AccessPolicy(config.security)
    streams = IngestStreams(
        ingest, config.security, policy, hello_timeout_seconds=config.hello_timeout_seconds,
        max_streams_per_source=config.max_streams_per_source, flush_seconds=config.flush_seconds,
        tenants=settings.tenants,
    )  # fmt: skip
    return CollectorParts(writer, reader, alerting, ingest, policy, streams)


def build_ingest(
    writer: StoreWriter,
    alerting: Alerting,
    *,
    detector_config: DetectorConfig | None = None,
    flush_seconds: float = 0.05,
    clock: Callable[[], float] = time.time,
    max_nodes: int = DEFAULT_MAX_NODES,
    history: HistoryConfig | None = None,
    retire_after_seconds: float = DEFAULT_RETIRE_AFTER_SECONDS,
    clock_bounds: ClockBounds | None = None,
    tenants: frozenset[str] = frozenset(),
    worker: int | None = None,
    remote_write: Sequence[RemoteWriteConfig] = (),
) -> Ingest:
    """The intake and everything a report reaches from it, on ``writer``'s store: ``worker``, this
    worker's index (None: a collector alone); ``remote_write``, its receivers (none: no process)."""
    detector_config = detector_config or DetectorConfig()
    history = history or HistoryConfig()
    writer.call_sync(alerting.open, writer.store.alerts)
    # History that cannot be read stops the history, not the start (``history_guard``).
    guard = HistoryGuard(history.enabled)
    history_seed = guard.at_start(writer, writer.store.history.seed) or {}
    # Each node's GPU time lost on its last stored day, before any report of this run is accepted.
    lost_days = guard.at_start(writer, writer.store.history.lost_on_last_day) or {}
    nodes = load_nodes(writer.call_sync(writer.store.nodes.load), lost_days)
    # Every multi-node job's verdict over its nodes; a wait that changes another node's verdict
    # goes to the book and that node's timeline, as after its own step.
    jobs = JobRollup(
        detector_config, JobRollupConfig(tenants=tenants), clock=clock, home=Home("", worker or 0),
        on_rewait=functools.partial(rewaited, nodes, alerting), split_lost=functools.partial(split_lost, nodes),
    )  # fmt: skip
    # Silent nodes shrink to what the views show; their history seeds from what the store had.
    resting = Resting(
        lambda: alerting.config.node_down_seconds, forgetters=[alerting.rest, jobs.forget], seeds=history_seed
    )
    retirement = Retirement(
        retire_after_seconds, started_at=clock(),
        forgetters=[alerting.forget, lambda node_id: history_seed.pop(node_id, None), jobs.forget],
    )  # fmt: skip
    flusher = Flusher(
        nodes, writer, alerting, flush_seconds=flush_seconds, clock=clock, history=history, retirement=retirement,
        resting=resting, history_guard=guard, worker="" if worker is None else str(worker),
    )  # fmt: skip
    # Rules, detector, job roll-up and signals: the one order replay follows too.
    stages = ReportStages(
        detector_config, jobs, rules=alerting.rules_for, node_signals=functools.partial(_node_signals, alerting),
        job_signals=functools.partial(_job_signals, alerting),
    )  # fmt: skip
    # Series are built and posted in a process of its own; ingest only hands reports over.
    gpu_seconds = functools.partial(_gpu_seconds, nodes)
    writes = RemoteWriteProcess(remote_write, jobs=jobs.verdicts, gpu_seconds=gpu_seconds) if remote_write else None
    return Ingest(
        nodes, writer, alerting, jobs, stages, flusher, retirement=retirement, resting=resting,
        history_seed=history_seed, clock_refusals=ClockRefusals(clock_bounds), remote_write=writes,
        detector_config=detector_config, history=history, clock=clock, max_nodes=max_nodes,
    )  # fmt: skip


def _node_signals(alerting: Alerting, _node_id: str, _time: float, signals: list[AlertSignal]) -> None:
    alerting.add(signals)


def _job_signals(alerting: Alerting, _time: float, signals: list[AlertSignal]) -> None:
    alerting.add(signals)


def _gpu_seconds(nodes: dict[str, NodeState], node_id: str) -> SplitCounters | None:
    """The node's split counters, for remote write (None without a history)."""
    node = nodes.get(node_id)
    return node.history.counters if node is not None and node.history is not None else None
