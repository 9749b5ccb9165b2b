"""What the agent's /metrics costs: CPU per scrape and peak RSS, beside the agent's tick cost.

Builds the fake NVML the test suite uses (8x H100 SXM5 with GPM and 18 NVLinks each) on this
machine's /proc and /sys, and measures the default page (per-link NVLink off) and the page with
every family group (``--metrics-nvlink``):

- fresh scrape: the CPU one scrape costs when it meets a new tick's page (what every Prometheus
  scrape costs at an interval of a tick or more): writing the page, its gzip and the HTTP.
  A process of its own serves the agent's page (the same AgentExposition and MetricsHttpServer,
  on two sampled ticks) and counts every scrape as a new tick; ``--scrapes`` gzipped scrapes from
  this process, over one kept-alive connection as Prometheus scrapes, and a quarter as many over
  a new connection each (curl); its CPU from /proc/PID/stat, with no sampling loop beside it;
- page write and gzip: in that process, ``time.process_time`` of one page write and of its gzip,
  the least of ``--writes`` tries (the machine's load adds to the others, never takes off);
- a DGX H100's host: the default page with this host's sample grown to a DGX H100's (224 CPUs,
  8 InfiniBand ports with every counter, 10 NICs, 10 NVMe disks), served the same way: what the
  host families add on a big node (this machine has 2 CPUs and no InfiniBand);
- tick, repeat scrape, peak RSS: a live ``nodeagent run --metrics-listen`` with 0.25 s ticks,
  streaming to a real collector on loopback (as in service: its reports acked, its spool
  small), from its /proc/PID/stat: its CPU per tick with nobody scraping (streaming included),
  per scrape within one tick (the page already written: a second Prometheus of an HA pair), and
  VmHWM. ``--agent-python /usr/bin/python3.11`` runs both processes on Debian's interpreter, the
  one the .deb's environment uses, with this environment's packages.

Before it measures, the bench compiles the package's modules (this environment may run with
PYTHONDONTWRITEBYTECODE, and compiling at import costs resident memory an installed package does
not pay) and drops the page cache of the environment's shared libraries: a library pip has just
written in one piece sits in the page cache in large folios, and a process that maps it counts
them whole (about 5 MB more for gRPC's cygrpc right after ``make setup``).

Where Debian's prometheus-node-exporter is installed, the bench also scrapes it (its default
collectors, on this host) the same way and prints its CPU per scrape: the program whose host
families the agent's page replaces, as a reference run on the same machine.

dcgm-exporter is printed beside it as its users report it (NVIDIA publishes no per-scrape cost):
NVIDIA/gpu-operator#340 shows 135-155 MiB and 3-9 millicores per dcgm-exporter pod, and
NVIDIA/gpu-monitoring-tools#133 71 MiB and 15-20% of a core.

    python bench/agent_metrics_scrape.py [--seconds 8] [--scrapes 2000] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import shutil
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

from bench.as_installed import agent_command, as_installed  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Short ticks so a window holds many scrapes: /proc/PID/stat counts CPU in 10 ms steps.
INTERVAL_SECONDS = 0.25
DCGM_EXPORTER_REPORTED = "dcgm-exporter as reported: 135-155 MiB RSS, 3-9 millicores (gpu-operator#340); 71 MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="Length of the live agent's idle window.")
    parser.add_argument("--repeat-scrapes", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=2000, help="Fresh scrapes of each page.")
    parser.add_argument("--writes", type=int, default=200, help="Page writes timed in process.")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--agent-python", metavar="PATH",
        help="Run the agent and its page's server on this interpreter (same ABI), with this environment's packages.",
    )  # fmt: skip
    parser.add_argument("--serve", metavar="GROUPS", help=argparse.SUPPRESS)  # the page's own process
    parser.add_argument("--dgx-host", action="store_true", help=argparse.SUPPRESS)  # its host grown to a DGX's
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve.split(","), args.writes, dgx_host=args.dgx_host)
        return
    from tests.fakes.nvml.build import build_fake_nvml
    from tests.fakes.nvml.state import h100_sxm5

    as_installed(REPO)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp) / "nvml")
        state = h100_sxm5(8)
        state.clock = None  # the agent samples on its own: GPM on the fake's monotonic clock
        state_path = Path(tmp) / "nvml.state"
        state.write(state_path)
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(state_path)}
        for name, flags, groups in (
            ("default", ["--no-metrics-nvlink"], "gpu,node,agent"),
            ("with per-link NVLink", ["--metrics-nvlink"], "gpu,nvlink,node,agent"),
        ):
            fresh = fresh_scrapes(env, groups, args.scrapes, args.writes, args.agent_python)
            results.append(
                {"page": name, **fresh, **measure(env, flags, args.seconds, args.repeat_scrapes, args.agent_python)}
            )
        big = fresh_scrapes(env, "gpu,node,agent", args.scrapes, args.writes, args.agent_python, dgx_host=True)
        results.append({"page": "default, DGX H100 host", **big})
    reference = node_exporter_scrapes(args.scrapes // 4)
    if args.json:
        print(json.dumps({"pages": results, "node_exporter": reference}, indent=2))
        return
    print("8x H100 (fake NVML, GPM, 18 NVLinks each), this machine's host; CPU ms per scrape of the agent")
    print(f"{'page':<22} {'samples':>7} {'KB gz':>5} {'fresh scrape':>12} {'new conn':>8} {'page write':>10} "
          f"{'+ gzip':>6} {'repeat':>6} {'tick':>6} {'peak RSS MB':>11}")  # fmt: skip
    for r in results:
        fresh, new_connection = r["fresh_scrape_cpu_seconds"], r["fresh_scrape_new_connection_cpu_seconds"]
        live = ""  # the live agent runs on this host only
        if "tick_cpu_seconds" in r:
            live = (f"{r['repeat_scrape_cpu_seconds'] * 1e3:>6.2f} {r['tick_cpu_seconds'] * 1e3:>6.2f} "
                    f"{r['peak_rss_bytes'] / 1e6:>11.1f}")  # fmt: skip
        write, packing = r["page_write_cpu_seconds"], r["page_gzip_cpu_seconds"]
        print(f"{r['page']:<22} {r['samples']:>7} {r['gzip_bytes'] / 1e3:>5.0f} "
              f"{fresh * 1e3:>12.2f} {new_connection * 1e3:>8.2f} {write * 1e3:>10.2f} {packing * 1e3:>6.2f} "
              f"{live}")  # fmt: skip
    if reference is not None:
        print(f"node_exporter {reference['version']} on this host (default collectors, "
              f"{reference['samples']} samples): {reference['scrape_cpu_seconds'] * 1e3:.2f} ms CPU per scrape, "
              "kept alive, gzipped")  # fmt: skip
    print(f"{DCGM_EXPORTER_REPORTED} RSS, 15-20% of a core (gpu-monitoring-tools#133); no per-scrape figure published")


def _script_command(python: str | None) -> list[str]:
    """This script, on ``python`` (with this environment's packages) when given."""
    if python is None:
        return [sys.executable, __file__]
    site_dir = next(p for p in sys.path if p.endswith("site-packages"))
    launch = (
        f"import runpy, site, sys; site.addsitedir({site_dir!r}); sys.argv[0] = {__file__!r}; "
        f"runpy.run_path({__file__!r}, run_name='__main__')"
    )
    return [python, "-c", launch]


def fresh_scrapes(
    env: dict[str, str], groups: str, scrapes: int, writes: int, python: str | None = None, *, dgx_host: bool = False
) -> dict[str, Any]:
    """CPU per fresh scrape of the page's own server process, kept alive and on new connections."""
    command = [*_script_command(python), "--serve", groups, "--writes", str(writes)]
    if dgx_host:
        command.append("--dgx-host")
    server = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        written = json.loads(server.stdout.readline())
        port = written.pop("port")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        kept = _kept_alive_cpu(connection, server.pid, scrapes, warm=20)  # warm: the request thread, label caches
        connection.close()
        fresh_connections = max(scrapes // 4, 1)
        cpu = _cpu_seconds(server.pid)
        for _ in range(fresh_connections):
            with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=10)) as once:
                _get(once)
        new = (_cpu_seconds(server.pid) - cpu) / fresh_connections
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {**written, "fresh_scrape_cpu_seconds": kept, "fresh_scrape_new_connection_cpu_seconds": new}


