"""Each report names the Kubernetes namespace a GPU's processes are billed to: the namespace of the
pod the kubelet allocated the GPU (or the MIG device) to, stamped on the processes' ``JobRef``.

The reports are the GPU sampler's own, over the fake NVML; the kubelet is the fake of
tests/fakes/kubelet.py on a unix socket; the last test runs ``nodeagent run`` and reads the report
back from a collector."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from nodeagent.agent.exposition.pod_resources import PodResources, stamp_namespaces
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import Collector, free_port, processes
from tests.fakes.kubelet import FakeKubelet, serving
from tests.fakes.nvml.plugin import STATE_ENV, FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, h100_sxm5
from tests.fakes.trees import REPO

GIB = 1024**3
# GPU 0: a pod's (ml); GPU 1: a time-sliced pod's (serve); GPU 2: no pod's; GPU 3 split in two MIG
# instances, the first a pod's (tenant-a), the second no pod's.
PIDS = {0: 4100, 1: 4101, 2: 4102}
MIG_PIDS = (4130, 4131)


def _state() -> FakeNvmlState:
    state = h100_sxm5()
    for gpu, pid in PIDS.items():
        state.gpus[gpu].procs = {pid: GIB}
    instances = state.split_mig(3, [(1, "3g.40gb", 3, 40), (2, "2g.20gb", 2, 20)])
    for instance, pid in zip(instances, MIG_PIDS, strict=True):
        instance.procs = {pid: GIB}
    return state


def _kubelet(state: FakeNvmlState) -> FakeKubelet:
    kubelet = FakeKubelet()
    kubelet.allocate("train-0", "ml", "trainer", "nvidia.com/gpu", state.gpus[0].uuid)
    kubelet.allocate("infer-7", "serve", "server", "nvidia.com/gpu.shared", f"{state.gpus[1].uuid}::3")
    kubelet.allocate("train-0", "ml", "trainer", "example.com/fpga", state.gpus[2].uuid)  # not a GPU resource
    kubelet.allocate("small-1", "tenant-a", "main", "nvidia.com/mig-3g.40gb", state.gpus[3].mig[0].uuid)
    return kubelet


def _namespaces(report: pb.NodeReport) -> dict[int, str]:
    """Each process's namespace, by pid, from the GPUs' and the MIG instances' process lists; a
    pid listed twice (a MIG GPU lists its instances' processes) must read the same in both."""
    seen: dict[int, str] = {}
    for gpu in report.gpus:
        for sample in (gpu, *gpu.mig_instances):
            for process in sample.processes:
                assert seen.setdefault(process.pid, process.job.k8s_namespace) == process.job.k8s_namespace
    return seen


@pytest.fixture
def sampled(fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]) -> pb.NodeReport:
    """One report of the GPU sampler over ``_state()``, as the daemon's tick gets it."""
    fake_nvml.load(_state())
    fake_nvml.write()
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=1000.0)
    gpu_source.collect(report)
    return report


