"""The agent's /metrics families on their own: what the fake NVML gives becomes a sample, what it
does not give has none (never a made-up zero), the groups can be turned off, the highways are a
share of link speed, and the listener's flags (default port, TLS, loopback rule) hold."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.cli.run import _check_metrics_listen, _metrics_listen, run
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.certs import Authority
from tests.fakes.fleet import free_port
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4, h100_sxm5
from tests.fakes.trees import REPO

Values = dict[tuple[str, int], float]  # (family, gpu) -> value


def _exposition(
    telemetry: AgentTelemetry, groups: tuple[str, ...] = ("gpu", "nvlink", "node", "agent")
) -> AgentExposition:
    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    return AgentExposition(AgentMetrics(telemetry, spool, sender=_NoSender(), targets=()), groups)  # type: ignore[arg-type]


class _NoSender:
    connected_to = None
    reconnects_total = 0
    reports_resent_total = 0


def _gpu_values(text: str) -> Values:
    return {
        (s.name, int(s.labels["gpu"])): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("DCGM_") and "gpu" in s.labels
    }


@pytest.fixture
def sample_gpus(fake_nvml: FakeNvml, make_gpu_source: type[GpuSource]) -> object:
    """Two ticks of the GPU source on a state, published; returns the page's text."""

    def run(state: object, ticks: int = 2) -> str:
        fake_nvml.load(state)  # type: ignore[arg-type]
        gpu_source = make_gpu_source()
        info = pb.NodeInfo(hostname="gpu-node-1")
        gpu_source.scan(info)
        telemetry = AgentTelemetry("gpu-node-1", 1.0)
        for t in range(ticks):
            fake_nvml.state.advance(1.0)  # type: ignore[union-attr]
            fake_nvml.write()
            report = pb.NodeReport(time_unix_seconds=1000.0 + t)
            if t == 0:
                report.info.CopyFrom(info)
            gpu_source.collect(report)
            telemetry.publish(report)
        return _exposition(telemetry).render().decode()

    return run


def test_a_gpu_without_gpm_has_no_profiling_samples_and_keeps_the_rest(sample_gpus) -> None:
    values = _gpu_values(sample_gpus(a100_sxm4()))
    assert {gpu for name, gpu in values if name == "DCGM_FI_DEV_GPU_TEMP"} == set(range(8))
    assert not any(name.startswith("DCGM_FI_PROF_") for name, _ in values), "A100 has no GPM: no PROF_* values"


def test_a_field_the_gpu_refuses_has_no_sample_for_that_gpu_only(sample_gpus) -> None:
    state = h100_sxm5()
    state.gpus[5].unsupported_fields.add(82)  # NVML_FI_DEV_MEMORY_TEMP
    state.gpus[6].unsupported.add("nvmlDeviceGetEncoderUtilization")
    values = _gpu_values(sample_gpus(state))
    assert {gpu for name, gpu in values if name == "DCGM_FI_DEV_MEMORY_TEMP"} == set(range(8)) - {5}
    assert {gpu for name, gpu in values if name == "DCGM_FI_DEV_ENC_UTIL"} == set(range(8)) - {6}
    assert values[("DCGM_FI_PROF_SM_ACTIVE", 0)] == 0.0  # measured by GPM: a real zero


def test_a_lost_gpu_has_no_samples(sample_gpus) -> None:
    state = h100_sxm5()
    state.gpus[2].lost = 1
    values = _gpu_values(sample_gpus(state))
    assert {gpu for _, gpu in values} == set(range(8)) - {2}


