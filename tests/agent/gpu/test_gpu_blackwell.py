"""Blackwell as itself, through the fake NVML: B200 and GB200/GB300 trays give every field, their
NVLink5 byte counters, C2C where present, and their place in the NVLink fabric; a fabric that is
not registered, degraded or unhealthy on one GPU shows in its sample and in one event."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu import slow_readings
from nodeagent.agent.gpu.view import gpu_rows
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.wire.validate import check_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import (
    FABRIC_IN_PROGRESS,
    FABRIC_SUMMARY_UNHEALTHY,
    b200,
    fabric_health_mask,
    gb200,
    gb300,
)

MakeSource = Callable[..., GpuSource]
GIB = 1024**3

# Every GpuSample field a Blackwell GPU with GPM gives after two ticks (the rest need a fallback
# path, MIG, events or another kind of board).
EVERY_FIELD = {
    "index", "uuid", "utilization_gpu_ratio", "utilization_memory_ratio", "memory_used_bytes",
    "memory_total_bytes", "processes", "sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio",
    "gpm_pcie_rx_bytes_per_second", "gpm_pcie_tx_bytes_per_second", "gpm_nvlink_rx_bytes_per_second",
    "gpm_nvlink_tx_bytes_per_second", "pcie_rx_bytes_total", "pcie_tx_bytes_total", "pcie_link_generation",
    "pcie_link_width", "pcie_max_link_generation", "pcie_max_link_width", "pcie_replay_total", "nvlinks",
    "nvlink_rx_bytes_total", "nvlink_tx_bytes_total", "clock_event_reasons", "temperature_celsius", "power_watts",
    "ecc_uncorrected_volatile_total", "ecc_uncorrected_aggregate_total", "remapped_rows_pending",
    "remapped_rows_failure", "sm_clock_mhz", "memory_free_bytes", "memory_reserved_bytes",
    "utilization_encoder_ratio", "utilization_decoder_ratio", "memory_temperature_celsius",
    "energy_millijoules_total", "memory_clock_mhz", "remapped_rows_correctable_total",
    "remapped_rows_uncorrectable_total", "graphics_active_ratio", "dram_active_ratio", "fabric",
    "samples_taken_total", "samples_expected_total", "computing_source", "computing_source_reason",
}  # fmt: skip


def _set_fields(message: pb.GpuSample) -> set[str]:
    names = set()
    for field in message.DESCRIPTOR.fields:
        if field.is_repeated:
            if len(getattr(message, field.name)):
                names.add(field.name)
        elif field.message_type is not None or field.has_presence:
            if message.HasField(field.name):
                names.add(field.name)
        elif getattr(message, field.name):
            names.add(field.name)
    return names | {"index"}


def _two_ticks(fake: FakeNvml, gpu_source: GpuSource) -> tuple[pb.NodeInfo, pb.NodeReport, pb.NodeReport]:
    info = pb.NodeInfo()
    gpu_source.scan(info)
    first = pb.NodeReport(time_unix_seconds=1000.0)
    gpu_source.collect(first)
    assert fake.state is not None
    for g in fake.state.gpus:
        g.add_traffic(1.0, pcie_rx=4e9, pcie_tx=1e9, nvlink_rx_per_link=40e9, nvlink_tx_per_link=40e9)
    fake.state.advance(1.0)
    fake.write()
    second = pb.NodeReport(time_unix_seconds=1001.0)
    gpu_source.collect(second)
    return info, first, second


@pytest.mark.parametrize(
    ("profile", "count", "name", "memory_mib", "pcie_gen", "c2c"),
    [(b200, 8, "NVIDIA B200", 183_359, 5, 0), (gb200, 4, "NVIDIA GB200", 189_471, 5, 10),
     (gb300, 4, "NVIDIA GB300", 288_000, 6, 10)],
)  # fmt: skip
def test_blackwell_samples_have_every_field(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, profile: Callable[[], object], count: int, name: str,
    memory_mib: int, pcie_gen: int, c2c: int,
) -> None:  # fmt: skip
    state = fake_nvml.load(profile())  # type: ignore[arg-type]
    for i, g in enumerate(state.gpus):
        g.util_gpu, g.util_mem, g.mem_used, g.util_enc, g.util_dec = 90, 40, 150 * GIB, 1, 2
        g.gpm_sm_active, g.gpm_sm_occupancy, g.gpm_tensor, g.gpm_gr_active, g.gpm_dram = 85.0, 50.0, 70.0, 90.0, 60.0
        g.energy_mj, g.remap_cor, g.procs = 10**9, 1, {4000 + i: 140 * GIB}
    fake_nvml.write()
    info, _first, second = _two_ticks(fake_nvml, make_gpu_source())
    topology = info.gpu.gpus
    assert len(topology) == len(second.gpus) == count
    for g in topology:
        assert (g.name, g.architecture, g.memory_total_bytes) == (name, "blackwell", memory_mib * 1024**2)
        # NVLink5: 18 links of 50 GB/s each way, 1.8 TB/s a GPU both ways, as the datasheets say.
        assert (g.nvlink_count, g.nvlink_speed_bytes_per_second) == (18, 50e9)
        assert g.nvlink_count * g.nvlink_speed_bytes_per_second * 2 == 1.8e12
        assert (g.pcie_max_generation, g.pcie_max_width, g.gpm_supported) == (pcie_gen, 16, True)
        assert g.c2c_link_count == c2c
        assert g.HasField("c2c_link_speed_bytes_per_second") is bool(c2c)
        assert g.mig_enabled is False and not g.mig_instances
    check_report(pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=1.0, gpus=second.gpus), "n")
    for sample in second.gpus:
        assert _set_fields(sample) == EVERY_FIELD, sorted(EVERY_FIELD ^ _set_fields(sample))
        assert sample.sm_active_ratio == pytest.approx(0.85)
        assert (sample.pcie_link_generation, sample.pcie_link_width) == (pcie_gen, 16)
        # NVLink5's byte counters (the THROUGHPUT_DATA fields are not supported on Blackwell).
        assert all(link.rx_bytes_total == round(40e9 / 1024) * 1024 for link in sample.nvlinks)
        assert sample.fabric.state == "completed" and sample.fabric.route_unhealthy is False
    assert gpu_rows(None, second, info)[0]["health"] == "ok"


def test_nvlink5_counters_replace_the_throughput_fields_after_the_first_tick(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    fake_nvml.load(b200())
    gpu_source = make_gpu_source()
    _two_ticks(fake_nvml, gpu_source)
    gpu_source.collect(pb.NodeReport(time_unix_seconds=1002.0))
    # The first tick asks NVLink 2-4's fields of each link and is refused; every later one NVLink5's.
    assert fake_nvml.field_requests(0, gpu_fields.FI_NVLINK_THROUGHPUT_DATA_TX) == 18
    assert fake_nvml.field_requests(0, gpu_fields.FI_NVLINK_COUNT_XMIT_BYTES) == 2 * 18


def test_gb200_tray_fabric_names_its_cluster_and_clique(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    fake_nvml.load(gb200())
    _, first, second = _two_ticks(fake_nvml, make_gpu_source())
    fabric = second.gpus[2].fabric
    assert (fabric.state, fabric.status, fabric.clique_id) == ("completed", 0, 32766)
    assert fabric.cluster_uuid == "7c9e6679-7425-40de-944b-e07fc1f90ae7"
    assert fabric.health_summary == "healthy"
    assert (fabric.degraded_bandwidth, fabric.route_recovery, fabric.route_unhealthy) == (False, False, False)
    assert fabric.incorrect_configuration == ""
    assert not [e for r in (first, second) for e in r.events if e.kind == "gpu_fabric"]  # healthy: no event


@pytest.mark.parametrize(
    ("fault", "problems", "message"),
    [
        ("not_registered", "not_registered", "not registered with the fabric manager (state in_progress)"),
        ("degraded", "degraded_bandwidth", "degraded_bandwidth; clique 32766 of cluster 7c9e6679"),
        ("unhealthy", "route_unhealthy,unhealthy", "route_unhealthy, unhealthy; clique 32766"),
    ],
)
def test_one_gpu_of_eight_leaving_the_fabric_shows_in_its_sample_and_one_event(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, fault: str, problems: str, message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(slow_readings, "SLOW_SECONDS", 0.0)  # the fabric asked every tick here
    state = fake_nvml.load(gb200(8))
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    gpu_source.collect(pb.NodeReport(time_unix_seconds=1000.0))
    bad = state.gpus[5]
    if fault == "not_registered":
        bad.fabric_state = FABRIC_IN_PROGRESS
    elif fault == "degraded":
        bad.fabric_health = fabric_health_mask(degraded_bandwidth=True)
    else:
        bad.fabric_health, bad.fabric_summary = fabric_health_mask(route_unhealthy=True), FABRIC_SUMMARY_UNHEALTHY
    fake_nvml.write()
    reports = [pb.NodeReport(time_unix_seconds=1001.0 + t) for t in range(3)]
    for report in reports:
        gpu_source.collect(report)
    events = [e for r in reports for e in r.events if e.kind == "gpu_fabric"]
    assert len(events) == 1  # once, when it changed
    (event,) = events
    assert (event.subject, event.severity, event.attributes["problems"]) == ("gpu:5", "critical", problems)
    assert message in event.message
    assert [g.index for g in reports[-1].gpus if g.fabric.state != "completed" or g.fabric.health_mask != 0x1AA] == [5]
    # Back to healthy: one info event.
    bad.fabric_state, bad.fabric_health, bad.fabric_summary = 3, fabric_health_mask(), 1
    fake_nvml.write()
    later = pb.NodeReport(time_unix_seconds=1010.0)
    gpu_source.collect(later)
    (recovered,) = [e for e in later.events if e.kind == "gpu_fabric"]
    assert (recovered.severity, recovered.attributes["problems"]) == ("info", "")


def test_a_gpu_without_fabric_reports_none_and_is_asked_once(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    from tests.fakes.nvml.state import h100_sxm5

    fake_nvml.load(h100_sxm5())
    _, first, second = _two_ticks(fake_nvml, make_gpu_source())
    assert not any(g.HasField("fabric") for g in (*first.gpus, *second.gpus))
    assert fake_nvml.calls("nvmlDeviceGetGpuFabricInfoV", gpu=0) == 1
    assert not [e for e in (*first.events, *second.events) if e.kind == "gpu_fabric"]


def test_the_fabric_is_asked_at_a_scan_and_every_slow_period_and_carried_between(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What changes slowly costs no call a tick: the fabric, the memory clock, the PCIe link and an
    idle video engine are read at the scan and every SLOW_SECONDS, and each tick carries the last."""
    now = [100.0]
    monkeypatch.setattr(slow_readings.time, "monotonic", lambda: now[0])
    state = fake_nvml.load(b200(2))
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    gpu_source.collect(pb.NodeReport(time_unix_seconds=1000.0))
    asked = fake_nvml.calls("nvmlDeviceGetGpuFabricInfoV", 0)
    state.gpus[0].fabric_health = fabric_health_mask(degraded_bandwidth=True)
    state.gpus[0].pcie_gen, state.gpus[0].mem_clock = 3, 1000
    fake_nvml.write()
    for t in range(3):
        now[0] += 1.0
        report = pb.NodeReport(time_unix_seconds=1001.0 + t)
        gpu_source.collect(report)
        sample = report.gpus[0]
        assert sample.fabric.health_mask == fabric_health_mask()  # the last answer, carried
        assert (sample.pcie_link_generation, sample.memory_clock_mhz) == (5, 1593)
    assert fake_nvml.calls("nvmlDeviceGetGpuFabricInfoV", 0) == asked
    assert fake_nvml.calls("nvmlDeviceGetCurrPcieLinkGeneration", 0) == 1
    now[0] += slow_readings.SLOW_SECONDS
    report = pb.NodeReport(time_unix_seconds=1040.0)
    gpu_source.collect(report)
    sample = report.gpus[0]
    assert sample.fabric.health_mask == fabric_health_mask(degraded_bandwidth=True)
    assert (sample.pcie_link_generation, sample.memory_clock_mhz) == (3, 1000)
    assert [e.attributes["problems"] for e in report.events if e.kind == "gpu_fabric"] == ["degraded_bandwidth"]
    # A scan reads them at once.
    state.gpus[0].pcie_gen = 5
    fake_nvml.write()
    now[0] += 1.0
    gpu_source.scan(pb.NodeInfo())
    report = pb.NodeReport(time_unix_seconds=1041.0)
    gpu_source.collect(report)
    assert report.gpus[0].pcie_link_generation == 5


def test_a_busy_video_engine_is_read_every_tick(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(slow_readings.time, "monotonic", lambda: now[0])
    state = fake_nvml.load(b200(1))
    state.gpus[0].util_dec = 40
    fake_nvml.write()
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    gpu_source.collect(pb.NodeReport(time_unix_seconds=1000.0))
    state.gpus[0].util_dec = 0
    fake_nvml.write()
    readings = []
    for t in range(3):
        now[0] += 1.0
        report = pb.NodeReport(time_unix_seconds=1001.0 + t)
        gpu_source.collect(report)
        readings.append(report.gpus[0].utilization_decoder_ratio)
    assert readings == [0.0, 0.0, 0.0]  # read at once while busy; idle since: back on the slow schedule
    assert fake_nvml.calls("nvmlDeviceGetDecoderUtilization", 0) == 2
