"""The agent's daemon: sample every interval, spool, let the sender deliver, serve /metrics.

The sampling loop runs on the main thread and never waits on the network: each report goes into
the spool, and the sender thread drains it to the collector. systemd hears ``READY=1`` once the
sender (and /metrics) run, ``WATCHDOG=1`` after each completed tick and ``STOPPING=1`` on the way
out (``sd_notify.py``). SIGTERM and SIGINT end the loop; the daemon then waits a little for the
last acknowledgements (``DRAIN_SECONDS``) and stops /metrics, the pod-resources watch, the
sender, the spool and the source, in that order. A run with ``max_reports`` or ``stop_at`` is
finite (tests, checks of a delivery path): ``Outcome`` says what became of its reports.

What the daemon needs comes ready from the command line (``agent/cli/run.py``): the flags
checked, the spool opened and the source (this machine's, or the simulator's) built.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from nodeagent.agent.delivery.sender import Sender
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.pod_resources import PodResources, stamp_namespaces
from nodeagent.agent.exposition.telemetry import AgentTelemetry
from nodeagent.agent.sampling.report_source import ReportSource
from nodeagent.agent.sampling.source_reasons import SourceReasons
from nodeagent.agent.service import sd_notify
from nodeagent.core.program.malloc_arenas import release_freed_memory
from nodeagent.core.transport.channel import ClientSecurity
from nodeagent.core.wire.validate import repair
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    import ssl  # imported where HTTPS is configured: OpenSSL is megabytes resident

    from nodeagent.core.exposition.http_server import MetricsHttpServer

log = structlog.get_logger("nodeagent.run")

# Upper bound of what the AgentStatus section adds to a report (three varints and tags).
_AGENT_STATUS_BYTES = 40
# On a plain stop (SIGTERM, a stop_at without max_reports), how long to wait for last acks;
# whatever is still unacknowledged stays in the on-disk spool for the next start.
DRAIN_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    """How the daemon runs: the checked values of ``nodeagent run``'s flags."""

    node_id: str
    interval_seconds: float
    collectors: tuple[str, ...]
    security: ClientSecurity
    max_reports: int | None = None  # stop after this many; the run ends once all are acknowledged
    stop_at: float | None = None  # time.monotonic() at which to stop, delivered or not
    metrics_listen: str | None = None  # /metrics and /healthz: HOST:PORT, or off
    metrics_tls: ssl.SSLContext | None = None
    metrics_groups: tuple[str, ...] = ()  # the page's family groups: gpu, nvlink, node, agent
    # The kubelet's socket: each report's processes get their pod's namespace, the GPU families
    # their pod labels; "": none.
    pod_resources_socket: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    produced: int  # reports sampled and spooled
    delivered: bool  # every one acknowledged before the run ended
    reports_resent_total: int = 0  # sent again to another collector after an unacknowledged stream
    signalled: bool = False  # stopped by SIGTERM or SIGINT (then the drain waited DRAIN_SECONDS at most)


class MetricsListenError(Exception):
    """``metrics_listen`` could not be bound; nothing was started."""


def run_daemon(source: ReportSource, spool: Spool, settings: DaemonSettings) -> Outcome:
    """Run until a signal, ``max_reports`` or ``stop_at``; the spool and the source are closed
    on return (and when ``MetricsListenError`` is raised)."""
    node_id = settings.node_id
    sender = Sender(spool, settings.collectors, hello=lambda: _hello(source, node_id), security=settings.security)
    stop = threading.Event()
    _on_signals(stop)
    telemetry = AgentTelemetry(node_id, settings.interval_seconds)
    # Asked on a thread of its own; a no-op while the socket does not exist (no kubelet).
    pods = PodResources(settings.pod_resources_socket) if settings.pod_resources_socket else None
    try:
        http = _metrics_server(settings, telemetry, spool, sender, pods)
    except MetricsListenError:
        spool.close()
        source.close()
        raise
    sender.start()
    if pods is not None:
        pods.start()
    sd_notify.ready()
    collectors = list(settings.collectors)
    log.info("agent running", node=node_id, epoch=spool.epoch, next_seq=spool.next_seq, collectors=collectors)
    try:
        produced = _sample_loop(source, spool, settings, stop, telemetry, pods)
        delivered = _finish(sender, settings, stop)
    finally:
        sd_notify.stopping()
        if http is not None:
            http.stop()
        if pods is not None:
            pods.close()
        sender.stop()
        spool.close()
        source.close()
    return Outcome(produced, delivered, sender.reports_resent_total, stop.is_set())