def test_counters_keep_dcgm_exporters_names_in_help_and_type() -> None:
    telemetry = AgentTelemetry("n", 1.0)
    report = pb.NodeReport(time_unix_seconds=1.0)
    report.info.gpu.gpus.add(index=0, uuid="GPU-x", name="NVIDIA H100", pci_bus_id="00000000:07:00.0")
    report.gpus.add(index=0, uuid="GPU-x", pcie_replay_total=3)
    telemetry.publish(report)
    text = _exposition(telemetry, ("gpu",)).render().decode()
    assert "# HELP DCGM_FI_DEV_PCIE_REPLAY_COUNTER Total number of PCIe retries.\n" in text
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n" in text
    assert not [line for line in text.splitlines() if line.startswith("# TYPE DCGM_") and "_total" in line]
    assert 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{DCGM_FI_DRIVER_VERSION=""' in text


def test_each_family_group_can_be_turned_off() -> None:
    telemetry = AgentTelemetry("n", 1.0)
    report = pb.NodeReport(time_unix_seconds=1.0)
    report.info.gpu.gpus.add(index=0, uuid="GPU-x")
    gpu = report.gpus.add(index=0, uuid="GPU-x", temperature_celsius=40)
    gpu.nvlinks.add(link=0, active=True, rx_bytes_total=5)
    report.nics.add(name="eth0", rx_bytes_total=10)
    telemetry.publish(report)

    def names(groups: tuple[str, ...]) -> set[str]:
        return {
            f.name.split("_")[0]
            for f in text_string_to_metric_families(_exposition(telemetry, groups).render().decode())
        }

    assert names(("gpu", "nvlink", "node", "agent")) == {"DCGM", "node", "nodeagent", "process"}
    assert names(("gpu",)) == {"DCGM"}
    assert names(("nvlink",)) == {"nodeagent"}  # nodeagent_gpu_nvlink_*
    assert names(("node",)) == {"node"}
    assert names(("agent",)) == {"nodeagent", "process"}
    with pytest.raises(ValueError, match="unknown metric family group 'disk'"):
        _exposition(telemetry, ("disk",))


def test_highways_are_the_last_ticks_rate_over_link_speed() -> None:
    telemetry = AgentTelemetry("n", 1.0)
    for t, rx in ((100.0, 0), (102.0, 2_500_000_000)):  # 1.25 GB/s for 2 s
        report = pb.NodeReport(time_unix_seconds=t)
        report.nics.add(name="eth0", rx_bytes_total=rx, tx_bytes_total=0, speed_bytes_per_second=6.25e9)
        report.nics.add(name="eth1", rx_bytes_total=rx)  # no known speed: no ratio
        port = report.rdma_ports.add(device="mlx5_0", port=1, rate_bytes_per_second=2.5e10)
        port.rx_bytes_total = rx * 10
        telemetry.publish(report)
    samples = {
        (s.name, tuple(sorted(s.labels.values()))): s.value
        for f in text_string_to_metric_families(_exposition(telemetry, ("agent",)).render().decode())
        for s in f.samples
    }
    assert samples[("nodeagent_network_receive_link_ratio", ("eth0",))] == pytest.approx(0.2)
    assert samples[("nodeagent_network_transmit_link_ratio", ("eth0",))] == 0.0
    assert ("nodeagent_network_receive_link_ratio", ("eth1",)) not in samples
    assert samples[("nodeagent_infiniband_receive_link_ratio", ("1", "mlx5_0"))] == pytest.approx(0.5)


def test_xid_errors_keep_the_last_xid_of_each_gpu() -> None:
    telemetry = AgentTelemetry("n", 1.0)
    for t, xid in ((1.0, "13"), (2.0, "79"), (3.0, None)):
        report = pb.NodeReport(time_unix_seconds=t)
        report.info.gpu.gpus.add(index=4, uuid="GPU-4")
        report.gpus.add(index=4, uuid="GPU-4")
        if xid is not None:
            report.events.add(kind="xid", subject="gpu:4", attributes={"xid": xid})
        telemetry.publish(report)
    assert _gpu_values(_exposition(telemetry, ("gpu",)).render().decode())[("DCGM_FI_DEV_XID_ERRORS", 4)] == 79


def test_per_link_nvlink_is_off_by_default_and_every_other_group_on() -> None:
    """dcgm-exporter gives no per-link families by default, and they are three quarters of an
    8-GPU page and of its scrape's CPU (bench/agent_metrics_scrape.py)."""
    defaults = {param.name: param.default for param in run.params}
    assert defaults["metrics_nvlink"] is False
    assert all(defaults[f"metrics_{group}"] is True for group in ("gpu", "node", "agent"))


def test_metrics_listen_takes_a_bare_host_for_dcgm_exporters_port() -> None:
    assert _metrics_listen(None, None, "127.0.0.1") == "127.0.0.1:9400"  # type: ignore[arg-type]
    assert _metrics_listen(None, None, "[::1]") == "[::1]:9400"  # type: ignore[arg-type]
    assert _metrics_listen(None, None, "127.0.0.1:19400") == "127.0.0.1:19400"  # type: ignore[arg-type]


def test_tls_lets_metrics_off_loopback_and_plain_http_needs_the_insecure_flag() -> None:
    _check_metrics_listen("10.0.0.5:9400", insecure=False, tls=True)
    _check_metrics_listen("10.0.0.5:9400", insecure=True)
    with pytest.raises(ValueError, match="without --metrics-insecure"):
        _check_metrics_listen("10.0.0.5:9400", insecure=False)


def test_run_serves_metrics_over_https_with_its_certificate(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "metrics")
    pem = ca.issue("node", ips=("127.0.0.1",), server=True)
    port = free_port()
    command = [
        sys.executable, "-m", "nodeagent.agent", "run", "--collector", f"127.0.0.1:{free_port()}", "--no-collector.gpu",
        "--interval", "0.2", "--deadline", "30", "--metrics-listen", f"127.0.0.1:{port}",
        "--metrics-tls-cert", str(pem.cert), "--metrics-tls-key", str(pem.key), "--no-metrics-agent",
    ]  # fmt: skip
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    try:
        deadline, text = time.monotonic() + 20, ""
        while "node_cpu_seconds_total" not in text:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, text[-2000:]
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=5, context=context) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert "nodeagent_agent_reports_total" not in text  # --no-metrics-agent
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--metrics-listen", "127.0.0.1:0", "--metrics-tls-cert", "/x.pem"], "go together"),
        (["--metrics-listen", "127.0.0.1:0", "--metrics-tls-cert", "/x.pem", "--metrics-tls-key", "/y"], "/x.pem"),
        (["--metrics-listen", "nope:port"], "is not HOST:PORT"),
    ],
)
def test_bad_metrics_flags_stop_start_up_in_one_line(args: list[str], needle: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "run", "--collector", "127.0.0.1:1", *args],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
