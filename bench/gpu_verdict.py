"""Real-GPU check of the verdict: what the collector says of real training loops.

Starts a collector on loopback with short detector windows, then for each workload runs it on
the GPU while ``nodeagent run`` samples this machine for real and streams to the collector
(one node id per workload, so each gets a fresh detector). After each it prints the node's
state, cause and starvation ratio as ``nodeagent-collector nodes --json`` gives them:

  matmul         a tight bf16 matmul loop: busy, not starved
  sleep-loader   a DataLoader whose samples each wait 4 ms (a slow remote read that uses no
                 CPU, disk or NIC of this node): starved, cause unknown
  decode-loader  a DataLoader whose 4 workers each decode in pure Python (CPU-bound):
                 starved, cause cpu

Needs a machine with an NVIDIA driver and PyTorch with CUDA; ``--phases idle`` runs the
harness alone (any machine, with or without a GPU).

    python bench/gpu_verdict.py [--seconds 50] [--phases matmul,sleep-loader,decode-loader]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from gpu_real import idle, matmul, starved, train_on  # noqa: E402

# Short windows so each workload gets a verdict within a minute; the rest is the default.
DETECTOR_TOML = """
[detector]
window_seconds = 30.0
evaluate_seconds = 5.0
warmup_seconds = 10.0
gap_seconds = 10.0
exit_seconds = 10.0
"""


def _python_decode(_index: int) -> None:
    deadline = time.perf_counter() + 0.02  # a slow JPEG decode, in Python: the worker's core is busy
    spins = 0
    while time.perf_counter() < deadline:
        spins += 1


def decode_loader(stop: threading.Event) -> None:
    """Training fed by CPU-bound decoding in 4 loader workers."""
    train_on(_python_decode, 4, stop)


WORKLOADS: dict[str, Callable[[threading.Event], None]] = {
    "idle": idle,
    "matmul": matmul,
    "sleep-loader": starved,
    "decode-loader": decode_loader,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"gpu_verdict: the collector did not listen on port {port}")


def run_phase(name: str, seconds: int, target: str) -> dict[str, Any]:
    stop = threading.Event()
    worker = threading.Thread(target=WORKLOADS[name], args=(stop,), daemon=True)
    worker.start()
    time.sleep(3.0)  # let the workload reach its steady state
    # The verdict is read while the agent still reports: once it stops it says goodbye, and a
    # stopped node's verdict is of the past (nodes shows it `stopped`, without a cause). The
    # newest view before the goodbye is kept: on a busy machine one `nodes` call can take longer
    # than the one interval between the agent's next-to-last report and its goodbye.
    node_view: dict[str, Any] | None = None
    try:
        agent = subprocess.Popen(
            [sys.executable, "-m", "nodeagent.agent", "run", "--collector", target, "--node-id", f"verdict-{name}",
             "--interval", "1", "--max-reports", str(seconds), "--deadline", str(seconds + 60)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        end = time.monotonic() + seconds + 90
        while agent.poll() is None and time.monotonic() < end:
            seen = _node(target, f"verdict-{name}")
            if seen is not None and seen["reports_total"] > 0 and seen["state"] != "stopped":
                node_view = seen
            time.sleep(0.5)
        _out, err = agent.communicate(timeout=max(1.0, end - time.monotonic()))
    finally:
        stop.set()
        worker.join(timeout=30)
    if agent.returncode != 0:
        raise SystemExit(f"gpu_verdict: the agent failed in {name}: {err.strip()[-500:]}")
    if node_view is None:
        raise SystemExit(f"gpu_verdict: the collector does not know verdict-{name} while it reports")
    if node_view["reports_total"] < seconds - 1:
        print(
            f"gpu_verdict: {name}'s verdict was last read at report {node_view['reports_total']} of {seconds}",
            file=sys.stderr,
        )
    final = _node(target, f"verdict-{name}")  # every report, stored
    if final is not None:
        node_view["reports_total"] = final["reports_total"]
    return node_view


def _node(target: str, node_id: str) -> dict[str, Any] | None:
    nodes = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "nodes", "--collector", target, "--json"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return next((n for n in json.loads(nodes.stdout) if n["node_id"] == node_id), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=50, help="Reports (one a second) per workload.")
    parser.add_argument("--phases", default="matmul,sleep-loader,decode-loader")
    parser.add_argument("--raw", type=Path, help="Also write each node's full view to this file (JSON Lines).")
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    unknown = [p for p in phases if p not in WORKLOADS]
    if unknown:
        raise SystemExit(f"gpu_verdict: unknown phase {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    if any(p != "idle" for p in phases):
        try:
            import torch
        except ImportError:
            raise SystemExit("gpu_verdict: needs PyTorch with CUDA (pip install torch)") from None
        if not torch.cuda.is_available():
            raise SystemExit("gpu_verdict: no CUDA GPU visible to PyTorch")
    with tempfile.TemporaryDirectory(prefix="nodeagent-verdict-") as tmp:
        config = Path(tmp) / "collector.toml"
        config.write_text(DETECTOR_TOML)
        port, http_port = _free_port(), _free_port()
        collector = subprocess.Popen(
            [sys.executable, "-m", "nodeagent.collector", "serve", "--listen", f"127.0.0.1:{port}",
             "--http-listen", f"127.0.0.1:{http_port}", "--db", str(Path(tmp) / "c.db"), "--config", str(config)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        )  # fmt: skip
        try:
            _wait_port(port, 30)
            print("| workload | reports | state | cause | tier | starvation ratio | GPU-hours lost today |")
            print("|---|---|---|---|---|---|---|")
            for name in phases:
                started = time.monotonic()
                node = run_phase(name, args.seconds, f"127.0.0.1:{port}")
                ratio = node.get("starvation_ratio")
                print(
                    f"| {name} | {node['reports_total']} | {node['state']} | {node['cause'] or '-'} "
                    f"| {node['tier'] or '-'} | {'-' if ratio is None else f'{ratio:.3f}'} "
                    f"| {node['gpu_hours_lost_today']:.4f} |",
                    flush=True,
                )
                if args.raw is not None:
                    with args.raw.open("a") as raw:
                        raw.write(json.dumps(node) + "\n")
                print(f"{name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
        finally:
            collector.terminate()
            try:
                collector.wait(timeout=15)
            except subprocess.TimeoutExpired:
                collector.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
