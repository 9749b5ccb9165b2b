"""Alerts inside the collector: rules per node, the node-down watch, and the alert book.

Rules run on the ingest path (event loop) and only collect signals. The book lives on the store's
thread and sees those signals inside the same transaction that makes the reports behind them
durable; after the commit its transitions go to the sinks (through a dispatcher thread that never
blocks ingest). So an acknowledged report's alerts are never lost, and a restart repeats none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from nodeagent.collector.alerts.alert import Alert
from nodeagent.collector.alerts.book import AlertBook
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.alerts.node_down import NodeDownWatch
from nodeagent.collector.alerts.report_rules import NodeRules
from nodeagent.collector.alerts.sinks.base import Sink
from nodeagent.collector.alerts.sinks.dispatcher import SinkDispatcher
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.v1 import nodeagent_pb2 as pb

# NodeDown is judged this often, not on every flush: it walks every node.
NODE_DOWN_CHECK_SECONDS = 1.0


class Alerting:
    def __init__(self, config: AlertConfig, sinks: Sequence[Sink]) -> None:
        self.config = config
        self.dispatcher = SinkDispatcher(sinks)
        self.book: AlertBook | None = None
        self.watch = NodeDownWatch(config)
        self.rules: dict[str, NodeRules] = {}
        self._pending: list[AlertSignal] = []
        self._next_down_check = 0.0

    # ---- the event loop's side ----

    def observe_info(self, node_id: str, info: pb.NodeInfo) -> None:
        self._rules(node_id).observe_info(info)

    def observe(self, node_id: str, report: pb.NodeReport) -> None:
        signals = self._rules(node_id).observe(report)
        if signals:
            self._pending.extend(signals)

    def add(self, signals: Iterable[AlertSignal]) -> None:
        self._pending.extend(signals)

    def forget(self, node_id: str) -> None:
        """A retired node: its rules and its NodeDown state go (its alerts resolved in ``retire``)."""
        self.rules.pop(node_id, None)
        self.watch.forget(node_id)

    def rest(self, node_id: str) -> None:
        """A silent node rests (``ingest/resting.py``): its rules go, its NodeDown state stays. A
        firing alert stays firing until a new rule sees its condition clear, as after a restart."""
        self.rules.pop(node_id, None)

    def put_back(self, signals: list[AlertSignal]) -> None:
        """Signals of a batch that did not commit: they go with the next one, in order."""
        self._pending[:0] = signals

    def watch_soon(self) -> None:
        """A node's state changed (it stopped or moved): the node watch runs at the next flush."""
        self._next_down_check = 0.0

    def take(
        self, now: float, last_seen: Callable[[], Mapping[str, float]], moved: Callable[[], Iterable[str]] = tuple,
        stopped: Callable[[], Mapping[str, float]] = dict,
    ) -> list[AlertSignal]:  # fmt: skip
        """The signals gathered since the last flush (plus the node watch's, when due); ``moved``:
        the nodes that went to another collector (their NodeDown resolves, none fires);
        ``stopped``: those whose agents stopped cleanly, and when (``alerts/node_down.py``)."""
        signals, self._pending = self._pending, []
        if now >= self._next_down_check:
            self._next_down_check = now + NODE_DOWN_CHECK_SECONDS
            signals.extend(self.watch.check(last_seen(), now, moved(), stopped()))
        return signals

    # ---- the store thread's side ----

    def open(self, tables: AlertTables) -> None:
        self.book = AlertBook(tables, sinks=[self.dispatcher])
        self.dispatcher.start()

    def write(self, signals: Sequence[AlertSignal], now: float) -> None:
        assert self.book is not None
        if signals:
            self.book.observe(signals, now)
        self.book.record_deliveries()

    def retire(self, node_id: str, now: float) -> None:
        """Inside the transaction that retires the node: every alert of it still firing resolves."""
        assert self.book is not None
        self.book.resolve_node(node_id, None, now)

    def committed(self, now: float) -> None:
        assert self.book is not None
        self.book.committed()
        self.dispatcher.tick(now, self.book.active)

    def rolled_back(self) -> None:
        assert self.book is not None
        self.book.rolled_back()

    def recent(self, include_resolved: bool) -> list[Alert]:
        assert self.book is not None
        return self.book.recent() if include_resolved else self.book.active()

    def close(self) -> None:
        self.dispatcher.stop()
        if self.book is not None:
            self.book.record_deliveries()

    def rules_for(self, node_id: str) -> NodeRules:
        return self._rules(node_id)

    def _rules(self, node_id: str) -> NodeRules:
        rules = self.rules.get(node_id)
        if rules is None:
            rules = self.rules[node_id] = NodeRules(node_id, self.config)
        return rules