def node_exporter_scrapes(scrapes: int) -> dict[str, Any] | None:
    """node_exporter's CPU per scrape on this host, over one kept-alive connection; None where it
    is not installed."""
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        return None
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    port = _free_port()
    with _process([binary, f"--web.listen-address=127.0.0.1:{port}"], dict(os.environ)) as proc:
        deadline = time.monotonic() + 30
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                page = gzip.decompress(_get(connection))
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    return None
                time.sleep(0.2)
        per_scrape = _kept_alive_cpu(connection, proc.pid, scrapes, warm=10)
        connection.close()
    samples = _samples(page.decode())
    words = (version.stdout + version.stderr).split()
    named = words[words.index("version") + 1] if "version" in words else "?"
    return {"version": named, "samples": samples, "scrape_cpu_seconds": per_scrape}


def _kept_alive_cpu(connection: http.client.HTTPConnection, pid: int, scrapes: int, *, warm: int) -> float:
    """CPU seconds of process ``pid`` per scrape over one kept-alive connection, after ``warm``."""
    for _ in range(warm):
        _get(connection)
    cpu = _cpu_seconds(pid)
    for _ in range(scrapes):
        _get(connection)
    return (_cpu_seconds(pid) - cpu) / max(scrapes, 1)


def _samples(page: str) -> int:
    return sum(1 for line in page.splitlines() if line and not line.startswith("#"))


