"""Which of several shards' copies of an item wins a merged view (its rank); an
alert's rank and order are the alert's own (``alerts/alert.py``).

Two writers read it: ``merge.py`` (the Query answers, protobuf) and ``page_merge.py`` (the fleet
page's JSON), so that one collector and a merged fleet rank and order alike. Each rule is written
once, over plain values; the ``record_*`` and ``plain_*`` functions read them from each form.

A copy wins by the greater rank; an equal rank goes to the shard first by name, so that the
winner never depends on which shard answered first (order independence, tested as a law in
tests/collector/fleet/test_merge_laws.py).
"""

from __future__ import annotations

from typing import Any

from nodeagent.v1 import nodeagent_pb2 as pb


def job_rank(nodes: int, time_unix_seconds: float) -> tuple[int, float]:
    """A job's verdict: the one judged over most nodes, then the newest."""
    return (nodes, time_unix_seconds)


def record_job_rank(job: pb.JobVerdict) -> tuple[int, float]:
    return job_rank(len(job.nodes), job.time_unix_seconds)


def plain_job_rank(job: dict[str, Any]) -> tuple[int, float]:
    return job_rank(len(job.get("nodes", [])), job.get("time_unix_seconds", 0.0))


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
