"""Rendezvous (highest random weight) hashing: which collector, and which of a collector's
workers, a node's reports go to.

The agent ranks its collector list by its routing key (its job key, else its node id) and fails
over down that order; a collector with several workers sends a node to the worker that owns the
same key (``owner_index``). Every node of a job has the same key, so all of them meet in one
worker of one collector, and a collector that goes away moves only its own nodes (and all nodes
of a job to the same next one). Each list must be given the same way on every node (the same
``HOST:PORT`` strings): the weights hash the strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def routing_key(node_id: str, job_key: str = "") -> str:
    """The key a node is ranked by: its job key when it has one, else its node id."""
    return job_key or node_id


def rendezvous_order(key: str, targets: Sequence[str]) -> list[str]:
    """``targets`` from most to least preferred for ``key`` (highest random weight first);
    duplicates given once."""

    def weight(target: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{target}".encode(), digest_size=8).digest()

    return sorted(dict.fromkeys(targets), key=weight, reverse=True)


def worker_name(index: int) -> str:
    return f"worker-{index}"


def owner_index(key: str, workers: int) -> int:
    """The worker (0 .. workers-1) of a collector that owns ``key``."""
    if workers <= 1:
        return 0
    names = [worker_name(i) for i in range(workers)]
    return names.index(rendezvous_order(key, names)[0])