def _get(connection: http.client.HTTPConnection) -> bytes:
    connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})  # as Prometheus asks
    with connection.getresponse() as reply:
        body = reply.read()
        if reply.status != 200:
            raise SystemExit(f"/metrics answered {reply.status}")
        return body


def measure(
    env: dict[str, str], flags: list[str], seconds: float, repeat: int, python: str | None = None
) -> dict[str, Any]:
    """The live agent, streaming to a real collector (as it runs in service: its spool acked)."""
    port, collector_port = _free_port(), _free_port()
    agent = [
        *agent_command(python), "run", "--collector", f"127.0.0.1:{collector_port}", "--node-id", "bench",
        "--interval", str(INTERVAL_SECONDS), "--metrics-listen", f"127.0.0.1:{port}", *flags,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    with tempfile.TemporaryDirectory() as tmp, _process(
        [sys.executable, "-m", "nodeagent.collector", "serve", "--listen", f"127.0.0.1:{collector_port}",
         "--db", str(Path(tmp) / "collector.db")], env,
    ), _process(agent, env) as proc:  # fmt: skip
        page = _wait_page(url, "DCGM_FI_PROF_SM_ACTIVE{", proc)
        # Nobody scraping: the ticks alone.
        before = _reports(_scrape(url))
        cpu, wall = _cpu_seconds(proc.pid), time.perf_counter()
        time.sleep(seconds)
        idle_cpu, idle_wall = _cpu_seconds(proc.pid) - cpu, time.perf_counter() - wall
        ticks = _reports(_scrape(url)) - before
        idle_rate = idle_cpu / idle_wall
        # Scrapes within a tick, over one kept-alive connection: the page is written already.
        host, _, port_text = url.split("/")[2].partition(":")
        connection = http.client.HTTPConnection(host, int(port_text), timeout=10)
        _get(connection)
        cpu, wall = _cpu_seconds(proc.pid), time.perf_counter()
        for _ in range(repeat):
            _get(connection)
        cached = _cpu_seconds(proc.pid) - cpu - idle_rate * (time.perf_counter() - wall)
        connection.close()
        rss = _status_kib(proc.pid, "VmHWM") * 1024
    samples = _samples(page)
    return {
        "samples": samples, "gzip_bytes": len(gzip.compress(page.encode(), compresslevel=1)),
        "tick_cpu_seconds": idle_cpu / max(ticks, 1), "repeat_scrape_cpu_seconds": max(cached, 0.0) / repeat,
        "peak_rss_bytes": rss,
    }  # fmt: skip


def serve(groups: list[str], writes: int, *, dgx_host: bool = False) -> None:
    """The agent's page of one tick (every source on this host and the fake NVML) behind the
    agent's HTTP server, every scrape a new tick. First prints (one JSON line) the port, the page's
    samples and gzipped bytes, and the least CPU of ``writes`` page writes and of their gzip;
    serves until stdin closes. ``dgx_host``: both ticks' host grown to a DGX H100's."""
    from nodeagent.agent.delivery.spool import Spool
    from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
    from nodeagent.agent.sampling.sampler import Sampler
    from nodeagent.agent.sources import available
    from nodeagent.core.exposition.http_reply import gzip_bytes
    from nodeagent.core.exposition.http_server import MetricsHttpServer

    class NoSender:
        connected_to = None
        reconnects_total = 0
        reports_resent_total = 0

    sampler = Sampler(sorted(available()), node_id="bench")
    telemetry = AgentTelemetry("bench", INTERVAL_SECONDS)
    for _ in range(2):  # the second tick has rates and the first's topology
        report = sampler.tick()
        if dgx_host:
            _grow_to_dgx_host(report)
        telemetry.publish(report)
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
        gzip_bytes(page)
        write, packing = min(write, written - started), min(packing, time.process_time() - written)

    def fresh_gzip() -> bytes:
        telemetry.produced_total += 1  # each scrape meets a new tick (one integer; no sampling here)
        return exposition.render_gzip()

    http = MetricsHttpServer("127.0.0.1:0", exposition.render, metrics_gzip=fresh_gzip, health=exposition.health)
    port = http.start()
    samples = _samples(page.decode())
    written = {"port": port, "page_write_cpu_seconds": write, "page_gzip_cpu_seconds": packing}
    print(json.dumps({**written, "samples": samples, "gzip_bytes": len(gzip_bytes(page))}), flush=True)
    sys.stdin.read()
    http.stop()


# A DGX H100's host: 2 x 56-core Xeon 8480C with SMT, 8 ConnectX-7 InfiniBand ports for the
# GPUs, NICs and NVMe drives (the boot pair and the data cache).
DGX_CPUS, DGX_IB_PORTS, DGX_NICS, DGX_DISKS = 224, 8, 10, 10


def _grow_to_dgx_host(report: Any) -> None:
    """This host's sample grown to a DGX H100's: each CPU, NIC and disk copied with new names, and
    InfiniBand ports with every counter node_exporter reads."""
    from nodeagent.core.exposition.node import _IB_COUNTERS

    host = report.host
    cpus = list(host.cpus)
    for index in range(len(cpus), DGX_CPUS):
        host.cpus.add().CopyFrom(cpus[index % len(cpus)])
        host.cpus[-1].cpu = str(index)
        host.cpus[-1].user_seconds_total += index * 1.37
    for field, count in ((report.nics, DGX_NICS), (report.disks, DGX_DISKS)):
        have = list(field)
        for index in range(len(have), count):
            field.add().CopyFrom(have[index % len(have)])
            field[-1].name = f"{have[index % len(have)].name}x{index}"
    for index in range(DGX_IB_PORTS):
        port = report.rdma_ports.add(device=f"mlx5_{index}", port=1, state_id=4, phys_state_id=5,
                                     rate_bytes_per_second=50e9, rx_bytes_total=4 * 10**12 + index)  # fmt: skip
        for _, counter, _, _ in _IB_COUNTERS:
            port.counters[counter] = 10**9 + 7 * index


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
