"""What one flush writes of the history, and a stored report as the store gives it back.

``NodeHistory.take`` fills a ``HistoryBatch`` per node, the ingest path merges them into one, and
the store writes it in the flush transaction (``collector/store/history_tables.py``); a flush
that does not commit hands each node its part back (``NodeHistory.put_back``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeagent.collector.history.minutes import MinuteRow


@dataclass(frozen=True, slots=True)
class StoredReport:
    node_id: str
    time_unix_seconds: float
    epoch: int
    seq: int
    raw: bytes


@dataclass(slots=True)
class HistoryBatch:
    """What one flush writes of the history: reports, minute rows, and per-node prune cutoffs."""

    reports: list[StoredReport] = field(default_factory=list)
    minutes: list[MinuteRow] = field(default_factory=list)
    # node id -> (delete reports before, delete minutes before), unix seconds.
    prune: dict[str, tuple[float, float]] = field(default_factory=dict)
    # (reports before, minutes before) for every node, by the collector's clock: a node that stopped
    # reporting is never pruned by its own newest report, and its history must still go.
    sweep: tuple[float, float] | None = None
    # (node id, hour) whose minutes are all written: summed into the ledger's hours (``store/ledger_tables.py``).
    compact: list[tuple[str, int]] = field(default_factory=list)
    # (node id, job, Slurm account, Kubernetes namespace, minute): whom each job is billed to, for
    # the ledger by account or namespace (``store/ledger_tables.py``).
    owners: list[tuple[str, str, str, str, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reports or self.minutes or self.prune or self.sweep or self.compact or self.owners)
