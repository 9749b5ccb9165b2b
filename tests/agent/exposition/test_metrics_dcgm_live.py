"""A real Prometheus (Debian's) scrapes an agent that runs on the fake NVML and a fixture host tree,
and gets dcgm-exporter's GPU families with the values the fake was set to and dcgm-exporter's
labels, node_exporter's host families, and data for every panel of the shipped per-node GPU
dashboard and its recording rules.

The node: 8 fake H100 SXM5 (Hopper, GPM), NVLink on GPU 0 only, a Slurm job on GPU 2 and an XID
on GPU 3; the host is node_exporter's fixture tree with prometheus/procfs's ``net/dev``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.core.exposition.dcgm import GPU_FAMILIES, XID_FAMILY
from tests.conftest import require
from tests.fakes.fleet import free_port
from tests.fakes.kubelet import FakeKubelet, serving
from tests.fakes.nvml.plugin import STATE_ENV
from tests.fakes.nvml.state import GIB, FakeNvmlState, LinkState, h100_sxm5
from tests.fakes.trees import REPO, materialize
from tests.promtool_lint import promtool_problems

SHIPPED = REPO / "packaging" / "prometheus"
MIB = 1024 * 1024
SLURM_PID, SLURM_JOB, SLURM_GPU = 4242, "777", 2
XID_GPU, XID = 3, 79
POD_GPU = 5  # allocated by the fake kubelet to POD
POD = {"pod": "train-0", "namespace": "ml", "container": "trainer"}
GPUS = 8


def _state() -> FakeNvmlState:
    state = h100_sxm5(GPUS)
    state.clock = None  # the agent samples on its own: the fake's GPM runs on its monotonic clock
    for i, g in enumerate(state.gpus):
        g.temp, g.mem_temp = 41 + i, 50 + i
        g.power_mw = 200_000 + 1_500 * i
        g.energy_mj = 10**9 + i
        g.sm_clock, g.mem_clock = 1980 - i, 2619
        g.util_gpu, g.util_mem, g.util_enc, g.util_dec = 10 + 10 * i, 5 + i, i, 2 * i
        g.mem_used, g.mem_reserved = (1024 + 100 * i) * MIB, 512 * MIB
        g.pcie_replay = i
        g.pcie_tx_bytes, g.pcie_rx_bytes = 10**12 + 4096 * i, 2 * 10**12 + 1024 * i + 100
        g.remap_cor, g.remap_unc, g.remap_failure = i, i % 2, int(i == 7)
        g.gpm_sm_active, g.gpm_sm_occupancy, g.gpm_tensor = 20 + i, 30 + i, 40 + i
        g.gpm_gr_active, g.gpm_dram = 50 + i, 60 + i
        g.links = [LinkState(tx_kib=1000 * (n + 1), rx_kib=2000 * (n + 1)) for n in range(18)] if i == 0 else []
    state.gpus[SLURM_GPU].procs = {SLURM_PID: 3 * GIB}
    return state


def _free_mib(g: Any) -> float:
    return float((g.mem_total - g.mem_used - g.mem_reserved) // MIB)


# Family -> the value each GPU must show, from the fake's state (None: no sample for that GPU).
Expected = Callable[[int, Any], float | None]
EXPECTED: dict[str, Expected] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda i, g: g.sm_clock,
    "DCGM_FI_DEV_MEM_CLOCK": lambda i, g: g.mem_clock,
    "DCGM_FI_DEV_MEMORY_TEMP": lambda i, g: g.mem_temp,
    "DCGM_FI_DEV_GPU_TEMP": lambda i, g: g.temp,
    "DCGM_FI_DEV_POWER_USAGE": lambda i, g: g.power_mw / 1000,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda i, g: g.energy_mj,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": lambda i, g: g.pcie_tx_bytes // 1024,
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": lambda i, g: g.pcie_rx_bytes // 1024,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda i, g: g.pcie_replay,
    "DCGM_FI_DEV_GPU_UTIL": lambda i, g: g.util_gpu,
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda i, g: g.util_mem,
    "DCGM_FI_DEV_ENC_UTIL": lambda i, g: g.util_enc,
    "DCGM_FI_DEV_DEC_UTIL": lambda i, g: g.util_dec,
    "DCGM_FI_DEV_FB_FREE": lambda i, g: _free_mib(g),
    "DCGM_FI_DEV_FB_USED": lambda i, g: g.mem_used // MIB,
    "DCGM_FI_DEV_FB_RESERVED": lambda i, g: g.mem_reserved // MIB,
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": lambda i, g: (
        sum((link.tx_kib + link.rx_kib) * 1024 for link in g.links) if g.links else None
    ),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda i, g: g.remap_unc,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda i, g: g.remap_cor,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda i, g: g.remap_failure,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda i, g: g.gpm_gr_active / 100,
    "DCGM_FI_PROF_SM_ACTIVE": lambda i, g: g.gpm_sm_active / 100,
    "DCGM_FI_PROF_SM_OCCUPANCY": lambda i, g: g.gpm_sm_occupancy / 100,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda i, g: g.gpm_tensor / 100,
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda i, g: g.gpm_dram / 100,
    # The fake's counters stand still: GPM measures no traffic.
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda i, g: 0,
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda i, g: 0,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": lambda i, g: 0,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": lambda i, g: 0,
    XID_FAMILY: lambda i, g: XID if i == XID_GPU else 0,
}


@dataclass
class Scraped:
    base: str  # Prometheus's HTTP API
    state: FakeNvmlState
    agent_text: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        return _query(self.base, expr)


# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("metrics_dcgm_live")


@pytest.fixture(scope="module")
def scraped(fake_nvml_dir: Path, shared_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    missing = [tool for tool in ("prometheus", "promtool") if shutil.which(tool) is None]
    require(not missing, f"needs {', '.join(missing)} (Debian package prometheus; `make system-deps`)")
    tmp = tmp_path_factory.mktemp("dcgm-live")
    tree = materialize(shared_fixtures / "node_exporter", tmp / "tree")
    (tree / "proc" / "net").mkdir(exist_ok=True)
    shutil.copy(shared_fixtures / "procfs" / "proc" / "net" / "dev", tree / "proc" / "net" / "dev")
    job = tree / "proc" / str(SLURM_PID)
    job.mkdir()
    (job / "comm").write_text("python\n")
    (job / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\n")
    (job / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{SLURM_JOB}/step_0/user/task_0\n")
    state = _state()
    state_path = tmp / "nvml.state"
    state.write(state_path)
    kubelet = FakeKubelet()
    kubelet.allocate(POD["pod"], POD["namespace"], POD["container"], "nvidia.com/gpu", state.gpus[POD_GPU].uuid)
    stack = contextlib.ExitStack()
    socket = stack.enter_context(serving(kubelet, tmp / "kubelet.sock"))
    agent_port, prom_port = free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LD_LIBRARY_PATH": str(fake_nvml_dir), STATE_ENV: str(state_path)}
    agent_cmd = [
        sys.executable, "-m", "nodeagent.agent", "run", "--collector", f"127.0.0.1:{free_port()}",
        "--node-id", "gpu-node-1",
        "--interval", "0.5", "--deadline", "240", "--procfs", str(tree / "proc"), "--sysfs", str(tree / "sys"),
        "--metrics-listen", f"127.0.0.1:{agent_port}", "--pod-resources-socket", str(socket),
        "--metrics-nvlink",  # off by default; the dashboard's per-link panel needs it
    ]  # fmt: skip
    rules = tmp / "gpu-node-rules.yml"
    shutil.copy(SHIPPED / "gpu-node-rules.yml", rules)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "dcgm-exporter", "scrape_interval": "1s", "scrape_timeout": "1s",
             "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]},
        ],
    }  # fmt: skip
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom_cmd = [
        "prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn",
    ]  # fmt: skip
    with (tmp / "agent.log").open("w") as agent_log, (tmp / "prometheus.log").open("w") as prom_log:
        agent = subprocess.Popen(agent_cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=agent_log)
        prom = subprocess.Popen(prom_cmd, stdout=prom_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{prom_port}"
    try:
        # NVML reports an XID only to an event set registered before it: inject it once the agent
        # serves its first GPU sample.
        _wait(lambda: "DCGM_FI_DEV_GPU_TEMP{" in _get(f"http://127.0.0.1:{agent_port}/metrics"), agent, tmp)
        state.inject_xid(XID_GPU, XID)
        state.write(state_path)
        # GPM needs two samples of the GPU, the rates two scrapes, the rules an evaluation.
        _wait(lambda: bool(_query(base, f'DCGM_FI_DEV_XID_ERRORS{{gpu="{XID_GPU}"}} == {XID}')), agent, tmp)
        _wait(lambda: len(_query(base, "DCGM_FI_PROF_SM_ACTIVE")) == GPUS, agent, tmp)
        _wait(lambda: bool(_query(base, "instance:gpu_power_watts:sum")), prom, tmp)
        text = _get(f"http://127.0.0.1:{agent_port}/metrics")
        yield Scraped(base, state, text)
    finally:
        for proc in (prom, agent):
            proc.terminate()
        for proc in (prom, agent):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        stack.close()


def test_every_gpu_family_has_one_series_per_gpu_with_the_fakes_value(scraped: Scraped) -> None:
    assert set(EXPECTED) == {name for name, *_ in GPU_FAMILIES} | {XID_FAMILY}
    for family, expected in EXPECTED.items():
        series = {int(r["metric"]["gpu"]): float(r["value"][1]) for r in scraped.query(family)}
        want = {i: float(v) for i, g in enumerate(scraped.state.gpus) if (v := expected(i, g)) is not None}
        assert series.keys() == want.keys(), family
        for gpu, value in want.items():
            assert series[gpu] == pytest.approx(value, abs=1e-6), f"{family} gpu {gpu}"


def test_series_carry_dcgm_exporters_labels_and_the_job(scraped: Scraped) -> None:
    result = scraped.query("DCGM_FI_DEV_GPU_TEMP")
    assert len(result) == GPUS
    for r in result:
        labels = r["metric"]
        i = int(labels["gpu"])
        g = scraped.state.gpus[i]
        assert labels["UUID"] == g.uuid
        assert labels["pci_bus_id"] == g.bus_id
        assert labels["device"] == f"nvidia{i}"
        assert labels["modelName"] == g.name
        assert labels["Hostname"] == platform.node()
        assert labels["DCGM_FI_DRIVER_VERSION"] == scraped.state.driver
        assert labels.get("hpc_job") == (SLURM_JOB if i == SLURM_GPU else None)
        # The kubelet's pod of the GPU, under dcgm-exporter's label names.
        assert {k: labels[k] for k in POD if k in labels} == (POD if i == POD_GPU else {})


def test_per_link_nvlink_families_name_the_link(scraped: Scraped) -> None:
    rx = scraped.query("nodeagent_gpu_nvlink_receive_bytes_total")
    links = {(r["metric"]["gpu"], r["metric"]["link"]): float(r["value"][1]) for r in rx}
    gpu0 = scraped.state.gpus[0]
    assert links == {("0", str(n)): link.rx_kib * 1024 for n, link in enumerate(gpu0.links)}
    errors = scraped.query("nodeagent_gpu_nvlink_replay_errors_total")
    assert len(errors) == len(gpu0.links)


def test_host_families_reach_prometheus(scraped: Scraped) -> None:
    [eth0] = scraped.query('node_network_receive_bytes_total{device="eth0"}')
    assert float(eth0["value"][1]) == 874354587
    [ib] = scraped.query('node_infiniband_port_data_received_bytes_total{device="mlx4_0",port="1"}')
    assert float(ib["value"][1]) == 18527668
    assert len(scraped.query('node_cpu_seconds_total{mode="idle"}')) == 8


def test_promtool_finds_nothing_but_the_exporters_own_names(scraped: Scraped) -> None:
    """See tests/promtool_lint.py: dcgm-exporter's and node_exporter's names draw naming lints on
    their own pages too; nothing else may."""
    assert promtool_problems(scraped.agent_text) == set()
    for name, kind, *_ in GPU_FAMILIES:
        if kind == "counter":
            assert f"# TYPE {name} counter\n" in scraped.agent_text


# ---- the shipped per-node GPU dashboard ----

# Every panel of grafana-gpu-node.json, by title: the test's own list, so a panel added without
# data to show (or renamed) fails here.
PANELS = {
    "GPU utilization", "SM activity", "Tensor pipe activity", "DRAM activity", "Framebuffer used",
    "Power draw", "Node power", "GPU temperature", "Memory temperature", "SM clock", "PCIe throughput",
    "NVLink throughput", "NVLink bytes per link", "Energy per hour", "XID errors", "Remapped rows",
    "Network receive", "Network receive vs link speed", "InfiniBand receive", "Disk reads",
    "IO pressure", "CPU busy", "Agent collectors",
}  # fmt: skip


def test_every_panel_of_the_gpu_node_dashboard_gets_data(scraped: Scraped) -> None:
    dashboard = json.loads((SHIPPED / "grafana-gpu-node.json").read_text())
    panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
    assert {p["title"] for p in panels} == PANELS
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"].replace("$instance", ".*").replace("$gpu", ".*").replace("$__rate_interval", "5s")
            assert _query_until(scraped.base, expr, 30), f"panel {panel['title']!r}: {expr} has no data"


def test_recording_rules_are_on_the_dashboard_and_check_clean() -> None:
    require(shutil.which("promtool") is not None, "needs promtool (Debian package prometheus)")
    command = ["promtool", "check", "rules", str(SHIPPED / "gpu-node-rules.yml")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rules = yaml.safe_load((SHIPPED / "gpu-node-rules.yml").read_text())
    recorded = {rule["record"] for group in rules["groups"] for rule in group["rules"]}
    text = (SHIPPED / "grafana-gpu-node.json").read_text()
    assert recorded and all(name in text for name in recorded)


# ---- helpers ----


def _wait(ready: Callable[[], bool], proc: subprocess.Popen[bytes], tmp: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "\n".join(p.read_text()[-3000:] for p in tmp.glob("*.log"))
        try:
            if ready():
                return
        except OSError:
            pass  # not listening yet
        assert time.monotonic() < deadline, "\n".join(p.read_text()[-3000:] for p in tmp.glob("*.log"))
        time.sleep(0.5)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    body = json.loads(_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _query_until(base: str, expr: str, timeout: float) -> list[dict[str, Any]]:
    end = time.monotonic() + timeout
    while True:
        result = _query(base, expr)
        if result or time.monotonic() > end:
            return result
        time.sleep(0.5)
