"""Retiring nodes: an operator forgets one (``ForgetNode``), or one stays silent past the
retirement age (``serve --retire-after-seconds``).

Either way the node goes in one flush transaction, after that flush has written what the node
still had pending (its row, its open minute): its row, its watermarks and its stored
full-resolution reports are deleted, and its firing alerts (``NodeDown`` among them) are resolved
through the alert book, so the sinks hear them resolve. Once that commits, its state in memory
(detector, timeline, history, alert rules) goes with it and it no longer counts toward
``--max-nodes``. Its per-minute history stays until the history's own retention takes it. A node
that comes back after that is a new node.

A connected node is never retired: ``forget`` refuses it, and silence counts only while no
stream is open. Silence counts from the node's last report, or from when this collector
started if that is later: a collector that was down for a week does not retire every node at
its first check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import structlog

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.store.database import Store

log = structlog.get_logger("nodeagent.collector")

# A week: a rented node returned to the cloud stops counting then; one that is only down for a
# long weekend (maintenance, a driver upgrade) keeps its counters and watermarks.
DEFAULT_RETIRE_AFTER_SECONDS: Final = 7 * 86400.0
# Silent nodes are looked for this often (a walk over every node, as NodeDown's).
RETIRE_CHECK_SECONDS: Final = 1.0
# The ``reason`` label of ``nodeagent_ingest_nodes_retired_total``.
FORGOTTEN: Final = "forgotten"
SILENT: Final = "silent"


class RetireRefusedError(Exception):
    """A node ``forget`` will not retire: the gRPC status name and one line saying why."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(slots=True)
class Retiring:
    """One node a flush retires, and who waits for the answer."""

    node_id: str
    reason: str
    silent_seconds: float = 0.0
    # The operators' calls waiting for it (``forget``): each gets the stored reports deleted.
    waiters: list[asyncio.Future[int]] = field(default_factory=list)
    reports_deleted: int = 0


class Retirement:
    """The nodes to retire at the next flush, and what retiring one does on each side."""

    def __init__(
        self, retire_after_seconds: float, started_at: float, forgetters: Iterable[Callable[[str], object]] = ()
    ) -> None:
        self.retire_after_seconds = retire_after_seconds
        self.started_at = started_at
        self.retired_total: dict[str, int] = {FORGOTTEN: 0, SILENT: 0}
        # Called on the event loop with each retired node id, after its commit: whoever keeps
        # something of the node beside its ``NodeState`` lets it go.
        self.forgetters = list(forgetters)
        self._asked: dict[str, Retiring] = {}
        self._next_check = 0.0

    # ---- the event loop's side ----

    def ask(self, node: NodeState) -> asyncio.Future[int]:
        """Retire ``node`` at the next flush (an operator's ``forget``); the future has the
        number of stored reports deleted, or ``RetireRefusedError``."""
        node_id = node.row.node_id
        if node.stream is not None:
            raise _connected(node_id)
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._asked.setdefault(node_id, Retiring(node_id, FORGOTTEN)).waiters.append(waiter)
        return waiter

    def take(self, nodes: Mapping[str, NodeState], now: float) -> list[Retiring]:
        """The nodes this flush retires: those asked for and, when a check is due, the silent
        ones. Each is marked ``retiring``: no stream attaches to it while the flush runs."""
        doomed: list[Retiring] = []
        asked, self._asked = self._asked, {}
        for node_id, item in asked.items():
            node = nodes.get(node_id)
            if node is None or node.retiring:
                _refuse(item.waiters, RetireRefusedError("NOT_FOUND", f"node {node_id!r} is not known here"))
            elif node.stream is not None:
                _refuse(item.waiters, _connected(node_id))
            else:
                doomed.append(item)
        age = self.retire_after_seconds
        if age > 0 and now >= self._next_check:
            self._next_check = now + RETIRE_CHECK_SECONDS
            for node_id, node in nodes.items():
                if node.stream is not None or node.retiring or node_id in asked:
                    continue
                silent = now - max(node.row.last_seen or node.attached_at, self.started_at)
                if silent >= age:
                    doomed.append(Retiring(node_id, SILENT, silent_seconds=silent))
        for item in doomed:
            nodes[item.node_id].retiring = True
        return doomed

    def failed(self, nodes: Mapping[str, NodeState], doomed: Iterable[Retiring], error: str) -> None:
        """The flush did not commit: nothing was retired. Silent nodes are found again at the
        next check; an operator's call gets the error (``UNAVAILABLE``) rather than a long wait."""
        for item in doomed:
            node = nodes.get(item.node_id)
            if node is not None:
                node.retiring = False
            _refuse(item.waiters, RetireRefusedError("UNAVAILABLE", f"the store cannot commit now: {error}"))

    def finish(self, nodes: dict[str, NodeState], doomed: Iterable[Retiring]) -> None:
        """The flush committed: the nodes go from memory too."""
        for item in doomed:
            nodes.pop(item.node_id, None)
            for forget in self.forgetters:
                forget(item.node_id)
            self.retired_total[item.reason] += 1
            log.info(
                "node retired", node=item.node_id, reason=item.reason, reports_deleted=item.reports_deleted,
                **({"silent_seconds": round(item.silent_seconds)} if item.reason == SILENT else {}),
            )  # fmt: skip
            for waiter in item.waiters:
                if not waiter.done():
                    waiter.set_result(item.reports_deleted)

    # ---- the store thread's side ----

    @staticmethod
    def write(store: Store, alerting: Alerting, doomed: Iterable[Retiring], now: float) -> None:
        """Inside the flush transaction, after its rows, history and alerts: what goes of each node."""
        for item in doomed:
            store.nodes.delete(item.node_id)
            item.reports_deleted = store.history.delete_reports(item.node_id)
            alerting.retire(item.node_id, now)


def _connected(node_id: str) -> RetireRefusedError:
    return RetireRefusedError(
        "FAILED_PRECONDITION", f"node {node_id!r} is connected; stop its agent first (a connected node is not retired)"
    )


def _refuse(waiters: Iterable[asyncio.Future[int]], error: RetireRefusedError) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_exception(error)
