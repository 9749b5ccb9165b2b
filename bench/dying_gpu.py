"""One GPU of eight dying under ``nodeagent run``: healthy, then every call on it taking 2 s, then
hanging for good, then lost; per phase the reports per minute, the GPU source's wall time and the
agent's CPU per tick, threads alive, what the agent's ``/metrics`` says of the GPU, and what the
collector (the default ``serve``: a front and its workers) says of the node (``nodes``) and which
alerts fire; then ``nodeagent diag``'s time and exit against each failure. Runs on the fake NVML
(tests/fakes/nvml/, A100 profile).

    .venv/bin/python bench/dying_gpu.py [--phase-seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.fleet import Collector, cli, free_port  # noqa: E402
from tests.fakes.nvml.build import build_fake_nvml  # noqa: E402
from tests.fakes.nvml.state import a100_sxm4  # noqa: E402

FAILING = 3
PHASES = (("healthy", {}), ("2 s a call", {"delay_ms": 2000}), ("hanging", {"hang": 1}), ("lost", {"lost_after": 1}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase-seconds", type=float, default=30.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dying-gpu-"))
    lib_dir = build_fake_nvml(tmp / "lib")
    state_path = tmp / "nvml.state"
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(state_path)}
    port = free_port()
    write(state_path, {})
    collector = Collector(db=tmp / "collector.db", port=free_port()).start()
    agent = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.agent", "run", "--collector", collector.address,
         "--node-id", "dying", "--interval", "1", "--metrics-listen", f"127.0.0.1:{port}"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    page = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_page(page)
        for name, how in PHASES:
            write(state_path, how)
            phase(name, agent.pid, page, args.phase_seconds)
            collector_says(collector)
    finally:
        write(state_path, {})
        agent.terminate()
        started = time.monotonic()
        code = agent.wait(timeout=60)
        print(f"agent exit on SIGTERM: {code} after {time.monotonic() - started:.1f} s")
        collector.kill(signal.SIGTERM)
    for name, how in PHASES[1:]:
        write(state_path, how)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent.agent", "diag", "--expect-gpus", "8", "--json", "--window", "1"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        took = time.monotonic() - started
        fails = [f"{c['check']} {c['subject']}" for c in json.loads(done.stdout)["checks"] if c["status"] == "FAIL"]
        print(f"diag, GPU 3 {name}: {took:.1f} s, exit {done.returncode}, FAIL: {', '.join(fails)}")
        write(state_path, {})


def collector_says(collector: Collector) -> None:
    """The node's row in ``nodes`` and the alerts firing for it, as an operator reads them."""
    node = collector.node("dying")
    print(f"    nodes: state {node.get('state')}, cause {node.get('cause') or '-'}, "
          f"reports {node.get('reports_total', node.get('reports', '?'))}")  # fmt: skip
    firing = json.loads(cli("collector", "alerts", "--json", "--collector", collector.address))
    names = sorted(f"{a.get('name')}{{gpu={a.get('gpu', a.get('labels', {}).get('gpu', '-'))}}}" for a in firing
                   if a.get("node_id", a.get("node")) == "dying" and a.get("state", "firing") == "firing")  # fmt: skip
    print(f"    alerts firing: {', '.join(names) or 'none'}")


def write(path: Path, how: dict[str, int]) -> None:
    state = a100_sxm4()
    state.clock = None
    for key, value in how.items():
        setattr(state.gpus[FAILING], key, value)
    state.write(path)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def wait_page(url: str) -> None:
    for _ in range(300):
        try:
            if "DCGM_FI_DEV_GPU_TEMP{" in get(url):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the agent did not serve a GPU sample")


def value(text: str, pattern: str) -> float:
    found = re.search(pattern + r" ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> int:
    return int(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1))  # type: ignore[union-attr]


def phase(name: str, pid: int, page: str, seconds: float) -> None:
    text = get(page)
    reports0, cpu0, t0 = value(text, "nodeagent_agent_reports_total"), cpu_seconds(pid), time.monotonic()
    gpu_walls: list[float] = []
    most_threads = 0
    while time.monotonic() - t0 < seconds:
        time.sleep(1.0)
        text = get(page)
        gpu_walls.append(value(text, r'nodeagent_agent_collector_duration_seconds\{collector="gpu"\}'))
        most_threads = max(most_threads, threads(pid))
    elapsed = time.monotonic() - t0
    reports = value(text, "nodeagent_agent_reports_total") - reports0
    cpu = cpu_seconds(pid) - cpu0
    gpu3 = [line for line in text.splitlines() if 'gpu="3"' in line and line.startswith("nodeagent_gpu_")]
    print(f"== GPU 3 {name}: {reports / elapsed * 60:.0f} reports/min, gpu source wall per tick "
          f"max {max(gpu_walls) * 1000:.1f} ms median {sorted(gpu_walls)[len(gpu_walls) // 2] * 1000:.1f} ms, "
          f"agent CPU {cpu / max(reports, 1) * 1000:.1f} ms/tick, threads max {most_threads}")  # fmt: skip
    for line in gpu3:
        print("   ", re.sub(r',(UUID|pci_bus_id|modelName|Hostname|DCGM_FI_DRIVER_VERSION|device)="[^"]*"', "", line))


if __name__ == "__main__":
    main()
