"""What a report says of a GPU at a scan (``describe_gpu``: the hello's ``GpuInfo``) and of the job
a GPU process runs (``job_ref``), built from what the NVML queries and the process reader found."""

from __future__ import annotations

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.processes import ProcessInfo
from nodeagent.v1 import nodeagent_pb2 as pb

_ARCHITECTURES = {7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell", 13: "rubin"}


def describe_gpu(index: int, uuid: str, gpu: Gpu) -> pb.GpuInfo:
    """What the node's hello says of one GPU: identity, memory, PCIe, NVLink and C2C links, GPM."""
    ident = gpu.identity()
    info = pb.GpuInfo(index=index, uuid=uuid, name=ident.name or "", serial=ident.serial or "")
    info.pci_bus_id = ident.pci_bus_id or ""
    if ident.architecture is not None:
        info.architecture = _ARCHITECTURES.get(ident.architecture, str(ident.architecture))
    memory = gpu.memory()
    if memory is not None:
        info.memory_total_bytes = memory.total_bytes
    if ident.pcie_max_generation is not None:
        info.pcie_max_generation = ident.pcie_max_generation
    if ident.pcie_max_width is not None:
        info.pcie_max_width = ident.pcie_max_width
    links = int(gpu.field_values(gpu_fields.LINK_COUNT_REQUEST).get((gpu_fields.FI_NVLINK_LINK_COUNT, 0), 0))
    info.nvlink_count = links
    if links:
        speed = gpu_fields.link_speed_bytes(gpu.field_values(gpu_fields.link_speed_requests(links)), links)
        if speed is not None:
            info.nvlink_speed_bytes_per_second = speed
    info.gpm_supported = ident.gpm_supported
    c2c = int(gpu.field_values(gpu_fields.C2C_COUNT_REQUEST).get((gpu_fields.FI_C2C_LINK_COUNT, 0), 0))
    if c2c:
        info.c2c_link_count = c2c
        speed = gpu_fields.c2c_speed_bytes(gpu.field_values(gpu_fields.c2c_speed_requests(c2c)), c2c)
        if speed is not None:
            info.c2c_link_speed_bytes_per_second = speed
    return info


def job_ref(info: ProcessInfo) -> pb.JobRef:
    """The job a GPU process belongs to, as a sample names it: its launcher's ids, key, ranks and
    Slurm account (its Kubernetes namespace is stamped later, by the daemon)."""
    job, identity = info.job, info.identity
    ref = pb.JobRef(
        slurm_job_id=job.slurm_job_id,
        k8s_pod_uid=job.k8s_pod_uid,
        container_id=job.container_id,
        cgroup=job.cgroup,
        job_key=identity.key,
        account=identity.account,
    )
    ranks = identity.ranks
    if ranks.world_size is not None:
        ref.world_size = ranks.world_size
    if ranks.rank is not None:
        ref.rank = ranks.rank
    if ranks.local_rank is not None:
        ref.local_rank = ranks.local_rank
    if ranks.node_rank is not None:
        ref.node_rank = ranks.node_rank
    return ref
