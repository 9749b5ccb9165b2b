"""What the agent's /metrics costs: CPU per scrape and peak RSS, beside the agent's tick cost.

Runs ``nodeagent run --metrics-listen`` on the fake NVML the test suite builds (8x H100 SXM5 with
GPM and 18 NVLinks each) and this machine's /proc and /sys, once with every family group and once
without the per-link NVLink group, and measures from the agent's /proc/PID/stat:

- tick: the agent's CPU per sampling tick with nobody scraping (the sender retrying an absent
  collector included, so an upper bound);
- fresh scrape: one gzipped scrape per tick (ticks of 0.25 s here), as Prometheus does at any
  interval of a tick or more (each scrape writes the page of a new tick), less the ticks' own CPU;
- repeat scrape: scrapes within one tick (a second Prometheus of an HA pair, a person with curl),
  which serve the page already written;
- peak RSS (VmHWM);
- page write and gzip: in a process of its own on the same fake NVML, the CPU time
  (``time.process_time``) one write of a fresh tick's page takes inside the agent, and its
  gzip, the least of ``--writes`` tries (the machine's load adds to the others, never takes off):
  the part of a fresh scrape that is the page, without HTTP.

dcgm-exporter is printed beside it as its users report it (NVIDIA publishes no per-scrape cost):
NVIDIA/gpu-operator#340 shows 135-155 MiB and 3-9 millicores per dcgm-exporter pod, and
NVIDIA/gpu-monitoring-tools#133 71 MiB and 15-20% of a core.

    python bench/agent_metrics_scrape.py [--seconds 15] [--repeat-scrapes 200] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Short ticks so a window holds many scrapes: /proc/PID/stat counts CPU in 10 ms steps.
INTERVAL_SECONDS = 0.25
DCGM_EXPORTER_REPORTED = "dcgm-exporter as reported: 135-155 MiB RSS, 3-9 millicores (gpu-operator#340); 71 MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="Length of each measuring window.")
    parser.add_argument("--repeat-scrapes", type=int, default=200)
    parser.add_argument("--writes", type=int, default=200, help="Page writes timed in process.")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--page-write", metavar="GROUPS", help=argparse.SUPPRESS)  # the in-process child
    args = parser.parse_args()
    if args.page_write is not None:
        print(json.dumps(page_write(args.page_write.split(","), args.writes)))
        return
    from tests.fakes.nvml.build import build_fake_nvml
    from tests.fakes.nvml.state import h100_sxm5

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp) / "nvml")
        state = h100_sxm5(8)
        state.clock = None  # the agent samples on its own: GPM on the fake's monotonic clock
        state_path = Path(tmp) / "nvml.state"
        state.write(state_path)
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(state_path)}
        for name, flags, groups in (
            ("all groups", [], "gpu,nvlink,node,agent"),
            ("without per-link NVLink", ["--no-metrics-nvlink"], "gpu,node,agent"),
        ):
            child = [sys.executable, __file__, "--page-write", groups, "--writes", str(args.writes)]
            written = json.loads(subprocess.run(child, env=env, check=True, capture_output=True, timeout=300).stdout)
            results.append({"page": name, **measure(env, flags, args.seconds, args.repeat_scrapes), **written})
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"8x H100 (fake NVML, GPM, 18 NVLinks each), this machine's host; {INTERVAL_SECONDS:g} s ticks")
    print(f"{'page':<24} {'samples':>7} {'KB gz':>6} {'tick ms':>8} {'fresh scrape ms':>15} "
          f"{'repeat scrape ms':>16} {'page write ms':>13} {'+ gzip ms':>9} {'peak RSS MB':>11}")  # fmt: skip
    for r in results:
        print(f"{r['page']:<24} {r['samples']:>7} {r['gzip_bytes'] / 1e3:>6.0f} {r['tick_cpu_seconds'] * 1e3:>8.2f} "
              f"{r['fresh_scrape_cpu_seconds'] * 1e3:>15.2f} {r['repeat_scrape_cpu_seconds'] * 1e3:>16.2f} "
              f"{r['page_write_cpu_seconds'] * 1e3:>13.2f} {r['page_gzip_cpu_seconds'] * 1e3:>9.2f} "
              f"{r['peak_rss_bytes'] / 1e6:>11.1f}")  # fmt: skip
    print(f"{DCGM_EXPORTER_REPORTED} RSS, 15-20% of a core (gpu-monitoring-tools#133); no per-scrape figure published")


def measure(env: dict[str, str], flags: list[str], seconds: float, repeat: int) -> dict[str, Any]:
    port = _free_port()
    command = [
        sys.executable, "-m", "nodeagent.agent", "run", "--collector", f"127.0.0.1:{_free_port()}",
        "--node-id", "bench",
        "--interval", str(INTERVAL_SECONDS), "--metrics-listen", f"127.0.0.1:{port}", *flags,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    with _process(command, env) as proc:
        page = _wait_page(url, "DCGM_FI_PROF_SM_ACTIVE{", proc)
        # Nobody scraping: the ticks alone.
        before = _reports(_scrape(url))
        cpu, wall = _cpu_seconds(proc.pid), time.perf_counter()
        time.sleep(seconds)
        idle_cpu, idle_wall = _cpu_seconds(proc.pid) - cpu, time.perf_counter() - wall
        ticks = _reports(_scrape(url)) - before
        idle_rate = idle_cpu / idle_wall
        # One scrape per tick: every scrape writes a new page.
        scrapes, cpu, wall = 0, _cpu_seconds(proc.pid), time.perf_counter()
        while time.perf_counter() - wall < seconds:
            _scrape(url)
            scrapes += 1
            time.sleep(INTERVAL_SECONDS)
        fresh = _cpu_seconds(proc.pid) - cpu - idle_rate * (time.perf_counter() - wall)
        # Scrapes within a tick: the page is written already.
        cpu, wall = _cpu_seconds(proc.pid), time.perf_counter()
        for _ in range(repeat):
            _scrape(url)
        cached = _cpu_seconds(proc.pid) - cpu - idle_rate * (time.perf_counter() - wall)
        rss = _status_kib(proc.pid, "VmHWM") * 1024
    samples = sum(1 for line in page.splitlines() if line and not line.startswith("#"))
    return {
        "samples": samples, "gzip_bytes": len(gzip.compress(page.encode(), compresslevel=1)),
        "tick_cpu_seconds": idle_cpu / max(ticks, 1), "fresh_scrape_cpu_seconds": max(fresh, 0.0) / max(scrapes, 1),
        "repeat_scrape_cpu_seconds": max(cached, 0.0) / repeat, "peak_rss_bytes": rss,
    }  # fmt: skip


def page_write(groups: list[str], writes: int) -> dict[str, float]:
    """The agent's page of one tick (every collector on this host and the fake NVML), written
    ``writes`` times in this process: the least CPU of a write, and of its gzip."""
    from nodeagent.agent.collectors import available
    from nodeagent.agent.delivery.spool import Spool
    from nodeagent.agent.metrics import AgentExposition, AgentMetrics, AgentTelemetry
    from nodeagent.agent.sampler import Sampler
    from nodeagent.core.metrics_http import GZIP_LEVEL

    class NoSender:
        connected_to = None
        reconnects_total = 0

    sampler = Sampler(sorted(available()), node_id="bench")
    telemetry = AgentTelemetry("bench", INTERVAL_SECONDS)
    for _ in range(2):  # the second tick has rates and the first's topology
        telemetry.publish(sampler.tick())
        time.sleep(INTERVAL_SECONDS)
    sampler.close()
    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    metrics = AgentMetrics(telemetry, spool, NoSender(), ("127.0.0.1:1",))  # type: ignore[arg-type]
    exposition = AgentExposition(metrics, groups)
    write = packing = float("inf")
    for _ in range(writes):
        telemetry.produced_total += 1  # a new tick: the page is written again
        started = time.process_time()
        page = exposition.render()
        written = time.process_time()
        gzip.compress(page, compresslevel=GZIP_LEVEL)
        write, packing = min(write, written - started), min(packing, time.process_time() - written)
    return {"page_write_cpu_seconds": write, "page_gzip_cpu_seconds": packing}


def _scrape(url: str) -> str:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})  # as Prometheus asks
    with urllib.request.urlopen(request, timeout=10) as reply:
        body = reply.read()
        return gzip.decompress(body).decode() if reply.headers.get("Content-Encoding") == "gzip" else body.decode()


def _reports(page: str) -> int:
    for line in page.splitlines():
        if line.startswith("nodeagent_agent_reports_total "):
            return int(float(line.split()[1]))
    raise SystemExit("the page has no nodeagent_agent_reports_total")


def _wait_page(url: str, needle: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"agent exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            page = _scrape(url)
            if needle in page:
                return page
        time.sleep(0.2)
    raise SystemExit(f"{url} never showed {needle}")


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


if __name__ == "__main__":
    main()
