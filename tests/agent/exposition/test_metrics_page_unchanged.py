"""The page writer's shortcuts (HELP/TYPE lines written once, one join per page, a float's repr
without a detour, each GPU's label text kept by its label set, a GPU family's value read without
HasField unless it is zero, in the text its schema type and unit pick) leave every byte of the page
as the plain way writes it: a full 8-GPU page with every group, written both ways, is the same."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

import pytest

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition import page as agent_metrics
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.exposition import dcgm, node
from nodeagent.core.exposition import text as metrics_text
from nodeagent.core.exposition.text import TextFamily, label_text, number
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import h100_sxm5


def _plain_number(value: float) -> str:
    """How a value was written before: an int's digits, else through float() and isfinite."""
    if type(value) is int:
        return str(value)
    value = float(value)
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def _plain_gpu_value(gpu: pb.GpuSample, source: str | dcgm.Getter, unit: str) -> float | None:
    """A GPU family's value the plain way: HasField, the value, its unit's arithmetic."""
    if not isinstance(source, str):
        return source(gpu)
    if not gpu.HasField(source):
        return None
    value = getattr(gpu, source)
    if unit == dcgm.PERCENT:
        return round(value * 100.0, 9)  # NVML's whole percent back from the ratio
    return value if unit == dcgm.AS_IS else value // (2**20 if unit == dcgm.MIB else 2**10)


def _plain_dcgm_families(report: pb.NodeReport, labels_by_gpu: Mapping[int, dict[str, str]],
                         last_xid: Mapping[int, int], pods: Mapping[str, Mapping[str, str]] | None = None,
                         ) -> Iterator[TextFamily]:  # fmt: skip
    live = [g for g in report.gpus if g.index in labels_by_gpu and not g.lost]
    texts = {g.index: label_text(dcgm.gpu_series_labels(g, labels_by_gpu, pods or {})) for g in live}
    for name, kind, doc, source, unit in dcgm.GPU_FAMILIES:
        family = TextFamily(name, kind, doc)
        for gpu in live:
            value = _plain_gpu_value(gpu, source, unit)
            if value is not None:
                family.lines.append(f"{name}{{{texts[gpu.index]}}} {_plain_number(value)}\n")
        yield family
    xid = TextFamily(dcgm.XID_FAMILY, "gauge", "Value of the last XID error encountered.")
    xid.lines.extend(f"{dcgm.XID_FAMILY}{{{texts[g.index]}}} {last_xid.get(g.index, 0)}\n" for g in live)
    yield xid


def _plain_nvlink_families(report: pb.NodeReport, labels_by_gpu: Mapping[int, dict[str, str]],
                           pods: Mapping[str, Mapping[str, str]] | None = None) -> Iterator[TextFamily]:  # fmt: skip
    """Per link, HasField and the value, each link's labels sorted anew."""
    kinds = [("receive_bytes_total", "rx_bytes_total"), ("transmit_bytes_total", "tx_bytes_total"), ("up", "active")]
    kinds += [(f"{kind}_errors_total", field) for kind, field, _ in dcgm._LINK_ERRORS]
    live = [g for g in report.gpus if g.index in labels_by_gpu and not g.lost and g.nvlinks]
    for suffix, field in kinds:
        name = f"nodeagent_gpu_nvlink_{suffix}"
        family = TextFamily(name, "gauge" if suffix == "up" else "counter", "")
        for gpu in live:
            labels = dcgm.gpu_series_labels(gpu, labels_by_gpu, pods or {})
            for link in gpu.nvlinks:
                if link.HasField(field):
                    text = label_text({**labels, "link": str(link.link)})
                    family.lines.append(f"{name}{{{text}}} {_plain_number(int(getattr(link, field)))}\n")
        family.help = next(f.help for f in dcgm._per_link([]) if f.name == name)
        yield family


def _plain_render(families: Iterable[TextFamily]) -> str:
    """Each family's HELP and TYPE escaped anew, its lines joined, then the page joined."""
    out = []
    for family in families:
        help_text = family.help.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {family.name} {help_text}\n# TYPE {family.name} {family.kind}\n" + "".join(family.lines))
    return "".join(out)


class _NoSender:
    connected_to = "127.0.0.1:1"
    reconnects_total = 2
    reports_resent_total = 0


def _host(report: pb.NodeReport, t: int) -> None:
    for name in ("eth0", "ib0"):
        report.nics.add(name=name, rx_bytes_total=10**12 + t * 10**9, tx_bytes_total=5 * t, operstate="up",
                        carrier=True, speed_bytes_per_second=25e9, mtu=9000)  # fmt: skip
    port = report.rdma_ports.add(device="mlx5_0", port=1, state_id=4, phys_state_id=5, rate_bytes_per_second=50e9,
                                 rx_bytes_total=7 * t, tx_bytes_total=9 * t)  # fmt: skip
    port.counters["port_rcv_data"] = 123 + t
    report.disks.add(name="nvme0n1", reads_completed_total=40 + t, read_time_milliseconds_total=1234,
                     discarded_bytes_total=4096)  # fmt: skip
    host = report.host
    for cpu in ("0", "1"):
        host.cpus.add(cpu=cpu, user_seconds_total=12.5 + t, idle_seconds_total=1e6 / 3)
    host.load1, host.memory_total_bytes, host.context_switches_total = 0.25, 2**40, 2**60 + 1
    host.pressure_io.some_total_microseconds, host.pressure_io.full_total_microseconds = 1500, 700
    report.collectors.add(name="gpu", success=True, duration_seconds=0.0031)


