"""The collector's composition root: one process's store, alerting, ingest, job stage, remote
write, queries, health, reflection, HTTP pages and fleet fan-out, wired together and started and
stopped in order. ``serve --workers 1`` runs one; ``serve`` runs one per worker behind a front
(``collector/workers/``). The agents' streams are ``collector/ingest/streams.py``; the views read
the parts through ``collector/views/fleet_state.py``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import structlog
from grpc_health.v1 import health_pb2

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.fleet.config import is_this_collector
from nodeagent.collector.fleet.fanout import UNIX_MESSAGE_BYTES
from nodeagent.collector.fleet.fleet_pages import FleetPages
from nodeagent.collector.history.counters import SplitCounters
from nodeagent.collector.history.node_history import HistoryConfig
from nodeagent.collector.ingest.clock_bounds import ClockBounds
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import DEFAULT_MAX_NODES
from nodeagent.collector.ingest.retire import DEFAULT_RETIRE_AFTER_SECONDS
from nodeagent.collector.ingest.streams import (
    DEFAULT_HELLO_TIMEOUT_SECONDS,
    DEFAULT_MAX_STREAMS_PER_SOURCE,
    IngestStreams,
)
from nodeagent.collector.jobrelay.messenger import JobMessenger
from nodeagent.collector.jobrelay.routes import Routes
from nodeagent.collector.jobrelay.service import JobRelayService
from nodeagent.collector.jobs.messages import Home
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import ledger_answer
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.collector.query.bounds import QueryBounds
from nodeagent.collector.query.service import UNBOUNDED_ANSWER_BYTES, QueryService
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.process import RemoteWriteProcess
from nodeagent.collector.service.grpc_server import HEALTH_NAMES, build_server
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.store.files import make_private
from nodeagent.collector.store.reader import ReadDeadlineError, StoreReader
from nodeagent.collector.views.fleet_assets import content_security_policy
from nodeagent.collector.views.ledger_page import LEDGER_PATHS, LedgerUnavailableError
from nodeagent.collector.views.local_pages import LocalPages
from nodeagent.collector.views.metrics_config import MetricsConfig
from nodeagent.core.exposition.http_server import MetricsHttpServer
from nodeagent.core.transport.channel import parse_target
from nodeagent.core.transport.refused import QueryRefusedError
from nodeagent.core.transport.security import (
    AccessPolicy,
    ServerSecurity,
)
from nodeagent.v1 import jobrelay_pb2_grpc as jr_grpc
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.collector")


DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024


class HttpListenError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"
    db_path: Path = Path("nodeagent-collector.db")
    security: ServerSecurity = field(default_factory=ServerSecurity)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    flush_seconds: float = 0.05
    settings: CollectorConfig = field(default_factory=CollectorConfig)
    # HOST:PORT of /metrics and /healthz; None: no HTTP listener.
    http_listen: str | None = None
    hello_timeout_seconds: float = DEFAULT_HELLO_TIMEOUT_SECONDS
    max_streams_per_source: int = DEFAULT_MAX_STREAMS_PER_SOURCE
    max_nodes: int = DEFAULT_MAX_NODES
    # Seconds of silence after which a node is retired (0: never).
    retire_after_seconds: float = DEFAULT_RETIRE_AFTER_SECONDS
    # How far a report's time may be ahead of or behind the collector's clock (None: any).
    clock_bounds: ClockBounds | None = field(default_factory=ClockBounds)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    remote_write: tuple[RemoteWriteConfig, ...] = ()
    query: QueryBounds = field(default_factory=QueryBounds)
    # Set for a worker of ``serve --workers N``: its index (its own families get worker="i") and
    # the unix socket its front asks it on (calls there are the front's: operator calls).
    worker_index: int | None = None
    front_socket: Path | None = None
    # A worker's siblings (every worker's unix socket, by index; the job roll-up's messages go
    # there) and its front's --listen (the collector's address in [fleet] collectors).
    worker_sockets: tuple[Path, ...] = ()
    front_listen: str | None = None


class CollectorServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        make_private(config.db_path)
        self.writer = StoreWriter(config.db_path)
        # Queries read beside the writer, never on its thread (the flush's commit gates the acks).
        self.reader = StoreReader(config.db_path)
        self.alerting = Alerting(config.settings.alerts, config.settings.build_sinks())
        self.ingest = Ingest(
            self.writer, self.alerting, detector_config=config.settings.detector, flush_seconds=config.flush_seconds,
            max_nodes=config.max_nodes, history=config.history, retire_after_seconds=config.retire_after_seconds,
            clock_bounds=config.clock_bounds, tenants=config.settings.tenants.names,
        )  # fmt: skip
        self.ingest.flusher.store_alert.worker = "" if config.worker_index is None else str(config.worker_index)
        # Series are built and posted in a process of its own; ingest only hands reports over.
        self.remote_write = (
            RemoteWriteProcess(config.remote_write, jobs=self.ingest.jobs.verdicts, gpu_seconds=self._gpu_seconds)
            if config.remote_write
            else None
        )
        if self.remote_write is not None:
            self.ingest.report_observers.append(self.remote_write.offer)
        self.serving = False
        self.started_monotonic = 0.0
        self.http: MetricsHttpServer | None = None
        self.policy = AccessPolicy(config.security)
        self.streams = IngestStreams(
            self.ingest, config.security, self.policy, hello_timeout_seconds=config.hello_timeout_seconds,
            max_streams_per_source=config.max_streams_per_source, flush_seconds=config.flush_seconds,
            tenants=config.settings.tenants,
        )  # fmt: skip
        self._server: grpc.aio.Server | None = None
        self._flusher: asyncio.Task[None] | None = None
        self.queries: QueryService | None = None
        self.port = 0
        # /metrics and the fleet page, for the HTTP listener and the Page RPC alike.
        self.pages = LocalPages(self)
        # With [fleet] collectors: the page's /api/... merged with the other collectors'.
        self.fleet_pages: FleetPages | None = None
        self.job_messenger: JobMessenger | None = None
        self._job_tasks: list[asyncio.Task[None]] = []

    def _gpu_seconds(self, node_id: str) -> SplitCounters | None:
        """The node's split counters, for remote write (None without a history)."""
        node = self.ingest.nodes.get(node_id)
        return node.history.counters if node is not None and node.history is not None else None

    def ask_ledger(self, request: pb.LedgerRequest) -> pb.LedgerResponse:
        """``Query.Ledger``'s answer from this collector's own store, for the ledger page (on an
        HTTP thread): the query's read bound and row bound, no message bound (nothing is sent)."""
        if not self.ingest.history_config.enabled:
            raise LedgerUnavailableError("no history (serve --no-history): no split, no ledger")
        bounds = self.config.query
        prices = self.config.settings.prices
        try:
            return self.reader.call_blocking(
                bounds.read_seconds,
                ledger_answer,
                request,
                prices,
                bounds.max_rows,
                UNBOUNDED_ANSWER_BYTES,
                self.config.settings.tenants,
            )
        except (QueryRefusedError, ReadDeadlineError) as err:
            raise LedgerUnavailableError(f"the ledger's read {err}") from err

    def _max_send_bytes(self) -> int:
        if self.config.front_socket is None:
            return self.config.max_message_bytes
        return max(self.config.max_message_bytes, UNIX_MESSAGE_BYTES)

    async def start(self) -> int:
        config = self.config
        self.queries = QueryService(
            self.ingest,
            self.policy,
            self.reader,
            bounds=config.query,
            max_message_bytes=config.max_message_bytes,
            pages=self.pages,
            prices=config.settings.prices,
            tenants=config.settings.tenants,
            payoff=config.settings.payoff,
        )
        built = build_server(
            listen=config.listen, security=config.security, policy=self.policy,
            max_receive_bytes=config.max_message_bytes,
            # A worker sends its front (on the unix socket) its whole /metrics and node list;
            # what it answers anyone else is held to --max-message-bytes by the query service.
            max_send_bytes=self._max_send_bytes(),
            hello_timeout_seconds=config.hello_timeout_seconds, stream=self.streams.stream, queries=self.queries,
        )  # fmt: skip
        server, self.port = built.server, built.port
        for name in HEALTH_NAMES:
            await built.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.config.front_socket is not None:
            server.add_insecure_port(f"unix:{self.config.front_socket}")
        self._fan_out_pages()
        self.queries.fleet_pages = self.fleet_pages
        self.queries.worker_index, self.queries.front_listen = config.worker_index, config.front_listen
        self.job_messenger = self._job_messenger()
        jr_grpc.add_JobRelayServicer_to_server(JobRelayService(self.job_messenger, self.policy), server)
        await server.start()
        self._server = server
        self.started_monotonic = time.monotonic()
        self._flusher = asyncio.create_task(self.ingest.flusher.run())
        self._job_tasks = [asyncio.create_task(self.job_messenger.run()), asyncio.create_task(self._tick_jobs())]
        if self.remote_write is not None:
            self.remote_write.start()
        self.serving = True
        if self.config.http_listen is not None:
            await self._start_http(self.config.http_listen)
        return self.port

    def _job_messenger(self) -> JobMessenger:
        """The job roll-up's messages: each job judged by its owner among this collector's workers
        and ``[fleet] collectors``, each wait sent back to the node's home."""
        config = self.config
        fleet = config.settings.fleet
        listen = config.front_listen or config.listen
        port = parse_target(listen, any_port=True)[1] if config.front_listen else self.port
        me = next((t for t in fleet.collectors if is_this_collector(t, listen, port)), "")
        worker = config.worker_index or 0
        routes = Routes(
            worker=worker, workers=len(config.worker_sockets) or 1, fleet=fleet.collectors, me=me,
            tenants=config.settings.tenants.names,
        )  # fmt: skip
        self.ingest.jobs.nodes.home = Home("", worker)
        return JobMessenger(
            self.ingest.jobs, routes, sockets=config.worker_sockets, security=fleet.security,
            on_change=self.ingest.job_stage_changed,
        )  # fmt: skip

    async def _tick_jobs(self) -> None:
        """Time ends jobs whose nodes fell silent (``Ingest.tick_jobs``), twice a step."""
        seconds = max(0.1, self.config.settings.detector.evaluate_seconds / 2)
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.ingest.tick_jobs()
            except Exception:
                log.exception("job tick failed")

    def _fan_out_pages(self) -> None:
        """``[fleet] collectors`` other than this one (its --listen, its port): the page merges theirs."""
        fleet = self.config.settings.fleet
        others = fleet.others(self.config.listen, self.port)
        # A worker answers its front with its own nodes; the front is the one that merges.
        if not others or self.config.worker_index is not None:
            return
        mine = [t for t in fleet.collectors if t not in others]
        name = mine[0] if mine else self.config.listen
        self.fleet_pages = FleetPages(
            self.pages, name, fleet.shards(others), fleet.timeout_seconds, asyncio.get_running_loop()
        )

    async def _start_http(self, listen: str) -> None:
        exposition = self.pages.exposition
        security = self.config.security
        # /metrics is this collector's alone, fanned out or not: each one is scraped.
        pages = self.fleet_pages.route if self.fleet_pages is not None else self.pages.fleet.route
        self.http = MetricsHttpServer(
            listen, exposition.render, health=exposition.health, ssl_context=security.http_ssl_context(),
            name="nodeagent-collector", guard=self.policy.http_guard(LEDGER_PATHS), pages=pages,
            page_policy=content_security_policy(),
        )  # fmt: skip
        try:
            await asyncio.to_thread(self.http.start)
        except OSError as err:
            self.http = None
            await self.stop(0.0)
            raise HttpListenError(f"cannot listen on {listen} (--http-listen): {err.strerror or err}") from err

    @property
    def worker_index(self) -> int | None:
        return self.config.worker_index

    @property
    def metrics_config(self) -> MetricsConfig:
        return self.config.settings.metrics

    @property
    def worth_config(self) -> tuple[Prices, PayoffConfig]:
        return self.config.settings.prices, self.config.settings.payoff

    @property
    def rejected(self) -> dict[tuple[str, str], int]:
        """Agent streams refused, by (gRPC status name, reason)."""
        return self.streams.rejected

    @property
    def replaced_total(self) -> int:
        return self.streams.replaced_total

    @property
    def flusher(self) -> asyncio.Task[None] | None:
        return self._flusher

    async def wait(self) -> None:
        assert self._server is not None
        await self._server.wait_for_termination()

    async def stop(self, grace: float = 2.0) -> None:
        self.serving = False
        if self.http is not None:
            # First, so no scrape reads the store while it closes.
            await asyncio.to_thread(self.http.stop)
            self.http = None
        if self._server is not None:
            await self._server.stop(grace)
        if self.fleet_pages is not None:
            await self.fleet_pages.close()
        for task in self._job_tasks:
            task.cancel()
        await asyncio.gather(*self._job_tasks, return_exceptions=True)
        if self.job_messenger is not None:
            await self.job_messenger.close()
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.ingest.flusher.flush(final=True)
        if self.remote_write is not None:
            await asyncio.to_thread(self.remote_write.stop)
        self.writer.call_sync(self.alerting.close)
        self.reader.close()
        self.writer.close()