def _sample_loop(
    source: ReportSource,
    spool: Spool,
    settings: DaemonSettings,
    stop: threading.Event,
    telemetry: AgentTelemetry,
    pods: PodResources | None = None,
) -> int:
    interval, max_reports, end = settings.interval_seconds, settings.max_reports, settings.stop_at
    produced = 0
    reasons = SourceReasons()  # each GPU's computing source in words, sent when it says something new
    next_tick = time.monotonic()
    while not stop.is_set():
        if end is not None and time.monotonic() >= end:
            break
        report = source.tick()
        if pods is not None:  # the kubelet's last answer: never waits on it
            stamp_namespaces(report, pods.namespaces())
        _sanitize(report)
        reasons.thin(report)
        for problem in spool.take_events():  # a failing spool disk, reports lost to damage
            report.events.add(
                time_unix_seconds=report.time_unix_seconds, kind="spool_degraded", severity="warning",
                subject="agent", message=problem[:512],
            )  # fmt: skip
        spool.make_room(report.ByteSize() + _AGENT_STATUS_BYTES, report.time_unix_seconds)
        stats = spool.stats()
        report.agent.spool_dropped_reports_total = stats.dropped_total
        report.agent.spool_reports = stats.reports
        report.agent.spool_bytes = stats.bytes
        spool.append(report.seq, report.SerializeToString(), report.time_unix_seconds)
        telemetry.publish(report)
        # Only a completed tick feeds the watchdog: a source hung in NVML gets the agent restarted.
        sd_notify.watchdog()
        produced += 1
        if produced == 1:  # start-up is over: what it freed goes back to the kernel
            release_freed_memory()
        if max_reports is not None and produced >= max_reports:
            break
        next_tick += interval
        now = time.monotonic()
        if next_tick < now - interval:  # fell behind (a slow source): skip, do not burst
            next_tick = now
        stop.wait(max(0.0, next_tick - now))
    return produced


def _sanitize(report: pb.NodeReport) -> None:
    """Drop, with an event saying so, any value the collector would refuse (see ``repair``)."""
    for problem in repair(report):
        log.warning("value dropped from report", seq=report.seq, problem=problem)
        report.events.add(
            time_unix_seconds=report.time_unix_seconds, kind="invalid_value_dropped", severity="warning",
            subject="agent", message=problem[:512],
        )  # fmt: skip


def _metrics_server(
    settings: DaemonSettings, telemetry: AgentTelemetry, spool: Spool, sender: Sender, pods: PodResources | None
) -> MetricsHttpServer | None:
    listen = settings.metrics_listen
    if listen is None:
        return None
    # Imported only where /metrics is served: the page's families, the HTTP server, httptools and
    # isal stay out of a daemon without it (about 1.2 MB resident, docs/performance.md).
    from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics  # noqa: PLC0415
    from nodeagent.core.exposition.http_server import MetricsHttpServer  # noqa: PLC0415

    metrics = AgentMetrics(telemetry, spool, sender, settings.collectors)
    gpu_families = {"gpu", "nvlink"}.intersection(settings.metrics_groups)
    exposition = AgentExposition(metrics, settings.metrics_groups, pods if gpu_families else None)
    http = MetricsHttpServer(
        listen, exposition.render, health=exposition.health, ssl_context=settings.metrics_tls, name="nodeagent",
        metrics_gzip=exposition.render_gzip,
    )  # fmt: skip
    try:
        http.start()
    except OSError as err:
        raise MetricsListenError(f"cannot listen on {listen}: {err.strerror or err}") from err
    log.info("serving metrics", listen=http.address)
    return http


def _finish(sender: Sender, settings: DaemonSettings, stop: threading.Event) -> bool:
    if settings.max_reports is not None and not stop.is_set():
        end = settings.stop_at
        return sender.wait_all_acked(end if end is not None else float("inf"), stop)
    return sender.wait_all_acked(time.monotonic() + DRAIN_SECONDS)


def _hello(source: ReportSource, node_id: str) -> pb.NodeInfo:
    hello = pb.NodeInfo()
    hello.CopyFrom(source.info)
    hello.node_id = node_id
    return hello


def _on_signals(stop: threading.Event) -> None:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
