"""The front's HTTP listener on ``--http-listen``: ``/metrics``, ``/healthz`` (the workers up, and
their stores committing), the fleet page and the ledger.

The HTML shells are served here (``fleet_assets``); ``/api/*`` and ``/metrics`` are every
worker's ``Page`` over its unix socket, merged (``merge_page``), with the front's own families
(``front_metrics``) as one more part of ``/metrics``. With ``[fleet] collectors``, ``/api/*`` is
the other collectors' too (``fleet``: each asked with ``LOCAL_HEADER``, within ``[fleet]
timeout_seconds``), merged with the workers' in one merge, as a single collector's page merges
them (``fleet/fleet_pages.py``); ``/metrics`` stays this front's own. The ledger (``/ledger``, ``/api/ledger``,
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
from nodeagent.collector.views.local_pages import HEALTH_PATH
from nodeagent.collector.workers.front_metrics import FRONT_LABEL
from nodeagent.core.exposition.http_server import MetricsHttpServer
from nodeagent.core.transport.security import AccessPolicy, ServerSecurity
from nodeagent.v1 import nodeagent_pb2 as pb

HTML_TYPE = "text/html; charset=utf-8"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# How long one page waits for the workers.
PAGE_TIMEOUT_SECONDS = 10.0
# How long /healthz waits for the workers' own health (a probe's timeout is often 1-5 s).
HEALTH_TIMEOUT_SECONDS = 1.0
# Past the workers' own timeout (ask_all gives up on them by then), a page is answered 504.
ASK_MARGIN_SECONDS = 5.0


class FrontHttp:
    def __init__(
        self, listen: str, security: ServerSecurity, policy: AccessPolicy, clients: ShardClients,
        loop: asyncio.AbstractEventLoop, *, own_metrics: Callable[[], bytes], health: Callable[[], tuple[bool, str]],
        timeout: float = PAGE_TIMEOUT_SECONDS, fleet: ShardClients | None = None, fleet_timeout: float = 0.0,
    ) -> None:  # fmt: skip
        self.clients = clients
        self.fleet = fleet
        self.fleet_timeout = fleet_timeout
        self.loop = loop
        self.own_metrics = own_metrics
        self.timeout = timeout
        self.ledger = LedgerPage(self.ask_ledger)
        self.server = MetricsHttpServer(
            listen, self.metrics, health=lambda: self.health(health), ssl_context=security.http_ssl_context(),
            name="nodeagent-collector", guard=policy.http_guard(LEDGER_PATHS), pages=self.route,
            page_policy=content_security_policy(),
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
        request = pb.PageRequest(path=path, query=shard_query(path, query))
        asked = [self.clients.ask_all("Page", request, self.timeout)]
        if self.fleet is not None:  # the other collectors of [fleet]: their own nodes, beside the workers'
            asked.append(self.fleet.ask_all("Page", request, self.fleet_timeout))
        answers = [answer for some in await asyncio.gather(*asked) for answer in some]
        # Merged off the loop: a fleet's page is large, and the loop carries the agents' redirects.
        return await asyncio.to_thread(merge_page, path, query, answers)

    def health(self, front: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
        """The front's own health (its workers up), and unhealthy while a worker's store cannot
        commit (a full disk): its agents' reports are not acknowledged, and restarting the worker
        would not help. A worker that does not answer is the supervisor's to say."""
        ok, detail = front()
        if not ok:
            return ok, detail
        answers = self._ask_within(HEALTH_PATH, HEALTH_TIMEOUT_SECONDS)
        failing = [
            f"{answer.shard}: {reply.body.decode(errors='replace').strip()}"
            for answer in answers
            if isinstance(reply := answer.reply, pb.PageResponse) and reply.status == 503
        ]
        return (False, "; ".join(failing)) if failing else (True, detail)

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

    def _ask_within(self, path: str, timeout: float) -> list[Answer]:
        return wait_on_loop(self._ask_all(path, "", timeout), self.loop, timeout + ASK_MARGIN_SECONDS)

    async def _ask_all(self, path: str, query: str, timeout: float | None = None) -> list[Answer]:
        request = pb.PageRequest(path=path, query=query)
        return await self.clients.ask_all("Page", request, self.timeout if timeout is None else timeout)
