"""Days of per-minute history written straight through the collector's store, in seconds: what
the query bench (``bench/query_flood.py``) and the query tests need before a collector starts.

Each node gets one row per GPU and one for the node per minute, with every column a real node's
rows carry, the verdict of a node that starves for the network part of the time, and a job that
changes every day (so ``jobs`` has something to total), each GPU held the whole minute and its
time split for the ledger (computing, and what starving lost to the network); each job billed to
one of ``ACCOUNTS`` Slurm accounts and ``NAMESPACES`` Kubernetes namespaces. The rows go through ``Store.write``, the
flush's own transaction, a day of a node at a time.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import (
    DAY_SECONDS,
    GPU_VALUES,
    MINUTE_SECONDS,
    NODE_ROW,
    NODE_VALUES,
    MinuteRow,
)
from nodeagent.collector.store.database import Store

GPUS = 8
HOUR = 3600
ACCOUNTS = 50
NAMESPACES = 20


def seed_history(db: Path, nodes: Sequence[str], days: float, *, end: float | None = None, gpus: int = GPUS) -> int:
    """``days`` of minutes ending at ``end`` (default: now) for each node, into the store at
    ``db`` (created if missing; no collector may hold it meanwhile). Returns the rows written."""
    last = int((time.time() if end is None else end) // MINUTE_SECONDS * MINUTE_SECONDS)
    first = last - int(days * DAY_SECONDS) + MINUTE_SECONDS
    store = Store(db)
    written = 0
    try:
        for index, node_id in enumerate(nodes):
            rng = random.Random(index)
            for day_start in range(first, last + MINUTE_SECONDS, DAY_SECONDS):
                day_end = min(day_start + DAY_SECONDS, last + MINUTE_SECONDS)
                rows = [
                    row
                    for minute in range(day_start, day_end, MINUTE_SECONDS)
                    for row in _minute(node_id, index, minute, gpus, rng)
                ]
                # The ledger sums every hour the node's minutes moved past, as a flush does.
                hours = range(day_start // HOUR * HOUR, min(day_end, last // HOUR * HOUR), HOUR)
                last_seen = {job: row.minute for row in rows for job in row.jobs}
                owners = [
                    (node_id, job, f"acct-{index // 2 % ACCOUNTS}", f"ns-{index // 2 % NAMESPACES}", minute)
                    for job, minute in last_seen.items()
                ]
                batch = HistoryBatch(minutes=rows, compact=[(node_id, hour) for hour in hours], owners=owners)
                store.write((), before_commit=functools.partial(store.history.write, batch))
                written += len(rows)
    finally:
        store.close()
    return written


def _minute(node_id: str, index: int, minute: int, gpus: int, rng: random.Random) -> Iterator[MinuteRow]:
    starved = rng.random() < 0.3
    state, cause = ("starved", "network") if starved else ("busy", "")
    jobs = (f"job-{index // 2}-{minute // DAY_SECONDS}",)
    lost = 0.0
    utils = []
    node_split = split.empty()
    for gpu in range(gpus):
        util = rng.uniform(0.5, 0.7) if starved else rng.uniform(0.9, 1.0)
        utils.append(util)
        gpu_lost = (1.0 - util) * MINUTE_SECONDS if starved else 0.0
        lost += gpu_lost
        values = dict(zip(GPU_VALUES, (util, util * 0.8, util * 0.9, 6.0e10, 550.0, 64.0), strict=True))
        values.update(starvation_ratio=1.0 - util if starved else 0.02, gpu_seconds_lost=gpu_lost)
        # The ledger's split: held the whole minute, what was lost lost to the network.
        parts = split.empty()
        parts[split.INDEX["computing"]] = MINUTE_SECONDS - gpu_lost
        parts[split.INDEX["network"]] = gpu_lost
        node_split = [a + b for a, b in zip(node_split, parts, strict=True)]
        yield MinuteRow(node_id, gpu, minute, 60, values, state, cause, jobs, minute + 59.0, MINUTE_SECONDS, parts)
    node_values = {name: rng.uniform(1e3, 1e9) for name in NODE_VALUES if not name.endswith("_ratio")}
    node_values.update({name: rng.random() for name in NODE_VALUES if name.endswith("_ratio")})
    node_values.update(
        utilization_mean=sum(utils) / max(1, len(utils)), utilization_min=min(utils, default=0.0),
        starvation_ratio=0.35 if starved else 0.02, gpu_seconds_lost=lost,
    )  # fmt: skip
    yield MinuteRow(node_id, NODE_ROW, minute, 60, node_values, state, cause, jobs, minute + 59.0, None, node_split)
