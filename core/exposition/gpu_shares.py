"""Who uses a shared GPU: each process's and each pod's share of its SM and memory time.

From ``GpuProcess.sm_utilization_ratio`` and ``memory_utilization_ratio`` (nvmlDeviceGetProcessUtilization,
``agent/gpu/process_share.py``). The GPU's own labels are dcgm-exporter's (``dcgm.gpu_labels``)
without the job of its first process: on a time-sliced GPU that job is only one of several. Each
process series adds ``pid``, ``process`` and the process's own job (``hpc_job``, ``pod_uid``,
``container_id`` from its cgroup); a pod's series is the sum of its processes', by ``pod_uid``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from nodeagent.core.exposition.text import TextFamily, label, label_text
from nodeagent.v1 import nodeagent_pb2 as pb


def gpu_share_families(report: pb.NodeReport, labels_by_gpu: Mapping[int, dict[str, str]]) -> Iterator[TextFamily]:
    sm = TextFamily(
        "nodeagent_gpu_process_sm_utilization_ratio", "gauge",
        "The process's share of the GPU's SM time over the latest tick (nvmlDeviceGetProcessUtilization).",
    )  # fmt: skip
    memory = TextFamily(
        "nodeagent_gpu_process_memory_utilization_ratio", "gauge",
        "The process's share of the GPU's memory-controller time over the latest tick.",
    )  # fmt: skip
    pod = TextFamily(
        "nodeagent_gpu_pod_sm_utilization_ratio", "gauge",
        "A pod's share of the GPU's SM time over the latest tick: the sum of its processes' shares.",
    )  # fmt: skip
    for gpu in report.gpus:
        if gpu.index not in labels_by_gpu or gpu.lost or not gpu.processes:
            continue
        base: str | None = None
        pods: dict[str, float] = {}
        for process in gpu.processes:
            if not process.HasField("sm_utilization_ratio"):
                continue
            if base is None:
                base = label_text(labels_by_gpu[gpu.index])
            job = process.job
            own = {"pid": str(process.pid), "process": process.name}
            if job.slurm_job_id:
                own["hpc_job"] = job.slurm_job_id
            if job.k8s_pod_uid:
                own["pod_uid"] = job.k8s_pod_uid
                pods[job.k8s_pod_uid] = pods.get(job.k8s_pod_uid, 0.0) + process.sm_utilization_ratio
            if job.container_id:
                own["container_id"] = job.container_id
            labels = f"{base},{label_text(own)}"
            sm.add(labels, process.sm_utilization_ratio)
            if process.HasField("memory_utilization_ratio"):
                memory.add(labels, process.memory_utilization_ratio)
        for uid, share in sorted(pods.items()):
            pod.add(f"{base},{label('pod_uid', uid)}", min(1.0, share))
    yield from (sm, memory, pod)
