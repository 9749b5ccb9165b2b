"""Silent nodes rest: what a worker holds of a node that stopped reporting shrinks to what
``nodes`` and the fleet page show of it.

A node is held until it is retired (``retire``: 7 days of silence by default), and a reporting
8-GPU node costs a worker about 90 KB, most of it the detector's windows (``core/detector/``),
its alert rules' memory and its history's open minute. A fleet whose nodes come and go (spot
instances, autoscaled pools) would keep all of that for a week per node that left. So once a node
has no stream and no report for ``[alerts] node_down_seconds`` (it is ``down``, ``stopped`` or
``moved``), and its history has written its open minute, it rests:

- its detector keeps its last verdict, evidence and seen window (what ``nodes``, the page and
  ``/metrics`` read) and drops its windows (``NodeDetector.rest``); the job roll-up's node stage
  lets it go (its jobs hear it leave, as they would by time);
- its hardware and health rules go (``Alerting.rest``): a firing alert stays firing in the book
  and resolves only once a new rule has seen its condition clear, as after a collector restart;
  ``NodeDown`` is the node-down watch's, which keeps it;
- its history's open minute, already written, is kept as the rows a restart seeds from, and the
  rest of the history goes.

Its row, watermarks, latest report, topology and timeline stay. A node that reports again starts
a new detector (as a new epoch does) and a history seeded from those rows, as after a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from nodeagent.collector.history.batch import StoredReport
from nodeagent.collector.history.minutes import MinuteRow
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.ingest.node_state import NodeState

# Silent nodes are looked for this often (a walk over every node, as NodeDown's).
REST_CHECK_SECONDS: Final = 1.0


class Resting:
    """Which nodes rest, and what resting lets go of."""

    def __init__(
        self,
        down_seconds: Callable[[], float],
        *,
        forgetters: Iterable[Callable[[str], object]] = (),
        seeds: dict[str, tuple[list[MinuteRow], list[StoredReport]]] | None = None,
    ) -> None:
        """``down_seconds()``: the silence after which a node rests; ``forgetters``: called with
        each node that rests (its rules, its job stage); ``seeds``: where a rested history's open
        minute waits for the node's next report (``Ingest``'s history seed)."""
        self.down_seconds = down_seconds
        self.forgetters = list(forgetters)
        self.seeds: dict[str, tuple[list[MinuteRow], list[StoredReport]]] = seeds if seeds is not None else {}
        self.rested_total = 0
        self._next_check = 0.0

    def check(self, nodes: Mapping[str, NodeState], now: float, history_pending: set[str]) -> list[str]:
        """Rest the nodes silent past the threshold whose history has nothing left to write; the
        node ids rested. ``history_pending``: nodes whose open minute waits for a flush."""
        if now < self._next_check:
            return []
        self._next_check = now + REST_CHECK_SECONDS
        cutoff = now - self.down_seconds()
        rested = []
        for node_id, node in nodes.items():
            if node.resting or node.stream is not None or node.retiring or node_id in history_pending:
                continue
            if max(node.row.last_seen, node.attached_at) > cutoff:
                continue
            if node.history is not None and not _written(node.history):
                continue
            self.rest(node)
            rested.append(node_id)
        return rested

    def rest(self, node: NodeState) -> None:
        node_id = node.row.node_id
        if node.detector is not None:
            node.detector.rest()
        if node.history is not None:
            node.timeline.let_go(node.history)
            rows = node.history.seed_rows()
            if rows:
                self.seeds[node_id] = (rows, [])
            node.history = None
        for forget in self.forgetters:
            forget(node_id)
        node.resting = True
        self.rested_total += 1


def _written(history: NodeHistory) -> bool:
    """Nothing of the history waits to be written: no open minute, report, row or hour pending."""
    return not (history.pending or history.reports or history.closed or history.compact or history.owners.pending)
