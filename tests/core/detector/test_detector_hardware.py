"""The detector on reports the agent made over the fake NVML: a MIG instance starved of data while
its neighbours are busy is flagged in its own verdict, under its GPU; a frozen SM-activity field
the agent flags as suspect decides nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.detector.node import DetectorConfig, NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.agent.gpu.test_gpu_mig import PODS, pod_tree, split
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, b200, h100_sxm5

GIB = 1024**3


def _busy(state: FakeNvmlState, first_pid: int = 9000) -> None:
    for i, g in enumerate(state.gpus):
        g.util_gpu, g.gpm_sm_active, g.mem_used, g.procs = 100, 85.0, 60 * GIB, {first_pid + i: 60 * GIB}


def _reports(fake: FakeNvml, gpu_source: GpuSource, seconds: int) -> Iterator[pb.NodeReport]:
    info = pb.NodeInfo(node_id="node-a")
    gpu_source.scan(info)
    assert fake.state is not None
    for t in range(seconds):
        fake.state.advance(1.0)
        fake.write()
        report = pb.NodeReport(node_id="node-a", time_unix_seconds=1_800_000_000.0 + t)
        if t == 0:
            report.info.CopyFrom(info)
        gpu_source.collect(report)
        yield report


def test_a_starved_mig_instance_is_flagged_while_its_neighbours_are_busy(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource], tmp_path: Path
) -> None:
    state = fake_nvml.load(h100_sxm5())
    _busy(state)
    split(state)  # GPU 0: 3g.40gb, 2g.20gb, 1g.10gb, one pod each, at 90%, 10%, 85% SM activity
    state.gpus[0].mig[1].gpm_sm_active = 20.0  # the 2g tenant waits for its data 60% of the time
    fake_nvml.write()
    detector = NodeDetector("node-a", DetectorConfig())
    for report in _reports(fake_nvml, make_gpu_source(pod_tree(tmp_path / "proc")), 200):
        detector.observe(report)
    v = detector.verdict
    gpu0 = v.gpus[0]
    assert [(i.gpu_instance_id, i.mig_profile, i.state) for i in gpu0.instances] == [
        (1, "3g.40gb", "busy"), (2, "2g.20gb", "starved"), (5, "1g.10gb", "busy"),
    ]  # fmt: skip
    starved = gpu0.instances[1]
    assert starved.uuid == state.gpus[0].mig[1].uuid
    assert starved.starvation_ratio is not None and starved.starvation_ratio >= 0.5
    assert starved.jobs == (PODS[102],)
    # The GPU's verdict is its instances' roll-up; the node is starved because one tenant is.
    assert (gpu0.state, gpu0.evidence["starved_instances"]) == ("starved", "2g.20gb gi2")
    assert set(gpu0.jobs) == set(PODS.values())
    assert all(g.state == "busy" and not g.instances for g in v.gpus[1:])
    assert v.state == "starved" and [g.index for g in v.starved_gpus] == [0]
    # Weighted by share: the 2g instance is 2 of the 6 slices in use on GPU 0, GPU 0 one of eight.
    assert gpu0.starvation_ratio == pytest.approx(starved.starvation_ratio * 2 / 6, abs=1e-3)
    assert v.starvation_ratio is not None and 0 < v.starvation_ratio < gpu0.starvation_ratio / 4
    assert 0 < gpu0.gpu_seconds_lost == pytest.approx(starved.gpu_seconds_lost * 2 / 7)
    plain = v.to_plain()["gpus"][0]
    assert [i["gpu_instance_id"] for i in plain["instances"]] == [1, 2, 5]


def test_a_frozen_sm_activity_field_is_flagged_and_ignored_by_the_detector(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    state = fake_nvml.load(b200())
    _busy(state)
    state.gpus[3].gpm_sm_active = 0.0  # the profiling field reads 0 on a GPU at 100%
    fake_nvml.write()
    believing = NodeDetector("node-a", DetectorConfig())  # told nothing of suspect fields
    detector = NodeDetector("node-a", DetectorConfig())
    flagged = []
    for report in _reports(fake_nvml, make_gpu_source(), 360):
        if report.gpus[3].suspect_fields:
            flagged.append(report.time_unix_seconds)
        detector.observe(report)
        unflagged = pb.NodeReport()
        unflagged.CopyFrom(report)
        del unflagged.gpus[3].suspect_fields[:]
        believing.observe(unflagged)
    assert flagged and flagged[-1] - flagged[0] > 200  # flagged after its minutes, and kept
    assert list(report.gpus[3].suspect_fields) == ["sm_active_ratio"]
    # Believed, the dead field makes a busy GPU look starved; flagged, it decides nothing.
    assert believing.verdict.gpus[3].state == "starved"
    assert detector.verdict.gpus[3].state == "busy"
    assert detector.verdict.state == "busy" and not detector.verdict.starved_gpus
