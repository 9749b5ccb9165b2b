"""``nodeagent top`` on a MIG-split GPU: its instances drawn under it, each with its SM activity,
memory, job and the detector's state for it (reports from the agent over the fake NVML)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.agent.views.snapshots import snapshot
from nodeagent.agent.views.top_frame import ViewState, frame
from nodeagent.core.detector.node import DetectorConfig, NodeDetector
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.agent.gpu.test_gpu_mig import pod_tree, split
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import h100_sxm5


def test_top_draws_the_instances_under_their_gpu(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource], tmp_path: Path
) -> None:
    state = fake_nvml.load(h100_sxm5(2))
    for i, g in enumerate(state.gpus):
        g.util_gpu, g.gpm_sm_active, g.mem_used, g.procs = 100, 85.0, 60 << 30, {9000 + i: 60 << 30}
    split(state)
    state.gpus[0].mig[1].gpm_sm_active = 20.0
    fake_nvml.write()
    gpu_source = make_gpu_source(pod_tree(tmp_path / "proc"))
    info = pb.NodeInfo(node_id="mig-node")
    gpu_source.scan(info)
    detector = NodeDetector("mig-node", DetectorConfig())
    reports = []
    for t in range(150):
        state.advance(1.0)
        fake_nvml.write()
        report = pb.NodeReport(node_id="mig-node", time_unix_seconds=1_800_000_000.0 + t)
        if t == 0:
            report.info.CopyFrom(info)
        gpu_source.collect(report)
        report.collectors.add(name="gpu", success=True)
        detector.observe(report)
        reports.append(report)
    snap = snapshot(reports[-2], reports[-1], info)
    out = io.StringIO()
    Console(file=out, width=140, color_system=None).print(frame(snap, detector.verdict.to_plain(), ViewState(), 140))
    lines = out.getvalue().splitlines()
    gpu0 = next(i for i, line in enumerate(lines) if line.strip().startswith("0 "))
    assert "starved" in lines[gpu0]
    below = lines[gpu0 + 1 : gpu0 + 4]
    assert [line.split()[1:3] for line in below] == [["3g.40gb", "gi1"], ["2g.20gb", "gi2"], ["1g.10gb", "gi5"]]
    assert "starved" in below[1] and "busy" in below[0] and "busy" in below[2]
    assert "pod 1d2c3b4a" in below[1] and "20%" in below[1]
    assert lines[gpu0 + 4].strip().startswith("1 ")  # then the next GPU
