"""``ledger`` through a real ``serve --workers 2``: each worker prices its nodes by the file's
``[prices]``, and the front sums a job that ran on nodes of both workers into one row."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import NODE_ROW, MinuteRow
from nodeagent.collector.store.database import Store
from tests.collector.workers.front_process import running_front
from tests.fakes.trees import REPO


def _seed(db: Path, node: str, minute: int, network: float) -> None:
    """One minute of ``job-a`` on one GPU of ``node``, ``network`` seconds of it lost to the network."""
    parts = split.empty()
    parts[split.INDEX["computing"]], parts[split.INDEX["network"]] = 60.0 - network, network
    rows = [
        MinuteRow(node, gpu, minute, 60, {}, "starved", "network", ("job-a",), minute + 59.0, held, list(parts))
        for gpu, held in ((0, 60.0), (NODE_ROW, None))
    ]
    store = Store(db)
    try:
        store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(minutes=rows)))
    finally:
        store.close()


def _ledger(address: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "ledger", *args, "--collector", address, "--timeout", "30"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_job_on_both_workers_is_one_row_priced_by_each_node(tmp_path: Path) -> None:
    minute = int(time.time() // 60 * 60) - 600
    _seed(tmp_path / "collector.db", "node-a", minute, 30.0)
    _seed(tmp_path / "collector.worker1.db", "rental-b", minute, 15.0)
    config = tmp_path / "collector.toml"
    config.write_text('[prices]\ncurrency = "EUR"\ndefault_per_gpu_hour = 3.6\nnodes = { "rental-*" = 7.2 }\n')
    with running_front(tmp_path, args=["--config", str(config)]) as front:
        [job] = json.loads(_ledger(front.address, "--json", "--since", "1h"))
        [fleet] = json.loads(_ledger(front.address, "--json", "--since", "1h", "--by", "fleet"))
    assert job["job"] == "job-a" and job["nodes"] == ["node-a", "rental-b"]
    assert job["gpu_hours_held"] == pytest.approx(2 / 60)
    assert job["gpu_hours_lost"]["network"] == pytest.approx(45 / 3600)
    assert job["cost"] == pytest.approx(60 / 3600 * 3.6 + 60 / 3600 * 7.2) and job["currency"] == "EUR"
    assert job["cost_lost"] == pytest.approx(30 / 3600 * 3.6 + 15 / 3600 * 7.2)
    assert fleet["fleet"] == "fleet" and fleet["gpu_hours_held"] == pytest.approx(2 / 60)