@pytest.fixture
def telemetry(fake_nvml: FakeNvml, make_gpu_source: type[GpuSource]) -> AgentTelemetry:
    fake_nvml.load(h100_sxm5(8))
    gpu_source = make_gpu_source()
    info = pb.NodeInfo(hostname="gpu-node-1")
    gpu_source.scan(info)
    info.nics.add(name="eth0", speed_bytes_per_second=25e9)
    published = AgentTelemetry("gpu-node-1", 1.0)
    for t in range(2):
        fake_nvml.state.advance(1.0)  # type: ignore[union-attr]
        for index, gpu in enumerate(fake_nvml.state.gpus):  # type: ignore[union-attr]
            # Counters past a MiB and traffic on the links: every unit's arithmetic shows.
            gpu.add_traffic(1.0, pcie_rx=3.3e9 + index * 12345, pcie_tx=1.1e9, nvlink_rx_per_link=2e9 + index)
            # 57% and 29% come back from the ratio as 56.99999999999999 and 28.999999999999996
            gpu.util_gpu, gpu.util_mem, gpu.util_enc, gpu.mem_used = 50 + index, 29, 3, (5 + index) * 1024**3 + 12345
        fake_nvml.write()
        report = pb.NodeReport(time_unix_seconds=1000.0 + t)
        if t == 0:
            report.info.CopyFrom(info)
        gpu_source.collect(report)
        _host(report, t)
        published.publish(report)
    return published


def _page(telemetry: AgentTelemetry) -> str:
    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    metrics = AgentMetrics(telemetry, spool, _NoSender(), ("127.0.0.1:1", "127.0.0.2:1"))  # type: ignore[arg-type]
    text = AgentExposition(metrics).render().decode()
    # process_* is prometheus_client's (its CPU seconds move between two writes): left out.
    return "".join(line + "\n" for line in text.splitlines() if "process_" not in line)


def _plain_page(telemetry: AgentTelemetry, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as plain:
        for module in (metrics_text, dcgm, node):
            plain.setattr(module, "number", _plain_number)
        plain.setattr(agent_metrics, "render", _plain_render)
        plain.setattr(agent_metrics, "dcgm_families", _plain_dcgm_families)
        plain.setattr(agent_metrics, "nvlink_families", _plain_nvlink_families)
        plain.setattr(dcgm, "_label_text", label_text)
        return _page(telemetry)


def test_a_full_8_gpu_page_is_byte_for_byte_what_the_plain_writer_writes(
    telemetry: AgentTelemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = _plain_page(telemetry, monkeypatch)
    assert plain.count("DCGM_FI_PROF_SM_ACTIVE{") == 8 and plain.count("nodeagent_gpu_nvlink_up{") == 8 * 18
    assert "node_disk_discarded_sectors_total" in plain and "+Inf" not in plain
    util = [line.rsplit(" ", 1)[1] for line in plain.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert util == [f"{50 + index}.0" for index in range(8)]  # the whole percent NVML gave, as DCGM shows it
    assert plain.count("DCGM_FI_DEV_MEM_COPY_UTIL{") == plain.count("} 29.0\n") == 8
    pcie_rx = [line for line in plain.splitlines() if line.startswith("DCGM_FI_DEV_PCIE_RX_THROUGHPUT{")]
    assert len(pcie_rx) == 8 and not any(line.endswith("} 0") for line in pcie_rx)
    assert _page(telemetry) == plain
    assert _page(telemetry) == plain  # and again, from the kept label texts and headers


def test_a_gpu_whose_job_changes_gets_its_new_labels(
    telemetry: AgentTelemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _page(telemetry)  # GPU 0's label text kept without a job
    report = pb.NodeReport()
    report.CopyFrom(telemetry.latest)  # type: ignore[arg-type]
    report.gpus[0].processes.add(pid=7, job=pb.JobRef(slurm_job_id="4242"))
    telemetry.publish(report)
    after = _page(telemetry)
    assert after == _plain_page(telemetry, monkeypatch) != before
    gpu0 = [line for line in after.splitlines() if 'device="nvidia0"' in line]
    assert len(gpu0) > 7 * 18 and all('hpc_job="4242"' in line for line in gpu0)  # every DCGM and link line
    assert after.count('hpc_job="4242"') == len(gpu0)  # and no other GPU's


@pytest.mark.parametrize(
    "value", [0, 1, -3, 2**64 + 1, 0.0, -0.0, 0.1, 1e-300, 1.5e300, 40.0, math.inf, -math.inf, math.nan, True, False]
)
def test_every_value_is_written_as_before(value: float) -> None:
    assert number(value) == _plain_number(value)
