"""MIG through the fake NVML: a GPU split into three instances held by three pods is three GPUs to
their tenants (memory, processes and their pods, GPM per instance); a change of mode or of the
instances is read at the next rescan, without a restart."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.agent.gpu.mig import profile_of
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.detector.mig import slices_of
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, h100_sxm5

MakeSource = Callable[..., GpuSource]
GIB = 1024**3
PODS = {
    101: "1d2c3b4a-0000-4000-8000-00000000a001",
    102: "1d2c3b4a-0000-4000-8000-00000000a002",
    103: "1d2c3b4a-0000-4000-8000-00000000a003",
}
INSTANCES = [(1, "3g.40gb", 3, 40), (2, "2g.20gb", 2, 20), (5, "1g.10gb", 1, 10)]


def pod_tree(root: Path) -> Path:
    """A procfs with one process per pod, in the kubelet's cgroup layout."""
    for pid, pod in PODS.items():
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "comm").write_text("python\n")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{os.getuid()}\t0\t0\t0\n")
        slice_name = pod.replace("-", "_")
        (d / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-pod{slice_name}.slice/cri-containerd-{'c' * 64}.scope\n"
        )
    return root


def split(state: FakeNvmlState, gpu: int = 0) -> None:
    instances = state.split_mig(gpu, INSTANCES)
    for instance, pid, busy in zip(instances, PODS, (90.0, 10.0, 85.0), strict=True):
        instance.procs = {pid: 4 * GIB}
        instance.mem_used = 6 * GIB
        instance.gpm_sm_active = busy


def ticks(fake: FakeNvml, gpu_source: GpuSource, count: int, start: float = 1000.0) -> list[pb.NodeReport]:
    out = []
    assert fake.state is not None
    for t in range(count):
        fake.state.advance(1.0)
        fake.write()
        report = pb.NodeReport(time_unix_seconds=start + t)
        gpu_source.collect(report)
        out.append(report)
    return out


def test_three_instances_held_by_three_pods_are_three_gpus(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path
) -> None:
    state = fake_nvml.load(h100_sxm5())
    split(state)
    fake_nvml.write()
    gpu_source = make_gpu_source(pod_tree(tmp_path / "proc"))
    info = pb.NodeInfo()
    gpu_source.scan(info)
    gpu = info.gpu.gpus[0]
    assert gpu.mig_enabled is True
    assert [(i.gpu_instance_id, i.compute_instance_id, i.profile, i.slice_count) for i in gpu.mig_instances] == [
        (1, 0, "3g.40gb", 3), (2, 0, "2g.20gb", 2), (5, 0, "1g.10gb", 1),
    ]  # fmt: skip
    assert [i.uuid for i in gpu.mig_instances] == [i.uuid for i in state.gpus[0].mig]
    assert gpu.mig_instances[0].memory_total_bytes == 40 * GIB - 256 * 1024**2
    assert gpu.mig_instances[2].multiprocessor_count == 16
    assert all(g.mig_enabled is False for g in info.gpu.gpus[1:])  # MIG-capable, not split
    first, second = ticks(fake_nvml, gpu_source, 2)
    sample = second.gpus[0]
    assert not sample.HasField("utilization_gpu_ratio")  # NVML has none in MIG mode
    assert len(sample.mig_instances) == 3
    for instance, pid, busy in zip(sample.mig_instances, PODS, (0.90, 0.10, 0.85), strict=True):
        assert (instance.index, instance.memory_used_bytes) == (0, 6 * GIB)
        assert [p.pid for p in instance.processes] == [pid]
        assert instance.processes[0].job.k8s_pod_uid == PODS[pid]
        assert instance.sm_active_ratio == pytest.approx(busy)
        assert instance.mig_profile and instance.HasField("gpu_instance_id")
    assert not first.gpus[0].mig_instances[0].HasField("sm_active_ratio")  # GPM needs two samples
    assert {p.pid for p in sample.processes} == set(PODS)  # the GPU lists its instances' processes
    assert not any(g.mig_instances for g in second.gpus[1:])


def test_mig_mode_and_instances_are_reread_at_a_rescan(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path
) -> None:
    state = fake_nvml.load(h100_sxm5())
    split(state)
    fake_nvml.write()
    gpu_source = make_gpu_source(pod_tree(tmp_path / "proc"))
    gpu_source.scan(pb.NodeInfo())
    ticks(fake_nvml, gpu_source, 2)
    # The operator turns MIG off on GPU 0 and splits GPU 3; the agent keeps running.
    g0 = state.gpus[0]
    g0.mig_mode, g0.mig, g0.util_gpu = 0, [], 70
    split(state, 3)
    fake_nvml.write()
    info = pb.NodeInfo()
    gpu_source.scan(info)
    assert info.gpu.gpus[0].mig_enabled is False and not info.gpu.gpus[0].mig_instances
    assert len(info.gpu.gpus[3].mig_instances) == 3
    (report,) = ticks(fake_nvml, gpu_source, 1, start=1010.0)
    assert report.gpus[0].utilization_gpu_ratio == pytest.approx(0.70)  # asked again: a fresh handle
    assert not report.gpus[0].mig_instances and len(report.gpus[3].mig_instances) == 3
    # An instance destroyed between rescans: the next tick asks for one.
    state.gpus[3].mig = state.gpus[3].mig[:2]
    fake_nvml.write()
    assert not gpu_source.needs_rescan
    ticks(fake_nvml, gpu_source, 1, start=1020.0)
    assert gpu_source.needs_rescan
    info = pb.NodeInfo()
    gpu_source.scan(info)
    assert len(info.gpu.gpus[3].mig_instances) == 2


def test_an_xid_in_an_instance_names_its_process(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path
) -> None:
    import time

    state = fake_nvml.load(h100_sxm5())
    split(state)
    fake_nvml.write()
    gpu_source = make_gpu_source(pod_tree(tmp_path / "proc"))
    gpu_source.scan(pb.NodeInfo())
    ticks(fake_nvml, gpu_source, 1)
    state.inject_xid(0, 31, instance=(2, 0))
    fake_nvml.write()
    deadline = time.monotonic() + 5
    events: list[pb.Event] = []
    while not events and time.monotonic() < deadline:
        time.sleep(0.05)
        report = pb.NodeReport(time_unix_seconds=1005.0)
        gpu_source.collect(report)
        events = [e for e in report.events if e.kind == "xid"]
    (xid,) = events
    assert (xid.attributes["gpu_instance_id"], xid.attributes["pid"], xid.attributes["job"]) == ("2", "102", PODS[102])
    assert "pid 102 python" in xid.message
    assert report.gpus[0].xid_errors_total == {"31": 1}


def test_profiles_and_slices_read_from_the_names_nvml_gives() -> None:
    assert profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert profile_of("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb") == "1c.3g.20gb"
    assert profile_of("NVIDIA H100 80GB HBM3") == ""
    assert (slices_of("3g.40gb"), slices_of("1c.3g.20gb"), slices_of("1g.10gb+me"), slices_of("")) == (3, 3, 1, None)
