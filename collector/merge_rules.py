"""The rules of merged views in one table: which of several shards' copies of an item wins (its
rank) and in what order the merged items are listed (its order key).

Three writers read it: ``fleet/merge.py`` (the Query answers, protobuf), ``fleet/page_merge.py`` (the fleet
page's JSON) and the fleet page itself (``views/fleet_page.py``, the alert book's ``Alert``), so
one collector and a merged fleet rank and order alike. Each rule is written once, over plain
values; the ``*_of`` functions read them from each form.

A copy wins by the greater rank; an equal rank goes to the shard first by name, so that the
winner never depends on which shard answered first (order independence, tested as a law in
tests/collector/fleet/test_merge_laws.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.collector.alerts.book import Alert


class AlertFacts(NamedTuple):
    """What ranks and orders an alert, in any of its forms."""

    name: str
    node_id: str
    key: str
    starts_at: float
    ends_at: float | None  # None while firing

    @property
    def identity(self) -> tuple[str, str, str]:
        """Copies of one alert on several shards share it."""
        return (self.name, self.node_id, self.key)

    @property
    def rank(self) -> tuple[bool, float, float]:
        """Firing over resolved, then the newest start, then the latest end."""
        return (self.ends_at is None, self.starts_at, self.ends_at or 0.0)

    @property
    def order(self) -> tuple[bool, float, str, str, str]:
        """Firing first, then the newest; ties by name, node and key."""
        return (self.ends_at is not None, -self.starts_at, self.name, self.node_id, self.key)


def record_alert(alert: pb.AlertRecord) -> AlertFacts:
    ends = alert.ends_at_unix_seconds if alert.HasField("ends_at_unix_seconds") else None
    return AlertFacts(alert.name, alert.node_id, alert.key, alert.starts_at_unix_seconds, ends)


def plain_alert(alert: dict[str, Any]) -> AlertFacts:
    """An alert as ``Alert.to_plain`` writes it (the page's JSON)."""
    starts, ends = alert["starts_at_unix_seconds"], alert.get("ends_at_unix_seconds")
    return AlertFacts(alert["name"], alert["node_id"], alert["key"], starts, ends)


def book_alert(alert: Alert) -> AlertFacts:
    return AlertFacts(alert.name, alert.node_id, alert.key, alert.starts_at, alert.ends_at)


def alert_order(alert: pb.AlertRecord) -> tuple[bool, float, str, str, str]:
    """ListAlerts' order (merged, and the ``alerts`` command's)."""
    return record_alert(alert).order


def job_rank(nodes: int, time_unix_seconds: float) -> tuple[int, float]:
    """A job's verdict: the one judged over most nodes, then the newest."""
    return (nodes, time_unix_seconds)


def record_job_rank(job: pb.JobVerdict) -> tuple[int, float]:
    return job_rank(len(job.nodes), job.time_unix_seconds)


def plain_job_rank(job: dict[str, Any]) -> tuple[int, float]:
    return job_rank(len(job.get("nodes", [])), job.get("time_unix_seconds", 0.0))


def job_verdict_order(gpu_seconds_lost: float, job: str) -> tuple[float, str]:
    """ListJobs' order: the jobs that lost most first, then by name."""
    return (-gpu_seconds_lost, job)


def node_rank(last_seen: float) -> float:
    """A node's row: the freshest ``last_seen`` wins; the shards holding the others are stale."""
    return last_seen


def wins(rank: Any, shard: str, held_rank: Any, held_shard: str) -> bool:
    """Whether a copy ranked ``rank`` on ``shard`` replaces the one held: a greater rank, or an
    equal one on a shard first by name."""
    return bool(rank > held_rank or (rank == held_rank and shard < held_shard))


def stale_shards(winner: str, copies: list[str]) -> list[str]:
    """The shards that hold an older copy of a node, by name; the winner's own is never stale."""
    return sorted(set(copies) - {winner})
