"""The daemon's cost: ``nodeagent run`` with 8 fake GPUs at 1 Hz, its share of one core and peak RSS.

For each case it starts a collector on a fresh SQLite file and the agent streaming to it (as in
service: every report acknowledged), lets it warm up, then reads the agent process's CPU time
(utime + stime, /proc/PID/stat) over ``--seconds`` of wall time, and its peak RSS (VmHWM). The
GPUs are the fake NVML's 8xA100-SXM4 and 8xH100-SXM5 profiles, idle, and again with a process on
every GPU (a ``sleep`` started here, as a job's rank would be), which is when power is read
between reports on GPUs without GPM (``agent/gpu/power_samples.py``). ``--latency-us`` charges
every NVML call that many microseconds, spun on the caller's CPU (the fake's cost model).

Before the cases it compiles the package's modules and drops the page cache of the environment's
shared libraries, as an installed copy runs (``bench/as_installed.py``): a module compiled at
import and a library in pip's large folios each add megabytes of RSS a node does not pay.

Figures, not a test: the machine's other load moves them (run it alone, or compare runs made
side by side).

    python bench/daemon_cost.py [--seconds 60] [--warmup 10] [--latency-us 0]
                                [--cases a100,a100+jobs,h100,h100+jobs] [--json]
                                [--agent-python /usr/bin/python3.11]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.as_installed import agent_command, as_installed  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def measure(case: str, seconds: float, warmup: float, latency_us: int, python: str | None = None) -> dict[str, Any]:
    from tests.fakes.nvml.build import build_fake_nvml
    from tests.fakes.nvml.state import a100_sxm4, h100_sxm5

    profile, _, jobs = case.partition("+")
    state = {"a100": a100_sxm4, "h100": h100_sxm5}[profile]()
    state.clock = None  # the fake's own monotonic clock: a live agent samples on its own
    state.latency_us, state.latency_spin = latency_us, True
    with tempfile.TemporaryDirectory(prefix="nodeagent-daemon-") as tmp, _ranks(8 if jobs else 0) as pids:
        for gpu, pid in zip(state.gpus, pids, strict=False):
            gpu.procs = {pid: 2 << 30}
            gpu.mem_used = 3 << 30
            gpu.util_gpu = 90
        lib_dir = build_fake_nvml(Path(tmp) / "fake-nvml")
        state_path = Path(tmp) / "nvml.state"
        state.write(state_path)
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(state_path)}
        port = _free_port()
        collector = [
            sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve",
            "--listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{_free_port()}",
            "--workers", "1", "--db", str(Path(tmp) / "collector.db"),
        ]  # fmt: skip
        agent = [
            *agent_command(python), "--log-level", "warning", "run",
            "--collector", f"127.0.0.1:{port}", "--node-id", "bench", "--interval", "1",
        ]  # fmt: skip
        with _process(collector, env), _process(agent, env) as proc:
            time.sleep(warmup)
            cpu, wall = _cpu_seconds(proc.pid), time.perf_counter()
            time.sleep(seconds)
            used, took = _cpu_seconds(proc.pid) - cpu, time.perf_counter() - wall
            alive = proc.poll() is None
            rss = _status_kib(proc.pid, "VmHWM") * 1024 if alive else 0
            threads = _status_kib(proc.pid, "Threads") if alive else 0
    if not alive:
        raise SystemExit(f"{case}: the agent exited early")
    return {
        "case": case, "latency_us": latency_us, "core_share": used / took, "peak_rss_bytes": rss, "threads": threads,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--latency-us", type=int, default=0)
    parser.add_argument("--cases", default="a100,a100+jobs,h100,h100+jobs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--agent-python", help="Run the agent on this interpreter (Debian's python3.11, the .deb's).")
    args = parser.parse_args()
    as_installed(REPO)
    results = [
        measure(c, args.seconds, args.warmup, args.latency_us, args.agent_python) for c in args.cases.split(",") if c
    ]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    at = f"{args.latency_us} us/call"
    print(f"nodeagent run, 8 fake GPUs, 1 Hz, {args.seconds:g} s each after {args.warmup:g} s, {at}")
    for r in results:
        print(
            f"{r['case']:<12} {r['core_share'] * 100:6.2f}% of a core   peak RSS {r['peak_rss_bytes'] / 1e6:5.1f} MB"
            f"   {r['threads']} threads"
        )
    return 0


@contextlib.contextmanager
def _ranks(count: int) -> Iterator[list[int]]:
    """``count`` live processes standing in for a job's ranks (the agent reads their /proc)."""
    procs = [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def _process(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    raise SystemExit(main())
