"""NodeDown and NodeStopped for the whole fleet, from each node's last report and how it left.

A node silent for ``node_down_seconds`` is down: ``NodeDown`` (critical), the same threshold at
which ``nodes`` and the fleet page say ``down`` (``collector/states/``). A node whose agent
stopped cleanly (it said a stopping goodbye) is not down: ``NodeStopped`` (info) fires while it
stays away, and ``NodeDown`` only when ``node_stopped_down_seconds`` is set and it has not come
back within that long. A node that moved to another collector is neither. A node that is down,
stopped or moved has its detector's alert (``GPUDataStarved``) resolved: its last verdict says
nothing of now, and no report will come to resolve it; the detector fires it again on the first
verdict after the node is back, if the node is still starved.

A node the caller no longer lists gets no signal: a retired node's alerts are resolved by
``AlertBook.resolve_node`` (``collector/ingest/retire.py``), then ``forget``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.node import ALERT_NAME as GPU_DATA_STARVED

NODE_DOWN = "NodeDown"
NODE_STOPPED = "NodeStopped"
CRITICAL = "critical"
INFO = "info"


class NodeDownWatch:
    def __init__(self, config: AlertConfig) -> None:
        self.config = config
        self._down: dict[str, bool] = {}
        self._stopped: set[str] = set()
        # Nodes whose verdict alert was resolved since they were last heard from.
        self._verdict_resolved: set[str] = set()

    def check(
        self, last_seen: Mapping[str, float], now: float, moved: Iterable[str] = (),
        stopped: Mapping[str, float] | None = None,
    ) -> list[AlertSignal]:  # fmt: skip
        """The signals for the nodes in ``last_seen`` (reporting, or silent), ``moved`` (gone to
        another collector) and ``stopped`` (node -> when its agent stopped cleanly); a node in
        ``moved`` or ``stopped`` is not in ``last_seen``, and is watched again once listed there."""
        out: list[AlertSignal] = []
        for node_id in moved:
            if self._down.pop(node_id, False):
                out.append(_node_down(node_id, False))
            self._leave_stopped(node_id, out)
            self._resolve_verdict(node_id, out)
        for node_id, since in (stopped or {}).items():
            if node_id not in self._stopped:
                self._stopped.add(node_id)
                notes = {
                    "summary": f"the agent of {node_id} stopped cleanly (it said goodbye); not down",
                    "stopped_unix_seconds": f"{since}",
                }
                out.append(AlertSignal(NODE_STOPPED, node_id, "", True, INFO, {}, notes))
            after = self.config.node_stopped_down_seconds
            away = f"{node_id} stopped {now - since:.0f} s ago and has not come back"
            self._set_down(node_id, bool(after) and now - since >= after, away, since, out)
            self._resolve_verdict(node_id, out)
        for node_id, seen in last_seen.items():
            self._leave_stopped(node_id, out)
            is_down = now - seen >= self.config.node_down_seconds
            self._set_down(node_id, is_down, f"no report from {node_id} for {now - seen:.0f} s", seen, out)
            if is_down:
                self._resolve_verdict(node_id, out)
            else:
                self._verdict_resolved.discard(node_id)
        return out

    def forget(self, node_id: str) -> None:
        self._down.pop(node_id, None)
        self._stopped.discard(node_id)
        self._verdict_resolved.discard(node_id)

    def _set_down(self, node_id: str, is_down: bool, summary: str, last: float, out: list[AlertSignal]) -> None:
        if self._down.get(node_id) is is_down:
            return
        self._down[node_id] = is_down
        notes = {"summary": summary, "last_report_unix_seconds": f"{last}"} if is_down else {}
        out.append(_node_down(node_id, is_down, notes))

    def _leave_stopped(self, node_id: str, out: list[AlertSignal]) -> None:
        if node_id in self._stopped:
            self._stopped.discard(node_id)
            out.append(AlertSignal(NODE_STOPPED, node_id, "", False, INFO, {}, {}))

    def _resolve_verdict(self, node_id: str, out: list[AlertSignal]) -> None:
        if node_id not in self._verdict_resolved:
            self._verdict_resolved.add(node_id)
            out.append(AlertSignal(GPU_DATA_STARVED, node_id, "", False))


def _node_down(node_id: str, firing: bool, notes: dict[str, str] | None = None) -> AlertSignal:
    return AlertSignal(NODE_DOWN, node_id, "", firing, CRITICAL, {}, notes or {})
