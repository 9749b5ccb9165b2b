"""The front's HTTP listener on ``--http-listen``: ``/metrics``, ``/healthz``, the fleet page and the ledger.

The HTML shells are served here (``fleet_assets``); ``/api/*`` and ``/metrics`` are every
worker's ``Page`` over its unix socket, merged (``merge_page``), with the front's own families
(``front_metrics``) as one more part of ``/metrics``. The ledger (``/ledger``, ``/api/ledger``,
``views/ledger_page.py``) is every worker's ``Query.Ledger``, merged by key. The same binding, TLS and credentials as
a single collector's listener (``MetricsHttpServer`` with the scrape guard). Requests run on the
HTTP server's threads; the asking runs on the front's event loop, where the channels live.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nodeagent.collector.fleet.fanout import Answer, ShardClients
from nodeagent.collector.fleet.merge import merged_ledger
from nodeagent.collector.fleet.page_bridge import page_on_loop, wait_on_loop
from nodeagent.collector.fleet.page_merge import merge_page, shard_query
from nodeagent.collector.views.fleet_assets import content_security_policy, shell_for
from nodeagent.collector.views.ledger_page import LEDGER_PATHS, LedgerPage, LedgerUnavailableError
from nodeagent.collector.workers.front_metrics import FRONT_LABEL
from nodeagent.core.exposition.http_server import MetricsHttpServer
from nodeagent.core.transport.security import AccessPolicy, ServerSecurity
from nodeagent.v1 import nodeagent_pb2 as pb

HTML_TYPE = "text/html; charset=utf-8"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# How long one page waits for the workers.
PAGE_TIMEOUT_SECONDS = 10.0
# Past the workers' own timeout (ask_all gives up on them by then), a page is answered 504.
ASK_MARGIN_SECONDS = 5.0


class FrontHttp:
    def __init__(
        self, listen: str, security: ServerSecurity, policy: AccessPolicy, clients: ShardClients,
        loop: asyncio.AbstractEventLoop, *, own_metrics: Callable[[], bytes], health: Callable[[], tuple[bool, str]],
        timeout: float = PAGE_TIMEOUT_SECONDS,
    ) -> None:  # fmt: skip
        self.clients = clients
        self.loop = loop
        self.own_metrics = own_metrics
        self.timeout = timeout
        self.ledger = LedgerPage(self.ask_ledger)
        self.server = MetricsHttpServer(
            listen, self.metrics, health=health, ssl_context=security.http_ssl_context(), name="nodeagent-collector",
            guard=policy.http_guard(LEDGER_PATHS), pages=self.route, page_policy=content_security_policy(),
        )  # fmt: skip

    @property
    def address(self) -> str:
        return self.server.address

    def route(self, path: str, query: str) -> tuple[str, str, bytes] | None:
        ledger = self.ledger.route(path, query)
        if ledger is not None:
            return ledger
        shell = shell_for(path)
        if shell is not None:
            return "200 OK", HTML_TYPE, shell
        if not path.startswith("/api/"):
            return None
        return page_on_loop(self._page(path, query), self.loop, self.timeout + ASK_MARGIN_SECONDS)

    async def _page(self, path: str, query: str) -> pb.PageResponse:
        # The shards are asked without the fleet's filters: merge_page applies them after the merge.
        answers = await self._ask_all(path, shard_query(path, query))
        # Merged off the loop: a fleet's page is large, and the loop carries the agents' redirects.
        return await asyncio.to_thread(merge_page, path, query, answers)

    def metrics(self) -> bytes:
        answers = self._ask("/metrics", "")
        own = pb.PageResponse(status=200, content_type=METRICS_TYPE, body=self.own_metrics())
        answers.append(Answer(shard=FRONT_LABEL, reply=own, error=""))
        return merge_page("/metrics", "", answers).body

    def ask_ledger(self, request: pb.LedgerRequest) -> pb.LedgerResponse:
        """Every worker's ``Query.Ledger``, merged by key as the front's Query.Ledger merges it."""
        work = self.clients.ask_all("Ledger", request, self.timeout)
        try:
            return merged_ledger(wait_on_loop(work, self.loop, self.timeout + ASK_MARGIN_SECONDS))
        except TimeoutError:
            raise LedgerUnavailableError("no answer in time") from None

    def _ask(self, path: str, query: str) -> list[Answer]:
        return wait_on_loop(self._ask_all(path, query), self.loop, self.timeout + ASK_MARGIN_SECONDS)

    async def _ask_all(self, path: str, query: str) -> list[Answer]:
        return await self.clients.ask_all("Page", pb.PageRequest(path=path, query=query), self.timeout)
