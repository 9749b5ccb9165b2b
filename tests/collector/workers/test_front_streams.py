"""Answers larger than one message through a real ``serve --workers 2``: ``nodes``, ``jobs`` and
``history --since 14d`` come back whole, page by page, with ``--max-message-bytes 65536`` (a
merged answer in one message would be refused), the merge rules kept for what both workers hold."""

from __future__ import annotations

import csv
import functools
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import GPU_VALUES, MinuteRow
from nodeagent.collector.store.database import Store
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.tools.history_seed import seed_history
from tests.collector.workers.front_process import running_front
from tests.fakes.trees import REPO

MESSAGE_BYTES = 65536
# Per worker: enough that either worker's answer alone is past one message.
NODES = 400
JOBS = 600


def _query(address: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", *args, "--collector", address, "--timeout", "30"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == "", done.stderr[-2000:]
    return done.stdout


def _seed_nodes(db: Path, names: list[str], last_seen: float) -> None:
    store = Store(db)
    try:
        rows = [
            NodeRow(node_id=n, hostname=f"{n}.cluster.example", agent_version="0.9.0", first_seen=last_seen - 3600,
                    last_seen=last_seen, reports_total=100, epoch=1, last_seq=100, gpu_count=8)
            for n in names
        ]  # fmt: skip
        assert store.write(rows) == {}
    finally:
        store.close()


def _seed_jobs(db: Path, node: str, jobs: list[str], minute: int) -> None:
    """One GPU minute of each job on ``node``, all of it held (60 GPU-seconds)."""
    rows = [
        MinuteRow(node, 0, minute - 60 * i, 60, dict.fromkeys(GPU_VALUES, 0.5), "busy", "", (job,), minute + 59.0, 60.0)
        for i, job in enumerate(jobs)
    ]
    store = Store(db)
    try:
        store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(minutes=rows)))
    finally:
        store.close()


def test_nodes_and_jobs_larger_than_one_message_come_back_whole_through_the_front(tmp_path: Path) -> None:
    now = time.time()
    minute = int(now // 60 * 60) - 120
    worker_dbs = [tmp_path / "collector.db", tmp_path / "collector.worker1.db"]
    names = [[f"w{w}-node-{i:04d}" for i in range(NODES)] for w in (0, 1)]
    for w, db in enumerate(worker_dbs):
        _seed_nodes(db, names[w], now - 30)
    # A node on both workers (it moved): the fresher copy, worker 1's, wins; worker 0's is stale.
    _seed_nodes(worker_dbs[0], ["moved-node"], now - 600)
    _seed_nodes(worker_dbs[1], ["moved-node"], now - 20)
    # Jobs: each worker's own, and a third of worker 0's also ran on worker 1 (totals summed).
    jobs0 = [f"slurm-{i:05d}" for i in range(JOBS)]
    shared = jobs0[::3]
    _seed_jobs(worker_dbs[0], "w0-node-0000", jobs0, minute)
    _seed_jobs(worker_dbs[1], "w1-node-0000", [f"pod-{i:05d}" for i in range(JOBS)] + shared, minute)

    with running_front(tmp_path, args=["--max-message-bytes", str(MESSAGE_BYTES)]) as front:
        assert front.dbs == worker_dbs
        listed = json.loads(_query(front.address, "nodes", "--json"))
        assert len(json.dumps(listed)) > 2 * MESSAGE_BYTES
        by_id = {row["node_id"]: row for row in listed}
        assert len(listed) == len(by_id) == 2 * NODES + 1
        assert set(by_id) == {*names[0], *names[1], "moved-node"}
        assert by_id["moved-node"]["shard"] == "worker-1"
        assert by_id["moved-node"]["stale_shards"] == ["worker-0"]
        assert {by_id[n]["shard"] for n in names[0]} == {"worker-0"}
        assert [row["node_id"] for row in listed] == sorted(by_id)  # by node id, as StreamNodes sends them

        table = _query(front.address, "nodes")
        assert all(name in table for name in names[1][-5:])

        rows = json.loads(_query(front.address, "jobs", "--json", "--since", "14d"))
        assert len(json.dumps(rows)) > 2 * MESSAGE_BYTES
        history = {row["job"]: row["history"] for row in rows}
        assert len(rows) == len(history) == 2 * JOBS
        assert history[shared[0]]["gpu_hours"] == pytest.approx(2 / 60)
        assert history[shared[0]]["nodes"] == ["w0-node-0000", "w1-node-0000"]
        assert history[jobs0[1]]["gpu_hours"] == pytest.approx(1 / 60)


def test_fourteen_days_of_a_node_come_back_whole_through_the_front_as_csv(tmp_path: Path) -> None:
    # 13.9 days, so that none of them is past the history's 14-day retention when the front starts.
    written = seed_history(tmp_path / "collector.db", ["big-node"], days=13.9, gpus=2)
    with running_front(tmp_path, args=["--max-message-bytes", str(MESSAGE_BYTES)]) as front:
        text = _query(front.address, "history", "big-node", "--since", "14d", "--csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(text) > 20 * MESSAGE_BYTES
    assert len(rows) == written
    keys = [(-1 if row["gpu"] == "" else int(row["gpu"]), float(row["time_unix_seconds"])) for row in rows]
    assert keys == sorted(keys), "rows by GPU, then minute, as one collector streams them"
    assert len(set(keys)) == len(keys)
