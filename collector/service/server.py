"""One collector process: its store, alerting, ingest, job stage, remote write, queries, health,
reflection, HTTP pages and fleet fan-out, built by the composition root (``builder``; what needs
the bound port, here at the start) and started and stopped in order. ``serve --workers 1`` runs
one; ``serve`` runs one per worker behind a front (``collector/workers/``). The agents' streams
are ``collector/ingest/streams.py``; the views read the parts through
``collector/views/fleet_state.py``.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import structlog
from grpc_health.v1 import health_pb2

from nodeagent.collector.fleet.config import is_this_collector
from nodeagent.collector.fleet.fanout import UNIX_MESSAGE_BYTES
from nodeagent.collector.fleet.fleet_pages import FleetPages
from nodeagent.collector.jobrelay.messenger import JobMessenger
from nodeagent.collector.jobrelay.routes import Routes
from nodeagent.collector.jobrelay.service import JobRelayService
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import ledger_answer
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.collector.query.service import UNBOUNDED_ANSWER_BYTES, QueryService
from nodeagent.collector.service.builder import build_collector
from nodeagent.collector.service.grpc_server import HEALTH_NAMES, build_server
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.reader import ReadDeadlineError
from nodeagent.collector.views.fleet_assets import content_security_policy
from nodeagent.collector.views.ledger_page import LEDGER_PATHS, LedgerUnavailableError
from nodeagent.collector.views.local_pages import LocalPages
from nodeagent.collector.views.metrics_config import MetricsConfig
from nodeagent.core.exposition.http_server import MetricsHttpServer
from nodeagent.core.transport.channel import parse_target
from nodeagent.core.transport.refused import QueryRefusedError
from nodeagent.v1 import jobrelay_pb2_grpc as jr_grpc
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc

log = structlog.get_logger("nodeagent.collector")


class HttpListenError(RuntimeError):
    pass


class CollectorServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        # Every object of this process, built and wired in one place (``builder``).
        parts = build_collector(config)
        self.writer, self.reader, self.alerting = parts.writer, parts.reader, parts.alerting
        self.ingest, self.policy, self.streams = parts.ingest, parts.policy, parts.streams
        self.remote_write = self.ingest.remote_write
        self.serving = False
        self.started_monotonic = 0.0
        self.http: MetricsHttpServer | None = None
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
        built = build_server(
            listen=config.listen, security=config.security, policy=self.policy,
            max_receive_bytes=config.max_message_bytes,
            # A worker sends its front (on the unix socket) its whole /metrics and node list;
            # what it answers anyone else is held to --max-message-bytes by the query service.
            max_send_bytes=self._max_send_bytes(),
            hello_timeout_seconds=config.hello_timeout_seconds, stream=self.streams.stream, queries=None,
        )  # fmt: skip
        server, self.port = built.server, built.port
        for name in HEALTH_NAMES:
            await built.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.config.front_socket is not None:
            server.add_insecure_port(f"unix:{self.config.front_socket}")
        # What needs the bound port: the fleet fan-out, the queries that answer with it, the
        # job roll-up's routes.
        self.fleet_pages = self._fan_out_pages()
        self.queries = QueryService(
            self.ingest, self.policy, self.reader, bounds=config.query, max_message_bytes=config.max_message_bytes,
            pages=self.pages, prices=config.settings.prices, tenants=config.settings.tenants,
            payoff=config.settings.payoff, fleet_pages=self.fleet_pages, worker_index=config.worker_index,
            front_listen=config.front_listen,
        )  # fmt: skip
        pb_grpc.add_QueryServicer_to_server(self.queries, server)
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

    def _fan_out_pages(self) -> FleetPages | None:
        """``[fleet] collectors`` other than this one (its --listen, its port): the page merges theirs."""
        fleet = self.config.settings.fleet
        others = fleet.others(self.config.listen, self.port)
        # A worker answers its front with its own nodes; the front is the one that merges.
        if not others or self.config.worker_index is not None:
            return None
        mine = [t for t in fleet.collectors if t not in others]
        name = mine[0] if mine else self.config.listen
        return FleetPages(self.pages, name, fleet.shards(others), fleet.timeout_seconds, asyncio.get_running_loop())

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
