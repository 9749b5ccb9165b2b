"""What each node held costs the collector: every worker's RSS and the size of ``/metrics`` after
many short-lived nodes have come and gone.

Starts the default ``nodeagent-collector serve`` (a front and a worker per core) on free ports
and a fresh database, then connects ``--nodes`` simulated 8-GPU nodes in waves of ``--wave``
(``nodeagent.tools.loadgen``: real gRPC, each redirected by the front to its worker), each for
``--seconds`` at 1 report/s before it hangs up and stays silent. Once the last wave has been
silent for ``[alerts] node_down_seconds`` (60 s by default, or ``--down-seconds``) plus a few
seconds, prints each worker's RSS (psutil), the front's ``/metrics`` in bytes and lines, and the
RSS per node held. ``--source DIR`` runs the collector from another checkout (its ``build/src``
link tree, ``make link-tree``), to measure a commit before a change beside one after it.

    python bench/node_memory.py [--nodes 10000] [--wave 1000] [--seconds 3] [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from nodeagent.tools.loadgen import LoadSpec, run_load

REPO = Path(__file__).resolve().parent.parent
SETTLE_SECONDS = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--wave", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="Seconds each node reports before it goes silent.")
    parser.add_argument("--processes", type=int, default=2, help="Load generator processes.")
    parser.add_argument("--down-seconds", type=float, default=0.0, help="[alerts] node_down_seconds (0: default).")
    parser.add_argument("--source", type=Path, default=REPO, help="The checkout whose collector runs.")
    args = parser.parse_args()
    if args.nodes < 1 or args.wave < 1 or args.seconds <= 0:
        print("--nodes, --wave and --seconds must be positive", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="node-memory-") as tmp:
        run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    command = [sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve",
               "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--db", str(tmp / "collector.db"),
               # Every simulated node streams from 127.0.0.1: the per-source bound is for real fleets.
               "--max-streams-per-source", "100000"]  # fmt: skip
    down = args.down_seconds or 60.0
    if args.down_seconds:
        (tmp / "collector.toml").write_text(f"[alerts]\nnode_down_seconds = {args.down_seconds}\n")
        command += ["--config", str(tmp / "collector.toml")]
    env = dict(os.environ, PYTHONPATH=str(args.source / "build" / "src"))
    # The log sink prints every NodeDown: thousands of lines, none of them the measurement.
    server = subprocess.Popen(command, cwd=args.source, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=env)  # fmt: skip
    try:
        assert server.stdout is not None
        address = server.stdout.readline().split()[-1]
        http = server.stdout.readline().split()[-1]
        front = psutil.Process(server.pid)
        time.sleep(SETTLE_SECONDS)
        print(f"source {args.source} (commit {_commit(args.source)}), collector {address}, http {http}")
        print(f"idle: {_rss_line(front)}")
        sent = failed = 0
        for start in range(0, args.nodes, args.wave):
            count = min(args.wave, args.nodes - start)
            spec = LoadSpec(target=address, nodes=count, duration_seconds=args.seconds, processes=args.processes,
                            node_prefix=f"short{start // args.wave:03d}")  # fmt: skip
            result = run_load(spec)
            sent += result.sent
            failed += result.streams_failed
            print(f"wave {start // args.wave + 1}: {count} nodes, {result.sent} reports sent, {result.acked} acked, "
                  f"{result.streams_failed} streams failed; {_rss_line(front)}", flush=True)  # fmt: skip
        time.sleep(down + SETTLE_SECONDS)
        nodes = _nodes(http)
        text = _get(f"http://{http}/metrics")
        workers = _workers(front)
        rss = [proc.memory_info().rss for proc in workers]
        summary = {
            "nodes_held": nodes, "reports_sent": sent, "streams_failed": failed,
            "worker_rss_mb": [round(r / 1e6, 1) for r in rss],
            "front_rss_mb": round(front.memory_info().rss / 1e6, 1),
            "metrics_bytes": len(text.encode()), "metrics_lines": text.count("\n"),
        }  # fmt: skip
        print(f"after {nodes} nodes silent for {down:.0f} s + {SETTLE_SECONDS:.0f} s : {_rss_line(front)}")
        print(f"/metrics: {summary['metrics_bytes']:,} bytes, {summary['metrics_lines']:,} lines")
        print(json.dumps(summary))
    finally:
        server.terminate()
        server.wait(timeout=60)


def _workers(front: psutil.Process) -> list[psutil.Process]:
    """The worker collectors: the front's children that listen on TCP (remote write's do not)."""
    found = []
    for child in front.children(recursive=True):
        try:
            if any(c.status == psutil.CONN_LISTEN for c in child.net_connections(kind="tcp")):
                found.append(child)
        except psutil.Error:
            continue
    return sorted(found, key=lambda proc: proc.pid)


def _rss_line(front: psutil.Process) -> str:
    workers = ", ".join(f"{proc.memory_info().rss / 1e6:.0f}" for proc in _workers(front))
    return f"worker RSS MB [{workers}], front {front.memory_info().rss / 1e6:.0f} MB"


def _nodes(http: str) -> int:
    rows = json.loads(_get(f"http://{http}/api/fleet"))
    return len(rows["nodes"] if isinstance(rows, dict) else rows)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=120) as answer:
        return str(answer.read().decode())


def _commit(source: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "?"


if __name__ == "__main__":
    main()
