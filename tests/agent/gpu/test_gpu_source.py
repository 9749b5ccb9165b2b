"""The GPU source against the fake NVML: values equal the fake's state, faults stay local."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu import nvml_library
from nodeagent.agent.gpu.round_readings import LONGEST_ROUND
from nodeagent.agent.gpu.view import gpu_rows
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.wire.validate import repair
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import PROFILES, a100_sxm4, a800_sxm4, h100_sxm5

MakeSource = Callable[..., GpuSource]
GIB = 1024**3


def scan(gpu_source: GpuSource) -> pb.NodeInfo:
    info = pb.NodeInfo()
    gpu_source.scan(info)
    return info


def tick(gpu_source: GpuSource, t: float) -> pb.NodeReport:
    report = pb.NodeReport(time_unix_seconds=t)
    gpu_source.collect(report)
    return report


@pytest.mark.parametrize(
    ("profile", "links", "pcie_gen", "gpm", "architecture"),
    [("a100_sxm4", 12, 4, False, "ampere"), ("a800_sxm4", 8, 4, False, "ampere"), ("h100_sxm5", 18, 5, True, "hopper")],
)
def test_topology_is_the_fakes(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, profile: str, links: int, pcie_gen: int, gpm: bool,
    architecture: str,
) -> None:  # fmt: skip
    state = fake_nvml.load(PROFILES[profile]())
    info = scan(make_gpu_source())
    topology = info.gpu
    assert topology.unavailable_reason == ""
    assert (topology.driver_version, topology.nvml_version, topology.cuda_driver_version) == (
        "570.133.20", "12.570.133.20", 12080,
    )  # fmt: skip
    assert [g.index for g in topology.gpus] == list(range(8))
    for g, want in zip(topology.gpus, state.gpus, strict=True):
        assert (g.uuid, g.name, g.pci_bus_id, g.serial) == (want.uuid, want.name, want.bus_id, want.serial)
        assert g.memory_total_bytes == want.mem_total
        assert g.nvlink_count == links
        assert g.nvlink_speed_bytes_per_second == 25e9
        assert (g.pcie_max_generation, g.pcie_max_width) == (pcie_gen, 16)
        assert g.gpm_supported is gpm
        assert g.architecture == architecture
    # NVLink bandwidth per GPU, both directions, as the datasheets quote it.
    per_gpu = topology.gpus[0].nvlink_count * topology.gpus[0].nvlink_speed_bytes_per_second * 2
    assert per_gpu == {12: 600e9, 8: 400e9, 18: 900e9}[links]


def test_values_equal_the_fake_state_and_rates_follow_the_counters(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a100_sxm4())
    for i, g in enumerate(state.gpus):
        g.util_gpu, g.util_mem, g.mem_used = 10 * i, 5 * i, (i + 1) * GIB
        g.temp, g.power_mw, g.sm_clock, g.clock_reasons = 40 + i, 300_000 + i, 1410, 0x1 if i == 7 else 0
        for link_index, fake_link in enumerate(g.links):
            fake_link.tx_kib, fake_link.rx_kib = 1000 * link_index, 2000 * link_index
            fake_link.replay, fake_link.recovery, fake_link.crc_flit, fake_link.crc_data = 1, 2, 3, 4
        g.pcie_rx_bytes, g.pcie_tx_bytes, g.pcie_replay = 10**9, 2 * 10**9, i
    fake_nvml.write()
    gpu_source = make_gpu_source()
    info = scan(gpu_source)
    first = tick(gpu_source, 1000.0)
    for g in state.gpus:
        g.add_traffic(2.0, pcie_rx=3e9, pcie_tx=1e9, nvlink_rx_per_link=20 * 1024**3, nvlink_tx_per_link=10 * 1024**3)
    state.gpus[3].links[5].rx_kib += 1024  # one link moves a little more
    fake_nvml.write()
    second = tick(gpu_source, 1002.0)

    assert len(second.gpus) == 8
    for sample, want in zip(second.gpus, state.gpus, strict=True):
        assert sample.uuid == want.uuid
        assert sample.utilization_gpu_ratio == pytest.approx(want.util_gpu / 100)
        assert sample.utilization_memory_ratio == pytest.approx(want.util_mem / 100)
        assert sample.memory_used_bytes == want.mem_used
        assert sample.memory_total_bytes == want.mem_total
        assert sample.temperature_celsius == want.temp
        assert sample.power_watts == pytest.approx(want.power_mw / 1000)
        assert sample.sm_clock_mhz == 1410
        assert (sample.pcie_rx_bytes_total, sample.pcie_tx_bytes_total) == (want.pcie_rx_bytes, want.pcie_tx_bytes)
        assert sample.pcie_replay_total == want.pcie_replay
        assert (sample.pcie_link_generation, sample.pcie_link_width) == (4, 16)
        assert [link.link for link in sample.nvlinks] == list(range(12))
        for link, want_link in zip(sample.nvlinks, want.links, strict=True):
            assert link.active is True
            assert link.tx_bytes_total == want_link.tx_kib * 1024
            assert link.rx_bytes_total == want_link.rx_kib * 1024
            assert (link.replay_errors_total, link.recovery_errors_total) == (1, 2)
            assert (link.crc_flit_errors_total, link.crc_data_errors_total) == (3, 4)
        # The GPU's sums over its links ride beside them (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL reads them).
        assert sample.HasField("nvlink_tx_bytes_total") and sample.HasField("nvlink_rx_bytes_total")
        assert sample.nvlink_tx_bytes_total == sum(link.tx_kib for link in want.links) * 1024
        assert sample.nvlink_rx_bytes_total == sum(link.rx_kib for link in want.links) * 1024
        assert not sample.HasField("sm_active_ratio")  # A100: no GPM
    assert list(second.gpus[7].clock_event_reason_names) == ["gpu_idle"]

    rows = gpu_rows(first, second, info)
    for row in rows:
        assert row["pcie_rx_bytes_per_second"] == pytest.approx(3e9)
        assert row["pcie_tx_bytes_per_second"] == pytest.approx(1e9)
        assert row["pcie_rate_source"] == "counter"
        assert (row["nvlinks_up"], row["nvlinks_expected"]) == (12, 12)
        assert row["health"] == "ok"
    link_rates = {link["link"]: link["rx_bytes_per_second"] for link in rows[3]["nvlinks"]}
    assert link_rates[0] == pytest.approx(20 * 1024**3)
    assert link_rates[5] == pytest.approx(20 * 1024**3 + 512 * 1024)
    assert rows[0]["nvlink_rx_bytes_per_second"] == pytest.approx(12 * 20 * 1024**3)
    assert rows[0]["nvlink_tx_bytes_per_second"] == pytest.approx(12 * 10 * 1024**3)
    # First report: counters but no interval yet.
    assert gpu_rows(None, first, info)[0]["nvlink_rx_bytes_per_second"] is None


def test_h100_gpm_metrics_over_the_tick(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    state = fake_nvml.load(h100_sxm5())
    gpu_source = make_gpu_source()
    scan(gpu_source)
    first = tick(gpu_source, 1000.0)
    assert not first.gpus[0].HasField("sm_active_ratio")  # GPM needs two samples
    for g in state.gpus:
        g.gpm_sm_active, g.gpm_sm_occupancy, g.gpm_tensor = 80.0, 45.0, 60.0
        g.add_traffic(0.5, pcie_rx=8 * 1024**3, nvlink_tx_per_link=1024**3)
    state.advance(0.5)
    fake_nvml.write()
    second = tick(gpu_source, 1000.5)
    for sample in second.gpus:
        assert sample.sm_active_ratio == pytest.approx(0.80)
        assert sample.sm_occupancy_ratio == pytest.approx(0.45)
        assert sample.tensor_active_ratio == pytest.approx(0.60)
        assert sample.gpm_pcie_rx_bytes_per_second == pytest.approx(8 * 1024**3)
        assert sample.gpm_nvlink_tx_bytes_per_second == pytest.approx(18 * 1024**3)
        assert sample.gpm_nvlink_rx_bytes_per_second == 0
    gpu_source.close()
    assert fake_nvml.live_gpm_samples() == 0
    assert fake_nvml.live_event_sets() == 0


def test_a800_without_pcie_counters_uses_sampled_throughput_and_asks_once(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a800_sxm4())
    for g in state.gpus:
        g.pcie_rx_kbs, g.pcie_tx_kbs = 4_000_000, 1_000_000
    fake_nvml.write()
    gpu_source = make_gpu_source()
    info = scan(gpu_source)
    reports = [tick(gpu_source, 1000.0 + t) for t in range(3)]
    for sample in reports[-1].gpus:
        assert not sample.HasField("pcie_rx_bytes_total")
        assert sample.pcie_rx_bytes_per_second == 4_000_000 * 1024
        assert sample.pcie_tx_bytes_per_second == 1_000_000 * 1024
        assert len(sample.nvlinks) == 8
    rows = gpu_rows(reports[-2], reports[-1], info)
    assert rows[0]["pcie_rx_bytes_per_second"] == 4_000_000 * 1024
    assert rows[0]["pcie_rate_source"] == "sampled"
    for gpu in range(8):
        assert fake_nvml.field_requests(gpu, gpu_fields.FI_PCIE_COUNT_RX_BYTES) == 1  # refused once, not retried
        assert fake_nvml.field_requests(gpu, gpu_fields.FI_NVLINK_THROUGHPUT_DATA_TX) == 3 * 8


def test_a_gpus_nvlink_sum_past_what_the_wire_carries_is_left_out_not_the_gpu(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a100_sxm4())
    # 12 links, each well inside 2^63: GPU 0's sums pass 2^64, GPU 1's 2^63.
    for gpu, share in ((0, 5), (1, 11)):
        for link in state.gpus[gpu].links:
            link.rx_kib = link.tx_kib = (1 << 63) // share // 1024
    fake_nvml.write()
    gpu_source = make_gpu_source()
    scan(gpu_source)
    report = tick(gpu_source, 1000.0)
    assert repair(report) == []  # nothing on the wire that reads as a negative count
    for gpu in report.gpus[:2]:
        assert not gpu.lost and len(gpu.nvlinks) == 12 and gpu.nvlinks[0].rx_bytes_total > 0
        assert not gpu.HasField("nvlink_rx_bytes_total") and not gpu.HasField("nvlink_tx_bytes_total")
    assert report.gpus[2].HasField("nvlink_rx_bytes_total")  # the GPUs with small counters keep theirs


def test_nvlink5_byte_counters_replace_the_throughput_fields_a_gpu_refuses(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a100_sxm4())
    # GPU 0 as NVLink5 documents it: no THROUGHPUT_DATA fields, COUNT_*_BYTES instead.
    state.gpus[0].unsupported_fields = {
        gpu_fields.FI_NVLINK_THROUGHPUT_DATA_TX,
        gpu_fields.FI_NVLINK_THROUGHPUT_DATA_RX,
    }
    for link_index, fake_link in enumerate(state.gpus[0].links):
        fake_link.tx_kib, fake_link.rx_kib = 10 * link_index, 20 * link_index
    fake_nvml.write()
    gpu_source = make_gpu_source()
    scan(gpu_source)
    reports = [tick(gpu_source, 1000.0 + t) for t in range(3)]
    assert not reports[0].gpus[0].nvlinks[1].HasField("tx_bytes_total")  # the tick that found out
    assert not reports[0].gpus[0].HasField("nvlink_tx_bytes_total")  # no link counted: no sum either
    for report in reports[1:]:
        links = report.gpus[0].nvlinks
        assert [link.tx_bytes_total for link in links] == [10 * 1024 * i for i in range(12)]
        assert [link.rx_bytes_total for link in links] == [20 * 1024 * i for i in range(12)]
    assert fake_nvml.field_requests(0, gpu_fields.FI_NVLINK_THROUGHPUT_DATA_TX) == 12  # once per link
    assert fake_nvml.field_requests(0, gpu_fields.FI_NVLINK_COUNT_XMIT_BYTES) == 2 * 12
    assert fake_nvml.field_requests(1, gpu_fields.FI_NVLINK_COUNT_XMIT_BYTES) == 0  # GPU 1 never needed them


def test_lost_gpu_is_reported_and_the_others_keep_sampling(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, capfd: pytest.CaptureFixture[str]
) -> None:
    state = fake_nvml.load(h100_sxm5())
    for g in state.gpus:
        g.util_gpu = 90
    fake_nvml.write()
    gpu_source = make_gpu_source()
    scan(gpu_source)
    tick(gpu_source, 1000.0)
    calls_before_loss = fake_nvml.calls(gpu=3)
    state.gpus[3].lost = 1
    fake_nvml.write()
    reports = [tick(gpu_source, 1001.0)]
    assert fake_nvml.calls(gpu=3) == calls_before_loss + 1  # the first GpuIsLost ends that GPU's tick
    reports += [tick(gpu_source, 1002.0 + t) for t in range(2)]
    calls_after_loss = fake_nvml.calls(gpu=3)
    reports.append(tick(gpu_source, 1004.0))

    for report in reports:
        assert [g.index for g in report.gpus] == list(range(8))
        lost = report.gpus[3]
        assert lost.lost and lost.uuid == state.gpus[3].uuid
        assert not lost.HasField("utilization_gpu_ratio") and not lost.nvlinks
        for other in (g for g in report.gpus if g.index != 3):
            assert not other.lost
            assert other.utilization_gpu_ratio == pytest.approx(0.9)
            assert len(other.nvlinks) == 18
    lost_events = [e for r in reports for e in r.events if e.kind == "gpu_lost"]
    assert len(lost_events) == 1
    assert (lost_events[0].severity, lost_events[0].subject) == ("critical", "gpu:3")
    assert fake_nvml.calls(gpu=3) == calls_after_loss  # nothing more is asked of a lost GPU
    assert "Traceback" not in capfd.readouterr().err


def test_unsupported_call_on_one_gpu_is_absent_for_it_only_and_not_retried(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a100_sxm4())
    state.gpus[2].unsupported.add("nvmlDeviceGetUtilizationRates")
    state.gpus[5].unsupported_fields.add(gpu_fields.FI_POWER_INSTANT)
    fake_nvml.write()
    gpu_source = make_gpu_source()
    scan(gpu_source)
    reports = [tick(gpu_source, 1000.0 + t) for t in range(3)]
    for report in reports:
        assert not report.gpus[2].HasField("utilization_gpu_ratio")
        assert not report.gpus[5].HasField("power_watts")
        assert report.gpus[5].HasField("pcie_rx_bytes_total")  # the rest of its fields still come
        for g in report.gpus:
            if g.index != 2:
                assert g.HasField("utilization_gpu_ratio")
            if g.index != 5:
                assert g.power_watts == pytest.approx(65.0)
    assert fake_nvml.calls("nvmlDeviceGetUtilizationRates", gpu=2) == 1
    assert fake_nvml.calls("nvmlDeviceGetUtilizationRates", gpu=1) == 3
    assert fake_nvml.field_requests(5, gpu_fields.FI_POWER_INSTANT) == 1
    assert fake_nvml.field_requests(4, gpu_fields.FI_POWER_INSTANT) == 3


def test_counters_take_one_field_value_call_per_gpu_per_tick(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    fake_nvml.load(h100_sxm5())
    gpu_source = make_gpu_source()
    scan(gpu_source)
    tick(gpu_source, 1000.0)
    nvml_library.reset_call_counts()
    ticks = 4
    for t in range(ticks):
        fake_nvml.state.advance(1.0)  # type: ignore[union-attr]
        fake_nvml.write()
        tick(gpu_source, 1001.0 + t)
    counts = nvml_library.call_counts()
    counts.pop("nvmlEventSetWait_v2", None)  # the event thread's waits, not sampling
    assert counts["nvmlDeviceGetFieldValues"] == 8 * ticks
    per_gpu_per_tick = sum(counts.values()) / (8 * ticks)
    # Field values (temperature and the throttling reasons' counters among them), SM clock, GPM
    # sample + metrics, and one reading of the round (memory, processes, utilization, the reasons'
    # bitmask: round_readings): 5, and nothing allocated per tick. The memory clock, PCIe link and
    # the video engines wait for the slow schedule (30 s, or a scan).
    assert per_gpu_per_tick == 5
    for call in ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
                 "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetCurrentClocksEventReasons"):  # fmt: skip
        assert counts[call] == 8  # once a round of 4 ticks
    assert "nvmlGpmSampleAlloc" not in counts


def test_xid_and_double_bit_ecc_events_arrive_in_a_report(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    state = fake_nvml.load(a100_sxm4())
    gpu_source = make_gpu_source()
    info = scan(gpu_source)
    tick(gpu_source, 1000.0)
    state.inject_xid(4, 79)
    state.inject_double_bit_ecc(1)
    fake_nvml.write()
    events: list[pb.Event] = []
    report = pb.NodeReport()
    deadline = time.monotonic() + 5
    while len(events) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        report = tick(gpu_source, 1001.0)
        events.extend(report.events)
    by_kind = {e.kind: e for e in events}
    assert set(by_kind) == {"xid", "ecc_double_bit"}
    xid = by_kind["xid"]
    assert (xid.subject, xid.severity, xid.attributes["xid"]) == ("gpu:4", "critical", "79")
    assert xid.attributes["uuid"] == state.gpus[4].uuid
    assert by_kind["ecc_double_bit"].subject == "gpu:1"
    assert report.gpus[1].ecc_uncorrected_volatile_total == 1
    assert gpu_rows(None, report, info)[1]["health"] == "ecc"
    later = [tick(gpu_source, 1002.0 + t) for t in range(2)]
    assert not [e for r in later for e in r.events]  # delivered once


def test_link_down_shows_in_links_up_and_health(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    state = fake_nvml.load(a100_sxm4())
    gpu_source = make_gpu_source()
    info = scan(gpu_source)
    tick(gpu_source, 1000.0)
    state.gpus[6].links[11].state = 0
    fake_nvml.write()
    report = tick(gpu_source, 1001.0)
    assert report.gpus[6].nvlinks[11].active is False
    rows = gpu_rows(None, report, info)
    assert (rows[6]["nvlinks_up"], rows[6]["nvlinks_expected"], rows[6]["health"]) == (11, 12, "nvlink_down")
    assert all(row["health"] == "ok" for row in rows if row["index"] != 6)


def _process_dir(procfs: Path, pid: int, comm: str, uid: int, cgroup: str) -> None:
    d = procfs / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
    (d / "cgroup").write_text(cgroup)


def test_processes_carry_name_user_and_job(fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    pod = "8dbc5577_d0e2_4706_8787_57d52c03ddf2"
    container = "ab" * 32
    _process_dir(
        procfs, 4242, "python3", os.getuid(), "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n"
    )
    _process_dir(
        procfs, 5151, "torchrun", 4_000_123,
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod}.slice/cri-containerd-{container}.scope\n",
    )  # fmt: skip
    state = fake_nvml.load(a100_sxm4())
    state.gpus[0].procs = {4242: 30 * GIB}
    state.gpus[1].procs = {5151: 20 * GIB, 4242: 1 * GIB}
    fake_nvml.write()
    gpu_source = make_gpu_source(procfs)
    scan(gpu_source)
    report = tick(gpu_source, 1000.0)
    (slurm,) = report.gpus[0].processes
    assert (slurm.pid, slurm.used_memory_bytes, slurm.name) == (4242, 30 * GIB, "python3")
    assert slurm.job.slurm_job_id == "1234"
    k8s = {p.pid: p for p in report.gpus[1].processes}[5151]
    assert (k8s.name, k8s.user, k8s.used_memory_bytes) == ("torchrun", "4000123", 20 * GIB)
    assert k8s.job.k8s_pod_uid == pod.replace("_", "-")
    assert k8s.job.container_id == container
    assert not report.gpus[2].processes


def test_driver_that_fails_to_initialize_is_a_reason_reported_once(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a100_sxm4())
    state.init_error = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    fake_nvml.write()
    gpu_source = make_gpu_source()
    info = scan(gpu_source)
    assert info.gpu.unavailable_reason == "NVIDIA driver not loaded (nvmlInit: Driver Not Loaded)"
    assert not info.gpu.gpus
    reports = [tick(gpu_source, 1000.0 + t) for t in range(3)]
    assert [len(r.events) for r in reports] == [1, 0, 0]
    assert (reports[0].events[0].kind, reports[0].events[0].message) == ("gpu_unavailable", info.gpu.unavailable_reason)
    assert not any(r.gpus for r in reports)


def test_processes_take_one_call_and_a_second_only_when_the_list_outgrows_its_array(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    """pynvml's wrapper asks for the count, then the list: two calls per GPU with a process. The
    agent asks once, into an array kept per GPU, and grows it when NVML says it is too small."""
    state = fake_nvml.load(a100_sxm4(count=1))
    state.gpus[0].procs = {1000 + i: (i + 1) * 1024**2 for i in range(3)}
    fake_nvml.write()
    gpu_source = make_gpu_source()
    scan(gpu_source)
    first = tick(gpu_source, 1000.0)
    assert {(p.pid, p.used_memory_bytes) for p in first.gpus[0].processes} == {
        (1000 + i, (i + 1) * 1024**2) for i in range(3)
    }
    assert fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0) == 1
    state.gpus[0].procs = {2000 + i: 1024**2 for i in range(40)}  # more than the first array holds
    fake_nvml.write()
    t = _until_processes_read(fake_nvml, gpu_source, 1001.0)  # the processes' turn of the round
    assert len(tick(gpu_source, t).gpus[0].processes) == 40  # the ticks between carry the list
    assert fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0) == 3
    _until_processes_read(fake_nvml, gpu_source, t + 1)
    assert fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0) == 4  # grown: one call again


def _until_processes_read(fake: FakeNvml, source: GpuSource, t: float) -> float:
    """Ticks until one reads GPU 0's processes (within a round); the time of the tick after it."""
    for _ in range(LONGEST_ROUND):
        asked = fake.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0)
        tick(source, t)
        t += 1.0
        if fake.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0) > asked:
            return t
    raise AssertionError(f"no read of the processes in {LONGEST_ROUND} ticks")
