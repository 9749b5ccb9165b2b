"""The gate names a GPU's job by the multi-node job key first: the same job on every node, and
another job taking the GPU starts a new warm-up even where the pod or Slurm id stays."""

from __future__ import annotations

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.gate import new_job
from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.v1 import nodeagent_pb2 as pb

POD = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"


def _gpu(*refs: pb.JobRef) -> pb.GpuSample:
    gpu = pb.GpuSample(index=0)
    for pid, ref in enumerate(refs, start=1):
        gpu.processes.add(pid=pid, job=ref)
    return gpu


def test_the_job_key_names_the_job_before_the_pod() -> None:
    track = GpuTrack(0, DetectorConfig(), None)
    new_job(track, _gpu(pb.JobRef(job_key="torch/run-1", k8s_pod_uid=POD), pb.JobRef(slurm_job_id="77")), 100.0)
    assert track.jobs == ("77", "torch/run-1")
    new_job(track, _gpu(pb.JobRef(job_key="hopper/77", slurm_job_id="77")), 110.0)
    assert track.jobs == ("hopper/77",)


def test_a_new_job_key_in_the_same_pod_warms_up_again() -> None:
    config = DetectorConfig()
    track = GpuTrack(0, config, None)
    new_job(track, _gpu(pb.JobRef(job_key="torch/run-1", k8s_pod_uid=POD)), 100.0)
    track.in_warmup = False
    new_job(track, _gpu(pb.JobRef(job_key="torch/run-1", k8s_pod_uid=POD)), 110.0)
    assert not track.in_warmup
    new_job(track, _gpu(pb.JobRef(job_key="torch/run-2", k8s_pod_uid=POD)), 120.0)
    assert track.in_warmup == (config.warmup_seconds > 0) and track.assigned_since == 120.0
