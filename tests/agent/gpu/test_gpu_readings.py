"""Xids that count, readings that cannot be true, and each process's share of a shared GPU,
through the fake NVML."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from nodeagent.agent.gpu.round_readings import LONGEST_ROUND
from nodeagent.agent.gpu.suspect_fields import HOLD_SECONDS, SuspectReadings, contradictions
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4, b200

MakeSource = Callable[..., GpuSource]


def _collect_until(gpu_source: GpuSource, want: int, t: float) -> list[pb.NodeReport]:
    """Ticks until ``want`` Xid events arrived (the event thread delivers them)."""
    reports: list[pb.NodeReport] = []
    deadline = time.monotonic() + 5
    while sum(1 for r in reports for e in r.events if e.kind == "xid") < want and time.monotonic() < deadline:
        time.sleep(0.05)
        report = pb.NodeReport(time_unix_seconds=t + len(reports))
        gpu_source.collect(report)
        reports.append(report)
    return reports


def test_xids_count_per_gpu_and_number_across_repeats_and_kinds(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(a100_sxm4())
    state.gpus[4].procs = {4242: 1 << 30}
    fake_nvml.write()
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    gpu_source.collect(pb.NodeReport(time_unix_seconds=999.0))
    for xid in (79, 79, 13):
        state.inject_xid(4, xid)
    state.inject_xid(2, 31)
    fake_nvml.write()
    reports = _collect_until(gpu_source, 4, 1000.0)
    last = reports[-1]
    assert last.gpus[4].xid_errors_total == {"79": 2, "13": 1}
    assert last.gpus[2].xid_errors_total == {"31": 1}
    assert not any(g.xid_errors_total for g in last.gpus if g.index not in (2, 4))
    # Counters only grow: a later Xid 13 adds to the same series; the last-value gauge would not
    # tell a second 79 from the first.
    state.inject_xid(4, 13)
    fake_nvml.write()
    later = _collect_until(gpu_source, 1, 2000.0)
    assert later[-1].gpus[4].xid_errors_total == {"79": 2, "13": 2}
    events = [e for r in reports for e in r.events if e.kind == "xid" and e.subject == "gpu:4"]
    assert [e.attributes["xid"] for e in events] == ["79", "79", "13"]
    assert all(e.attributes["pid"] == "4242" and e.time_unix_seconds > 0 for e in events)
    assert "pids" not in {k for e in reports[-1].events if e.subject == "gpu:2" for k in e.attributes}  # no process


def _busy(state_gpus: list, sm: float, util: int = 95) -> None:  # type: ignore[type-arg]
    for g in state_gpus:
        g.util_gpu, g.gpm_sm_active = util, sm


def test_sm_activity_at_zero_on_a_busy_gpu_is_flagged_after_minutes_and_cleared(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource
) -> None:
    state = fake_nvml.load(b200())
    _busy(state.gpus, 80.0)
    state.gpus[3].gpm_sm_active = 0.0  # the profiling field died on one GPU
    fake_nvml.write()
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    reports = []
    for t in range(0, 200, 10):
        state.advance(10.0)
        fake_nvml.write()
        report = pb.NodeReport(time_unix_seconds=1000.0 + t)
        gpu_source.collect(report)
        reports.append(report)
    flagged = [r for r in reports if r.gpus[3].suspect_fields]
    first = flagged[0]
    # GPM needs two samples: the run starts at 1010 and is held for HOLD_SECONDS.
    assert first.time_unix_seconds == 1010.0 + HOLD_SECONDS
    assert list(first.gpus[3].suspect_fields) == ["sm_active_ratio"]
    assert first.gpus[3].sm_active_ratio == 0.0  # still sent as read
    assert not any(g.suspect_fields for r in reports for g in r.gpus if g.index != 3)
    events = [e for r in reports for e in r.events if e.kind == "suspect_reading"]
    assert len(events) == 1 and events[0].severity == "warning" and events[0].attributes["field"] == "sm_active_ratio"
    assert "SM activity reads 0 while the GPU is 95% utilized" in events[0].message
    state.gpus[3].gpm_sm_active = 70.0
    state.advance(10.0)
    fake_nvml.write()
    back = pb.NodeReport(time_unix_seconds=1200.0)
    gpu_source.collect(back)
    assert not back.gpus[3].suspect_fields
    (cleared,) = [e for e in back.events if e.kind == "suspect_reading"]
    assert (cleared.severity, cleared.attributes["suspect"]) == ("info", "false")


def test_frozen_sm_activity_while_utilization_moves_is_flagged() -> None:
    readings = SuspectReadings()
    flagged_at = None
    for step in range(40):
        report = pb.NodeReport(time_unix_seconds=1000.0 + 5 * step)
        # Utilization swings 30%..95%; SM activity stays at 0.4137 to the last digit.
        report.gpus.add(index=0, uuid="GPU-a", utilization_gpu_ratio=0.3 if step % 2 else 0.95, sm_active_ratio=0.4137)
        report.gpus.add(
            index=1, uuid="GPU-b", utilization_gpu_ratio=0.3 if step % 2 else 0.95, sm_active_ratio=0.2 + step / 1000
        )
        readings.observe(report)
        if report.gpus[0].suspect_fields and flagged_at is None:
            flagged_at = report.time_unix_seconds
            assert "frozen at 0.4137" in next(e.message for e in report.events if e.kind == "suspect_reading")
        assert not report.gpus[1].suspect_fields
    assert flagged_at is not None and flagged_at - 1005.0 >= HOLD_SECONDS


def test_nvlink_flat_while_the_jobs_other_gpus_move_data_and_power_zero_on_a_busy_gpu() -> None:
    def gpu(index: int, nvlink: int, power: float = 700.0) -> pb.GpuSample:
        g = pb.GpuSample(index=index, uuid=f"GPU-{index}", utilization_gpu_ratio=0.9, power_watts=power)
        g.nvlink_rx_bytes_total, g.nvlink_tx_bytes_total = nvlink, nvlink
        g.processes.add(pid=100 + index).job.slurm_job_id = "77"
        return g

    before, after = gpu(0, 10**9), gpu(0, 10**9, power=0.0)
    assert contradictions(before, after, peers_moved=True) == {
        "power_watts": "power reads 0 W while the GPU is 90% utilized",
        "nvlink_bytes": "NVLink byte counters flat while the job's other GPUs move data over theirs",
    }
    assert contradictions(before, after, peers_moved=False).keys() == {"power_watts"}
    readings = SuspectReadings()
    for step in range(30):
        report = pb.NodeReport(time_unix_seconds=1000.0 + 10 * step)
        report.gpus.append(gpu(0, 10**9))  # flat
        report.gpus.append(gpu(1, 10**9 + step * 10**10))  # same job, moving
        report.gpus.append(gpu(2, 10**9))  # flat, but another job's: not contradicted
        report.gpus[2].processes[0].job.slurm_job_id = "78"
        readings.observe(report)
    assert list(report.gpus[0].suspect_fields) == ["nvlink_bytes"]
    assert not report.gpus[1].suspect_fields and not report.gpus[2].suspect_fields


def test_each_process_gets_its_share_of_a_shared_gpu(fake_nvml: FakeNvml, make_gpu_source: MakeSource) -> None:
    state = fake_nvml.load(a100_sxm4())
    g = state.gpus[1]
    g.util_gpu, g.procs, g.proc_util = 90, {11: 1 << 30, 12: 2 << 30, 13: 1 << 30}, {11: (55, 30), 12: (35, 20)}
    fake_nvml.write()
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    report = pb.NodeReport(time_unix_seconds=1000.0)
    gpu_source.collect(report)
    shares = {p.pid: p for p in report.gpus[1].processes}
    assert shares[11].sm_utilization_ratio == pytest.approx(0.55)
    assert shares[12].memory_utilization_ratio == pytest.approx(0.20)
    assert not shares[13].HasField("sm_utilization_ratio")  # no sample of it
    assert not report.gpus[0].processes and fake_nvml.calls("nvmlDeviceGetProcessUtilization", gpu=0) == 0
    # The ticks between reads (the round's other turns) carry the last read's shares; a read with
    # no newer sample leaves them out, not repeated.
    carried, again = _until_shares_read(fake_nvml, gpu_source, 1001.0)
    assert carried and all(r.gpus[1].processes[0].sm_utilization_ratio == pytest.approx(0.55) for r in carried)
    assert not any(p.HasField("sm_utilization_ratio") for p in again.gpus[1].processes)
    state.advance(1.0)
    fake_nvml.write()
    _, third = _until_shares_read(fake_nvml, gpu_source, 1010.0)
    assert {p.pid: p.sm_utilization_ratio for p in third.gpus[1].processes if p.HasField("sm_utilization_ratio")} == {
        11: pytest.approx(0.55), 12: pytest.approx(0.35),
    }  # fmt: skip


def _until_shares_read(fake: FakeNvml, source: GpuSource, t: float) -> tuple[list[pb.NodeReport], pb.NodeReport]:
    """Ticks until one reads GPU 1's process shares (within a round): the reports before it, and its."""
    before: list[pb.NodeReport] = []
    for tick in range(LONGEST_ROUND):
        asked = fake.calls("nvmlDeviceGetProcessUtilization", gpu=1)
        report = pb.NodeReport(time_unix_seconds=t + tick)
        source.collect(report)
        if fake.calls("nvmlDeviceGetProcessUtilization", gpu=1) > asked:
            return before, report
        before.append(report)
    raise AssertionError(f"no read of the shares in {LONGEST_ROUND} ticks")
