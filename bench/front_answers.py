"""Answers larger than one message through ``serve --workers 2``'s front: ``nodes``, ``jobs`` and
``history --since 14d``, each timed as the command line runs it, with its size and exit status.

Seeds each worker's database before the front starts (no agent runs): ``--nodes`` node rows per
worker, last seen seconds ago (stored nodes: no detector verdict, so a row is smaller than a
reporting node's); ``--jobs`` jobs per worker in the history, one GPU minute each (the history's
totals of ``jobs``; the live roll-up's verdicts need reporting nodes); and 14 days of one 8-GPU
node's minutes (``tools/history_seed.py``) on worker 0. Prints one line per command.

    .venv/bin/python bench/front_answers.py [--nodes 10000] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import GPU_VALUES, MinuteRow
from nodeagent.collector.store.database import Store
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.tools.history_seed import seed_history

COLLECTOR = [sys.executable, "-m", "nodeagent.collector"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="node rows per worker")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per worker in the history")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dbs = [Path(tmp) / "collector.db", Path(tmp) / "collector.worker1.db"]
        started = time.monotonic()
        rows = seed_history(dbs[0], ["history-node"], days=13.9)
        for worker, db in enumerate(dbs):
            _seed(db, worker, args.nodes, args.jobs)
        print(f"seeded in {time.monotonic() - started:.1f} s ({rows} history rows)")
        front = subprocess.Popen(
            [*COLLECTOR, "serve", "--listen", "127.0.0.1:0", "--db", str(dbs[0]), "--workers", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            assert front.stdout is not None
            address = front.stdout.readline().split()[-1]
            for _ in range(3):  # the workers' lines: each listens once these are out
                front.stdout.readline()
            for command in (
                ["nodes"], ["nodes", "--json"], ["jobs", "--json", "--since", "14d"], ["jobs", "--since", "14d"],
                ["history", "history-node", "--since", "14d"], ["history", "history-node", "--since", "14d", "--json"],
                ["history", "history-node", "--since", "14d", "--csv"],
            ):  # fmt: skip
                _run(command, address)
        finally:
            front.terminate()
            front.wait(60)


def _seed(db: Path, worker: int, nodes: int, jobs: int) -> None:
    now = time.time()
    minute = int(now // 60 * 60) - 120
    names = [f"w{worker}-node-{i:05d}" for i in range(nodes)]
    rows = [
        NodeRow(node_id=n, hostname=f"{n}.cluster.example", agent_version="0.9.0", first_seen=now - 3600,
                last_seen=now - 10, reports_total=100, epoch=1, last_seq=100, gpu_count=8)
        for n in names
    ]  # fmt: skip
    minutes = [
        MinuteRow(names[i % nodes], i % 8, minute - 60 * (i // 8), 60, dict.fromkeys(GPU_VALUES, 0.5), "busy", "",
                  (f"slurm-{worker}-{i:06d}",), minute + 59.0, 60.0)
        for i in range(jobs)
    ]  # fmt: skip
    store = Store(db)
    try:
        store.write(rows, before_commit=functools.partial(store.history.write, HistoryBatch(minutes=minutes)))
    finally:
        store.close()


def _run(command: list[str], address: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [*COLLECTOR, *command, "--collector", address, "--timeout", "60"], capture_output=True, check=False
    )
    seconds = time.monotonic() - started
    lines = done.stdout.count(b"\n")
    error = done.stderr.decode().strip().splitlines()[-1:] if done.returncode else []
    print(
        f"{' '.join(command):<48} exit {done.returncode}  {seconds:6.2f} s  {len(done.stdout) / 1e6:6.2f} MB  "
        f"{lines} lines {' '.join(error)}"
    )


if __name__ == "__main__":
    main()
