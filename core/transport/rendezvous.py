"""Rendezvous (highest random weight) hashing: which collector, and which of a collector's
workers, a node's reports go to.

The agent ranks its collector list by its node id and fails over down that order; a collector
with several workers sends a node to the worker that owns the same node id (``owner_index``). A
node stays where its node id puts it (a job starting or ending moves nothing), and a collector
that goes away moves only its own nodes. Each list must be given the same way on every node (the
same ``HOST:PORT`` strings): the weights hash the strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def rendezvous_order(key: str, targets: Sequence[str]) -> list[str]:
    """``targets`` from most to least preferred for ``key`` (a node id; highest random weight
    first); duplicates given once."""

    def weight(target: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{target}".encode(), digest_size=8).digest()

    return sorted(dict.fromkeys(targets), key=weight, reverse=True)


def worker_name(index: int) -> str:
    return f"worker-{index}"


def owner_index(key: str, workers: int) -> int:
    """The worker (0 .. workers-1) of a collector that owns ``key`` (a node id)."""
    if workers <= 1:
        return 0
    names = [worker_name(i) for i in range(workers)]
    return names.index(rendezvous_order(key, names)[0])
