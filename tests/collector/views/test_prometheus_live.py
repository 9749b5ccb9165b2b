"""nodeagent with Prometheus's own tools: promtool on the endpoints and the shipped files, and a
real Prometheus (Debian's) scraping a collector that ingests a starved and a healthy simulated node.

One fleet for the module: a collector, an ordinary-cloud node (starved for the network within
seconds at 20x simulated time) whose agent also serves its own /metrics, a fast-cloud node
(busy), and one refused stream (so the reject counter has a sample).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.conftest import require
from tests.fakes.fleet import Agent, Collector, free_port, processes, wait_for
from tests.fakes.trees import REPO
from tests.promtool_lint import promtool_problems

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

SHIPPED = REPO / "packaging" / "prometheus"
STARVED, HEALTHY = "sim-ordinary-cloud", "sim-fast-cloud"


@dataclass
class Fleet:
    collector: Collector
    agent_metrics: str  # HOST:PORT of the starved node's agent /metrics


# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("prometheus_live")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    _require_tools()
    tmp = tmp_path_factory.mktemp("prometheus-fleet")
    collector = Collector(workers=ONE_PROCESS, db=tmp / "c.db", port=free_port())
    agent_port = free_port()
    with processes() as started:
        started.append(collector.start())
        for node, scenario, extra in (
            # --metrics-nvlink (off by default): every family docs/metrics.md lists is served.
            (STARVED, "ordinary-cloud", ["--metrics-listen", f"127.0.0.1:{agent_port}", "--metrics-nvlink"]),
            (HEALTHY, "fast-cloud", []),
        ):
            agent = Agent(
                ["--collector", collector.address, "--node-id", node, "--simulate", scenario, "--time-scale", "20",
                 "--interval", "0.05", "--deadline", "300", *extra]
            ).start(tmp / f"{node}.log")  # fmt: skip
            started.append(agent)
        _refuse_one_stream(collector.address)

        def settled() -> bool:
            states = {
                s.labels["node"]: s.labels["state"] for s in _samples(collector.metrics(), "nodeagent_node_state")
            }
            return states == {STARVED: "starved", HEALTHY: "busy"}

        assert wait_for(settled, 40, interval=0.5), collector.metrics()[-3000:]
        yield Fleet(collector, f"127.0.0.1:{agent_port}")


def test_promtool_accepts_the_collectors_metrics(fleet: Fleet) -> None:
    text = fleet.collector.metrics()
    assert _promtool("check", "metrics", stdin=text) == ""


def test_promtool_accepts_the_agents_metrics(fleet: Fleet) -> None:
    text = _get(f"http://{fleet.agent_metrics}/metrics")
    assert _samples(text, "nodeagent_agent_reports_total")[0].value > 0
    # Nothing but the naming lints dcgm-exporter's and node_exporter's own pages draw.
    assert promtool_problems(text) == set()


def test_promtool_accepts_the_shipped_config_and_rules_and_their_unit_tests() -> None:
    _require_tools()
    config = _promtool("check", "config", str(SHIPPED / "prometheus.yml"))
    assert "SUCCESS" in config
    assert "SUCCESS: 22 rules found" in _promtool("check", "rules", str(SHIPPED / "rules.yml"))
    assert "SUCCESS" in _promtool("test", "rules", str(SHIPPED / "rules_test.yml"))


def test_dashboard_and_rules_query_only_metrics_that_exist(fleet: Fleet) -> None:
    scraped = _sample_names(fleet.collector.metrics()) | _sample_names(_get(f"http://{fleet.agent_metrics}/metrics"))
    rules = yaml.safe_load((SHIPPED / "rules.yml").read_text())
    recorded = {rule["record"] for group in rules["groups"] for rule in group["rules"] if "record" in rule}
    rule_exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((SHIPPED / "grafana-dashboard.json").read_text())
    dashboard_exprs = list(_dashboard_exprs(dashboard))
    assert len(dashboard_exprs) > 30
    used = {name for expr in rule_exprs + dashboard_exprs for name in _metric_names(expr)}
    raw = {name for name in used if ":" not in name}
    assert len(raw) > 25
    assert raw - scraped == set(), "queried but not in a scrape of a collector and an agent"
    assert {name for name in used if ":" in name} - recorded == set(), "recording rules that rules.yml lacks"
    # Every recording rule is on the dashboard.
    assert recorded - used == set()


def test_every_metric_the_docs_list_is_served(fleet: Fleet, tmp_path: Path) -> None:
    listed = set(re.findall(r"`(nodeagent_[a-z0-9_]+)`", (REPO / "docs" / "metrics.md").read_text()))
    # A metric any other page names is one docs/metrics.md lists too.
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    named = {name for page in pages for name in re.findall(r"`(nodeagent_[a-z0-9_]+)`", page.read_text())}
    served = _help_names(fleet.collector.metrics()) | _help_names(_get(f"http://{fleet.agent_metrics}/metrics"))
    # The agent leaves out a family with no sample, as the Go exporters do; the simulated nodes have
    # no per-link NVLink counters and no RDMA port: those families come from a node that has them.
    served |= _help_names(_agent_page_with_links_and_ports())
    # The front's own families: a serve --workers 2 (the fleet's collector above is one process).
    from tests.collector.workers.front_process import running_front

    with running_front(tmp_path) as front:
        served |= _help_names(_get(f"http://{front.http}/metrics"))
    assert len(listed) > 40
    assert listed - served == set()
    assert named - listed == set(), "named in the docs but not listed in docs/metrics.md"


def test_prometheus_scrapes_the_collector_and_a_rule_finds_the_starved_node(fleet: Fleet, tmp_path: Path) -> None:
    port = free_port()
    shutil.copy(SHIPPED / "rules.yml", tmp_path / "rules.yml")
    config = yaml.safe_load((SHIPPED / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["nodeagent-collector"].update(
        scrape_interval="1s", scrape_timeout="1s", static_configs=[{"targets": [fleet.collector.http_address]}]
    )
    agent_job = jobs["nodeagent-agent"]
    agent_job.pop("file_sd_configs")
    agent_job.update(scrape_interval="1s", scrape_timeout="1s", static_configs=[{"targets": [fleet.agent_metrics]}])
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    command = [
        "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with (tmp_path / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        starved = _query_until(base, "node:nodeagent_gpus_starved:count", 40, proc, tmp_path)
        alerts = _query_until(base, 'ALERTS{alertname="NodeagentGPUDataStarved"}', 20, proc, tmp_path)
        # Each target's first scrape comes at its own offset within the interval: wait for both.
        _query_until(base, 'up{job="nodeagent-agent"}', 20, proc, tmp_path)
        up = _query(base, "up")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [(r["metric"]["node"], r["metric"]["cause"], r["value"][1]) for r in starved] == [(STARVED, "network", "8")]
    assert {r["metric"]["node"] for r in alerts} == {STARVED}
    assert {r["metric"]["severity"] for r in alerts} == {"critical"}  # tier high
    assert {r["metric"]["job"]: r["value"][1] for r in up} == {"nodeagent-collector": "1", "nodeagent-agent": "1"}


# ---- helpers ----


def _require_tools() -> None:
    missing = [tool for tool in ("promtool", "prometheus") if shutil.which(tool) is None]
    require(not missing, f"needs {', '.join(missing)} (Debian package prometheus; `make system-deps`)")


def _promtool(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _refuse_one_stream(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b)
        with pytest.raises(grpc.RpcError):
            list(call(iter([frame_report(b"")]), timeout=10))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _samples(text: str, name: str) -> list[Any]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]


def _sample_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def _agent_page_with_links_and_ports() -> str:
    """The agent's page after two reports of a GPU with an NVLink, a fabric, a process's share and a
    suspect reading, an RDMA port and a NIC whose speed is known (every kind of device its families
    describe)."""
    telemetry = AgentTelemetry("links-and-ports", 1.0)
    for t in range(2):
        report = pb.NodeReport(time_unix_seconds=1000.0 + t)
        if t == 0:
            report.info.gpu.gpus.add(index=0, uuid="GPU-0", name="NVIDIA H100", pci_bus_id="00000000:01:00.0")
            report.info.rdma_ports.add(device="mlx5_0", port=1, rate_bytes_per_second=50e9)
        gpu = report.gpus.add(index=0, uuid="GPU-0")
        gpu.nvlinks.add(
            link=0, active=True, rx_bytes_total=t, tx_bytes_total=t, replay_errors_total=0,
            recovery_errors_total=0, crc_flit_errors_total=0, crc_data_errors_total=0,
        )  # fmt: skip
        # Fabric-attached, shared by a process with its SM share, and one reading held suspect.
        gpu.fabric.state, gpu.fabric.cluster_uuid, gpu.fabric.clique_id = "completed", "c-1", 1
        gpu.processes.add(pid=4242, name="python", sm_utilization_ratio=0.5, memory_utilization_ratio=0.25)
        gpu.suspect_fields.append("sm_active_ratio")
        # Read whole at every tick: its answer families (unresponsive, samples taken of expected).
        gpu.samples_taken_total = gpu.samples_expected_total = t + 1
        report.rdma_ports.add(device="mlx5_0", port=1, rx_bytes_total=10 * t, tx_bytes_total=10 * t)
        report.nics.add(name="eth0", rx_bytes_total=5 * t, tx_bytes_total=5 * t, speed_bytes_per_second=1e9)
        telemetry.publish(report)

    class NoSender:
        connected_to = None
        reconnects_total = 0
        reports_resent_total = 0

    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    metrics = AgentMetrics(telemetry, spool, NoSender(), ("127.0.0.1:1",))  # type: ignore[arg-type]
    return AgentExposition(metrics).render().decode()


def _help_names(text: str) -> set[str]:
    """Every family on the page, by the name its HELP line gives (counters with ``_total``)."""
    return set(re.findall(r"^# HELP (\S+) ", text, re.MULTILINE))


def _dashboard_exprs(node: object) -> Iterator[str]:
    """Every PromQL expression in the dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _metric_names(expr: str) -> set[str]:
    """Metric and recording-rule names in an expression: ours start with nodeagent_ or hold a colon."""
    bare = _STRINGS.sub('""', expr)
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # range selectors: [5m]
    return {name for name in _IDENTIFIER.findall(bare) if name.startswith("nodeagent_") or ":" in name.strip(":")}


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    body = json.loads(_get(url))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _query_until(
    base: str, expr: str, timeout: float, proc: subprocess.Popen[bytes], tmp: Path
) -> list[dict[str, Any]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
        try:
            result = _query(base, expr)
        except OSError:
            result = []  # not listening yet
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{expr} stayed empty: {(tmp / 'prometheus.log').read_text()[-3000:]}")
