"""The ledger over a large history: its invariant (the parts against the seconds held, the worst
row) and what ``nodeagent-collector ledger`` costs.

With ``--seed N`` it first writes ``--days`` of minutes for N simulated 8-GPU nodes straight
through the store (``tools/history_seed.py``; skip it to reuse a database). Then it reads the
database itself for the invariant: every GPU-minute's split against its ``held_seconds`` and
every node-minute's split against the sum of its GPUs' (the worst relative difference of each),
times the read ``Query.Ledger`` runs (without the query bounds' deadline), then starts
``nodeagent-collector serve`` on it and times ``ledger --since 30d --by fleet|node|job|account --json``
(from the command line to the last byte of its answer; a read past the bounds' 10 s is refused),
and the collector's peak resident memory. It prints figures; it asserts nothing.

    python bench/ledger_cost.py DB [--seed 1000] [--days 1] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil

from nodeagent.collector.history.split import COLUMNS
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import ledger_answer
from nodeagent.collector.store.reader import ReadContext
from nodeagent.tools.history_seed import seed_history
from nodeagent.v1 import nodeagent_pb2 as pb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--seed", type=int, default=0, help="write the history of this many nodes first")
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.seed:
        started = time.monotonic()
        nodes = [f"node-{i:04d}" for i in range(args.seed)]
        rows = seed_history(args.db, nodes, args.days, end=time.time() - 120)
        print(f"seeded {rows} minute rows of {args.seed} nodes in {time.monotonic() - started:.0f} s", flush=True)
    invariant(args.db)
    direct(args.db)
    costs(args.db, args.timeout)


def invariant(db: Path) -> None:
    parts = " + ".join(COLUMNS)
    conn = sqlite3.connect(db)
    try:
        started = time.monotonic()
        gpu = conn.execute(
            f"SELECT COUNT(*), MAX(ABS(({parts}) - held_seconds) / held_seconds) FROM history_minutes"
            f" WHERE gpu >= 0 AND held_seconds > 0 AND {COLUMNS[0]} IS NOT NULL"
        ).fetchone()
        node = conn.execute(
            f"SELECT COUNT(*), MAX(ABS(n.total - g.held) / g.held) FROM"
            f" (SELECT node_id, minute, {parts} AS total FROM history_minutes WHERE gpu = -1) n JOIN"
            " (SELECT node_id, minute, SUM(held_seconds) AS held FROM history_minutes WHERE gpu >= 0"
            "  GROUP BY node_id, minute) g USING (node_id, minute) WHERE g.held > 0"
        ).fetchone()
        print(f"invariant: {gpu[0]} GPU-minutes, worst |parts - held| / held = {gpu[1] or 0.0:.2e}")
        print(f"invariant: {node[0]} node-minutes, worst |parts - sum of GPUs held| / held = {node[1] or 0.0:.2e}")
        print(f"  (read in {time.monotonic() - started:.0f} s)")
    finally:
        conn.close()


def direct(db: Path) -> None:
    """The read ``Query.Ledger`` runs, on this thread and without the query bounds' deadline."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for by in ("fleet", "node", "job", "account"):
            started = time.monotonic()
            request = pb.LedgerRequest(since_unix_seconds=time.time() - 30 * 86400, by=by)
            answer = ledger_answer(ReadContext(conn), request, Prices(), 10**9, 2**31)
            print(f"the read alone, --by {by}: {len(answer.rows)} rows in {time.monotonic() - started:.1f} s")
    finally:
        conn.close()


def costs(db: Path, timeout: float) -> None:
    port = _free_port()
    collector = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve", "--listen",
         f"127.0.0.1:{port}", "--db", str(db), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait_up(port, collector)
        peak = 0
        for by in ("fleet", "node", "job", "account"):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "nodeagent.collector", "ledger", "--collector", f"127.0.0.1:{port}",
                 "--since", "30d", "--by", by, "--json", "--timeout", str(timeout)],
                capture_output=True, text=True, timeout=timeout + 60, check=False,
            )  # fmt: skip
            seconds = time.monotonic() - started
            peak = max(peak, _rss(collector.pid))
            if done.returncode != 0:
                print(f"ledger --by {by}: exit {done.returncode} after {seconds:.1f} s: {done.stderr.strip()[-300:]}")
                continue
            rows = json.loads(done.stdout)
            held = sum(r["gpu_hours_held"] for r in rows)
            parts = sum(
                r["gpu_hours_computing"] + sum(r["gpu_hours_lost"].values()) + r["gpu_hours_unmeasured"] for r in rows
            )
            print(
                f"ledger --since 30d --by {by}: {len(rows)} rows, {held:.1f} GPU-hours held"
                f" (parts {parts:.1f}), {seconds:.1f} s"
            )
        print(f"collector peak resident memory: {peak / 2**20:.0f} MiB")
    finally:
        collector.terminate()
        collector.wait(60)


def _rss(pid: int) -> int:
    try:
        process = psutil.Process(pid)
        return int(sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]))
    except psutil.Error:
        return 0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_up(port: int, collector: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if collector.poll() is not None:
            raise SystemExit(
                f"the collector stopped: {collector.stderr.read().decode()[-500:] if collector.stderr else ''}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the collector did not start in 300 s")


if __name__ == "__main__":
    main()
