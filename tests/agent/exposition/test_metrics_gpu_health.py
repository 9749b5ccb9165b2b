"""The agent's /metrics for the hardware rented now, through the fake NVML: MIG instances as series
of their own with dcgm-exporter's GPU_I labels and their pods, the NVLink fabric, Xids that count
(and dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT shape), suspect readings and per-process shares."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.exposition.pod_resources import gpu_owners
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.podresources.v1 import api_pb2
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.agent.gpu.test_gpu_mig import PODS, pod_tree, split
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FakeNvmlState, b200, fabric_health_mask, gb200

GIB = 1024**3


class _NoSender:
    connected_to = None
    reconnects_total = 0
    reports_resent_total = 0


class _Pods:
    def __init__(self, labels: dict[str, dict[str, str]]) -> None:
        self._labels = labels

    def labels(self) -> dict[str, dict[str, str]]:
        return self._labels


def _page(
    fake: FakeNvml, gpu_source: GpuSource, ticks: int = 2, groups: tuple[str, ...] = ("gpu",), pods: Any = None,
    between: Callable[[int], None] | None = None,
) -> tuple[str, AgentTelemetry]:  # fmt: skip
    info = pb.NodeInfo(hostname="tray-1")
    gpu_source.scan(info)
    telemetry = AgentTelemetry("tray-1", 1.0)
    assert fake.state is not None
    for t in range(ticks):
        if between is not None:
            between(t)
        fake.state.advance(1.0)
        fake.write()
        report = pb.NodeReport(time_unix_seconds=1000.0 + t)
        if t == 0:
            report.info.CopyFrom(info)
        gpu_source.collect(report)
        telemetry.publish(report)
    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    metrics = AgentMetrics(telemetry, spool, sender=_NoSender(), targets=())  # type: ignore[arg-type]
    return AgentExposition(metrics, groups, pods).render().decode(), telemetry


def _samples(text: str, name: str) -> list[Any]:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_mig_instances_are_series_with_dcgm_exporters_labels_and_their_pods(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource], tmp_path: Path
) -> None:
    state = fake_nvml.load(b200())
    split(state, 2)
    fake_nvml.write()
    kubelet = api_pb2.ListPodResourcesResponse()
    for n, instance in enumerate(state.gpus[2].mig):
        pod = kubelet.pod_resources.add(name=f"tenant-{n}", namespace="team")
        container = pod.containers.add(name="main")
        container.devices.add(resource_name=f"nvidia.com/mig-{instance.profile}", device_ids=[instance.uuid])
    page, _ = _page(fake_nvml, make_gpu_source(pod_tree(tmp_path / "proc")), pods=_Pods(gpu_owners(kubelet)))
    used = [s for s in _samples(page, "DCGM_FI_DEV_FB_USED") if s.labels["gpu"] == "2"]
    by_instance = {s.labels.get("GPU_I_ID"): s for s in used}
    assert set(by_instance) == {None, "1", "2", "5"}  # the GPU itself and its three instances
    for gi, profile, n, pid in (("1", "3g.40gb", 0, 101), ("2", "2g.20gb", 1, 102), ("5", "1g.10gb", 2, 103)):
        s = by_instance[gi]
        assert s.value == 6 * 1024  # MiB
        assert s.labels["GPU_I_PROFILE"] == profile
        assert s.labels["UUID"] == state.gpus[2].uuid  # the GPU's UUID, as dcgm-exporter writes it
        assert (s.labels["pod"], s.labels["namespace"], s.labels["container"]) == (f"tenant-{n}", "team", "main")
        assert s.labels["pod_uid"] == PODS[pid]
    active = {
        s.labels.get("GPU_I_ID"): s.value for s in _samples(page, "DCGM_FI_PROF_SM_ACTIVE") if s.labels["gpu"] == "2"
    }
    assert active == {None: 0.0, "1": 0.9, "2": 0.1, "5": 0.85}
    # GPUs without MIG have no GPU_I labels, and no instance gets an XID series of its own.
    assert not [s for s in used if s.labels["gpu"] != "2" and "GPU_I_ID" in s.labels]
    assert not [s for s in _samples(page, "DCGM_FI_DEV_XID_ERRORS") if "GPU_I_ID" in s.labels]
    assert not [s for s in _samples(page, "DCGM_FI_DEV_GPU_UTIL") if s.labels["gpu"] == "2"]  # N/A in MIG mode


def test_a_fabric_fault_on_one_gpu_of_eight_is_its_series(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    state: FakeNvmlState = fake_nvml.load(gb200(8))
    state.gpus[6].fabric_health = fabric_health_mask(degraded_bandwidth=True)
    fake_nvml.write()
    page, _ = _page(fake_nvml, make_gpu_source())
    healthy = {s.labels["gpu"]: s.value for s in _samples(page, "nodeagent_gpu_fabric_healthy")}
    assert healthy == {str(i): (0.0 if i == 6 else 1.0) for i in range(8)}
    assert {s.labels["gpu"]: s.value for s in _samples(page, "nodeagent_gpu_fabric_registered")} == {
        str(i): 1.0 for i in range(8)
    }
    degraded = {
        s.labels["gpu"]: s.value
        for s in _samples(page, "nodeagent_gpu_fabric_health_condition")
        if s.labels["condition"] == "degraded_bandwidth"
    }
    assert degraded == {str(i): (1.0 if i == 6 else 0.0) for i in range(8)}
    (info,) = [s for s in _samples(page, "nodeagent_gpu_fabric_info") if s.labels["gpu"] == "0"]
    assert (info.labels["state"], info.labels["clique_id"]) == ("completed", "32766")
    assert info.labels["cluster_uuid"] == "7c9e6679-7425-40de-944b-e07fc1f90ae7"


def test_xids_count_beside_the_last_value_and_in_dcgm_exporters_window_shape(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    state = fake_nvml.load(b200())
    fake_nvml.write()

    def inject(t: int) -> None:
        if t == 1:
            for xid in (79, 79, 13):
                state.inject_xid(4, xid)
        if t >= 1:
            time.sleep(0.6)  # the event thread polls every 20 ms; give it the tick's time

    page, telemetry = _page(fake_nvml, make_gpu_source(), ticks=4, groups=("gpu", "xid_count"), between=inject)
    counts = {(s.labels["gpu"], s.labels["xid"]): s.value for s in _samples(page, "nodeagent_gpu_xid_errors_total")}
    assert counts == {("4", "79"): 2.0, ("4", "13"): 1.0}
    last = {s.labels["gpu"]: s.value for s in _samples(page, "DCGM_FI_DEV_XID_ERRORS")}
    assert last["4"] == 13.0 and last["0"] == 0.0
    window = _samples(page, "DCGM_EXP_XID_ERRORS_COUNT")
    assert {(s.labels["gpu"], s.labels.get("xid")): s.value for s in window} == {
        **{(str(i), None): 0.0 for i in range(8) if i != 4}, ("4", "79"): 2.0, ("4", "13"): 1.0,
    }  # fmt: skip
    assert sorted(window[0].labels) == sorted(
        ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "window_size_in_ms"]
    )
    assert all(s.labels["window_size_in_ms"] == "300000" for s in window)
    # Five minutes later the window has forgotten them; the counter has not.
    later = pb.NodeReport(time_unix_seconds=time.time() + 400, gpus=telemetry.latest.gpus if telemetry.latest else [])
    telemetry.publish(later)
    assert telemetry.recent_xids == ()
    default_page = _page(fake_nvml, make_gpu_source(), ticks=1)[0]
    assert not _samples(default_page, "DCGM_EXP_XID_ERRORS_COUNT")  # opt-in, as in dcgm-exporter


def test_suspect_readings_and_process_shares_on_the_page(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    state = fake_nvml.load(b200())
    g = state.gpus[1]
    g.util_gpu, g.procs, g.proc_util = 95, {11: GIB, 12: GIB}, {11: (60, 20), 12: (30, 10)}
    fake_nvml.write()
    gpu_source = make_gpu_source()
    gpu_source._suspects.hold_seconds = 0.0  # the rule, not its patience, is what this page shows
    page, _ = _page(fake_nvml, gpu_source)
    (suspect,) = _samples(page, "nodeagent_gpu_suspect_reading")
    assert (suspect.labels["gpu"], suspect.labels["field"], suspect.value) == ("1", "sm_active_ratio", 1.0)
    shares = {s.labels["pid"]: s.value for s in _samples(page, "nodeagent_gpu_process_sm_utilization_ratio")}
    assert shares == {"11": 0.6, "12": 0.3}
    assert all(
        "gpu" in s.labels and "UUID" in s.labels for s in _samples(page, "nodeagent_gpu_process_sm_utilization_ratio")
    )
