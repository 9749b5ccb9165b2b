"""The GPU families carry the kubelet's pod, namespace and container, as dcgm-exporter's do.

A fake kubelet (tests/fakes/kubelet.py) serves ``v1.PodResourcesLister/List`` on a unix socket in
tmp_path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.exposition.pod_resources import PodResources
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.kubelet import FakeKubelet, serving

UUIDS = ("GPU-aaaa", "GPU-bbbb", "GPU-cccc")


def _kubelet() -> FakeKubelet:
    kubelet = FakeKubelet()
    kubelet.allocate("train-0", "ml", "trainer", "nvidia.com/gpu", UUIDS[0])
    kubelet.allocate("train-0", "ml", "trainer", "example.com/fpga", UUIDS[2])  # not a GPU resource
    kubelet.allocate("infer-7", "serve", "server", "nvidia.com/gpu.shared", f"{UUIDS[1]}::3")  # time-sliced
    return kubelet


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[FakeKubelet, Path]]:
    fake = _kubelet()
    with serving(fake, tmp_path / "kubelet.sock") as socket:
        yield fake, socket


def _page(pods: PodResources | None) -> str:
    telemetry = AgentTelemetry("n", 1.0)
    report = pb.NodeReport(time_unix_seconds=1.0)
    for index, uuid in enumerate(UUIDS):
        report.info.gpu.gpus.add(index=index, uuid=uuid)
        gpu = report.gpus.add(index=index, uuid=uuid, temperature_celsius=40)
        gpu.nvlinks.add(link=0, active=True)
    telemetry.publish(report)
    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    sender = type("NoSender", (), {"connected_to": None, "reconnects_total": 0})()
    metrics = AgentMetrics(telemetry, spool, sender=sender, targets=())  # type: ignore[arg-type]
    return AgentExposition(metrics, ("gpu", "nvlink"), pods).render().decode()


def _labels_by_gpu(text: str, family: str) -> dict[str, dict[str, str]]:
    return {
        s.labels["gpu"]: s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == family
    }


def test_gpu_series_carry_the_kubelets_pod_namespace_and_container(kubelet: tuple[FakeKubelet, Path]) -> None:
    _, socket = kubelet
    pods = PodResources(str(socket))
    pods.refresh()
    text = _page(pods)
    for family in ("DCGM_FI_DEV_GPU_TEMP", "nodeagent_gpu_nvlink_up"):
        labels = _labels_by_gpu(text, family)
        assert {k: labels["0"][k] for k in ("pod", "namespace", "container")} == {
            "pod": "train-0", "namespace": "ml", "container": "trainer",
        }  # fmt: skip
        assert (labels["1"]["pod"], labels["1"]["namespace"], labels["1"]["container"]) == (
            "infer-7",
            "serve",
            "server",
        )
        assert not {"pod", "namespace", "container"} & set(labels["2"]), "an FPGA allocation is not the GPU's"
        assert labels["0"]["UUID"] == UUIDS[0]


def test_without_the_socket_nothing_is_asked_and_no_gpu_has_pod_labels(tmp_path: Path) -> None:
    pods = PodResources(str(tmp_path / "absent.sock"))
    pods.refresh()
    assert pods.labels() == {}
    labels = _labels_by_gpu(_page(pods), "DCGM_FI_DEV_GPU_TEMP")
    assert len(labels) == 3
    assert not any("pod" in gpu for gpu in labels.values())


def test_a_stuck_kubelet_never_holds_up_a_scrape_and_the_last_answer_stays(kubelet: tuple[FakeKubelet, Path]) -> None:
    servicer, socket = kubelet
    pods = PodResources(str(socket), refresh_seconds=0.05, timeout_seconds=1.0)
    pods.refresh()
    servicer.hold.set()  # from now on List hangs until its deadline
    pods.start()
    try:
        deadline = time.monotonic() + 10
        while servicer.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert servicer.calls >= 2, "the reader thread never asked again"
        started = time.monotonic()
        text = _page(pods)  # while the reader waits on the kubelet
        assert time.monotonic() - started < 0.5
        assert _labels_by_gpu(text, "DCGM_FI_DEV_GPU_TEMP")["0"]["pod"] == "train-0"
    finally:
        servicer.release.set()
        pods.close()