def test_the_processes_of_an_allocated_gpu_or_mig_device_get_its_pods_namespace(
    sampled: pb.NodeReport, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    assert fake_nvml.state is not None
    with serving(_kubelet(fake_nvml.state), tmp_path / "kubelet.sock") as socket:
        pods = PodResources(str(socket))
        pods.refresh()
    stamp_namespaces(sampled, pods.namespaces())
    assert _namespaces(sampled) == {
        PIDS[0]: "ml", PIDS[1]: "serve", PIDS[2]: "", MIG_PIDS[0]: "tenant-a", MIG_PIDS[1]: "",
    }  # fmt: skip
    (mig_gpu,) = [g for g in sampled.gpus if g.mig_instances]
    assert {p.pid for p in mig_gpu.processes} == set(MIG_PIDS)  # the GPU's own list is stamped too


def test_without_the_socket_nothing_is_stamped(sampled: pb.NodeReport, tmp_path: Path) -> None:
    before = sampled.SerializeToString()
    pods = PodResources(str(tmp_path / "absent.sock"))
    pods.refresh()
    stamp_namespaces(sampled, pods.namespaces())
    assert sampled.SerializeToString() == before
    assert set(_namespaces(sampled).values()) == {""}


def test_a_gpu_no_pod_holds_keeps_what_its_processes_had() -> None:
    report = pb.NodeReport()
    gpu = report.gpus.add(index=0, uuid="GPU-a")
    gpu.processes.add(pid=1).job.slurm_job_id = "7"
    report.gpus.add(index=1, uuid="").processes.add(pid=2)  # a GPU whose UUID NVML did not give
    stamp_namespaces(report, {"GPU-b": "ns", "": "x"})
    assert [p.job.k8s_namespace for g in report.gpus for p in g.processes] == ["", ""]
    assert report.gpus[0].processes[0].job.slurm_job_id == "7"


def test_a_gpu_pods_of_two_namespaces_share_bills_neither(
    sampled: pb.NodeReport, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """Time slicing: pods of two namespaces on one GPU. The /metrics labels keep the first pod
    listed, as dcgm-exporter does; the bill names no namespace rather than charge one for both."""
    assert fake_nvml.state is not None
    kubelet = _kubelet(fake_nvml.state)
    kubelet.allocate("infer-8", "other-team", "server", "nvidia.com/gpu.shared", f"{fake_nvml.state.gpus[1].uuid}::4")
    with serving(kubelet, tmp_path / "kubelet.sock") as socket:
        pods = PodResources(str(socket))
        pods.refresh()
    stamp_namespaces(sampled, pods.namespaces())
    assert _namespaces(sampled)[PIDS[1]] == ""
    assert pods.labels()[fake_nvml.state.gpus[1].uuid]["namespace"] == "serve"
    assert _namespaces(sampled)[PIDS[0]] == "ml"  # a GPU of one namespace keeps it


def test_the_daemon_s_reports_carry_the_namespace(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """``nodeagent run`` over the fake NVML and the fake kubelet: the reports the collector stores
    carry the namespace on the allocated GPUs' processes, and on no other."""
    state = _state()
    state_path = tmp_path / "nvml.state"
    state.write(state_path)
    collector = Collector(db=tmp_path / "c.db", port=free_port(), workers=1)
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir), STATE_ENV: str(state_path), "PYTHONUNBUFFERED": "1"}
    with serving(_kubelet(state), tmp_path / "kubelet.sock") as socket, processes() as started:
        started.append(collector.start())
        command = [
            sys.executable, "-m", "nodeagent.agent", "run", "--collector", collector.address, "--node-id", "k8s-1",
            "--interval", "0.2", "--deadline", "300", "--pod-resources-socket", str(socket),
            "--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband",
        ]  # fmt: skip
        with (tmp_path / "agent.log").open("w") as log:
            agent = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            latest = _wait_for_report(collector.address, "k8s-1", lambda r: "ml" in _namespaces(r).values())
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=60) == 0, (tmp_path / "agent.log").read_text()[-2000:]
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait(timeout=30)
    assert _namespaces(latest) == {
        PIDS[0]: "ml", PIDS[1]: "serve", PIDS[2]: "", MIG_PIDS[0]: "tenant-a", MIG_PIDS[1]: "",
    }  # fmt: skip


def _wait_for_report(address: str, node: str, wanted: Callable[[pb.NodeReport], bool]) -> pb.NodeReport:
    """The collector's latest report of ``node`` once ``wanted`` holds of it (the pod-resources
    thread answers after the first ticks); 120 s at most."""
    deadline = time.monotonic() + 120
    with grpc.insecure_channel(address) as channel:
        query = pb_grpc.QueryStub(channel)
        while True:
            try:
                latest = query.LatestReport(pb.LatestReportRequest(node_id=node), timeout=5)
                if wanted(latest):
                    return latest
            except grpc.RpcError:
                pass  # not stored yet
            if time.monotonic() > deadline:
                raise AssertionError(f"no report of {node} as wanted within 120 s")
            time.sleep(0.2)
