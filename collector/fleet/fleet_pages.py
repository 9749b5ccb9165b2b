"""The fleet page across collectors: this collector's ``/api/...`` answer merged with the other
collectors' (``[fleet] collectors``), each asked over the ``Page`` RPC with ``LOCAL_HEADER`` so
that none of them fans out again, none waited on past ``[fleet] timeout_seconds``.

A collector that does not answer is listed in the JSON's ``"shards"`` (``answered: false`` and
why), and the page's script shows a one-line banner naming it. The HTML shells are this
collector's own. The ledger page (``/ledger``, ``/api/ledger``) asks each collector's
``Query.Ledger`` and merges the rows by key, as the ``ledger`` command does. ``/metrics`` is
never fanned out: every collector is scraped, and the TSDB is the fleet-wide store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from nodeagent.collector.fleet.fanout import Answer, Shard, ShardClients
from nodeagent.collector.fleet.merge import merged_ledger
from nodeagent.collector.fleet.page_bridge import Reply, page_on_loop, wait_on_loop
from nodeagent.collector.fleet.page_merge import merge_page, shard_query
from nodeagent.collector.views.ledger_page import AskLedger, LedgerPage, LedgerUnavailableError
from nodeagent.collector.views.local_pages import LocalPages
from nodeagent.v1 import nodeagent_pb2 as pb

API_PREFIX: Final = "/api/"
# This collector's own part may wait on its store (the alert book, a node's timeline) longer than
# the others are waited on; past this the HTTP request is answered 504.
OWN_MARGIN_SECONDS: Final = 10.0


class FleetPages:
    def __init__(
        self, own: LocalPages, own_name: str, shards: Sequence[Shard], timeout: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.own = own
        self.own_name = own_name
        self.clients = ShardClients(shards)
        self.timeout = timeout
        self.loop = loop
        self.ledger = LedgerPage(self.ask_ledger)

    async def answer(self, path: str, query: str) -> pb.PageResponse:
        """The page for ``path?query`` across the fleet (on the event loop)."""
        if not path.startswith(API_PREFIX):
            return await asyncio.to_thread(self.own.answer, path, query)
        asked = shard_query(path, query)
        mine, others = await asyncio.gather(
            asyncio.to_thread(self.own.answer, path, asked),
            self.clients.ask_all("Page", pb.PageRequest(path=path, query=asked), self.timeout),
        )
        return merge_page(path, query, [Answer(self.own_name, mine), *others])

    def route(self, path: str, query: str) -> Reply | None:
        """The HTTP listener's pages (on its thread): ``/api/...`` merged on the event loop."""
        ledger = self.ledger.route(path, query)
        if ledger is not None:
            return ledger
        if not path.startswith(API_PREFIX):
            return self.own.fleet.route(path, query)
        return page_on_loop(self.answer(path, query), self.loop, self.timeout + OWN_MARGIN_SECONDS)

    def ask_ledger(self, request: pb.LedgerRequest) -> pb.LedgerResponse:
        """``Query.Ledger`` of this collector and the others, merged as ``ledger`` merges them (on
        the HTTP listener's thread)."""

        async def ask_all() -> list[Answer]:
            own = asyncio.to_thread(_own_ledger, self.own.fleet.server.ask_ledger, request)
            mine, others = await asyncio.gather(own, self.clients.ask_all("Ledger", request, self.timeout))
            return [Answer(self.own_name, *mine), *others]

        try:
            answers = wait_on_loop(ask_all(), self.loop, self.timeout + OWN_MARGIN_SECONDS)
        except TimeoutError:
            raise LedgerUnavailableError("no answer in time") from None
        return merged_ledger(answers)

    async def close(self) -> None:
        await self.clients.close()


def _own_ledger(ask: AskLedger, request: pb.LedgerRequest) -> tuple[pb.LedgerResponse | None, str]:
    try:
        return ask(request), ""
    except LedgerUnavailableError as err:
        return None, str(err)
