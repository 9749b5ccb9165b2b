"""Xids that count: per GPU, how many of each Xid the agent has seen since it started, and on each
Xid event the process it hit.

dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS`` is the last Xid's value: a second Xid 79, or an Xid 13
followed by an Xid 31, shows as one change or none. The report instead carries a cumulative count
per Xid number (``GpuSample.xid_errors_total``; ``nodeagent_gpu_xid_errors_total{xid=...}`` on
``/metrics``), beside the events. NVML's Xid event says which GPU (and MIG instance) but not which
process: the event is given the processes on that GPU or instance in the same tick (``pid`` when
one, ``pids`` for all, with the job of the first), which is who an Xid 13 or 31 usually belongs to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from nodeagent.v1 import nodeagent_pb2 as pb

MAX_PIDS = 16  # named on one event; a GPU shared by more lists the first ones


class XidLedger:
    """Counts by GPU UUID (an index can change at a rescan, a board's UUID does not)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, Counter[str]] = {}

    def record(self, events: Iterable[pb.Event], gpus: Sequence[pb.GpuSample]) -> None:
        """Count this tick's Xid events and name on each the processes of the GPU it hit; then
        write every GPU's counts into its sample."""
        by_index = {g.index: g for g in gpus}
        for event in events:
            if event.kind != "xid" or not event.subject.startswith("gpu:") or not event.subject[4:].isdigit():
                continue
            xid = event.attributes.get("xid", "")
            uuid = event.attributes.get("uuid", "")
            gpu = by_index.get(int(event.subject[4:]))
            if gpu is not None:
                uuid = uuid or gpu.uuid
                _attribute(event, _hit(gpu, event.attributes.get("gpu_instance_id")))
            if xid.isdigit() and uuid:
                self._counts.setdefault(uuid, Counter())[xid] += 1
        for gpu in gpus:
            counts = self._counts.get(gpu.uuid)
            if counts:
                gpu.xid_errors_total.update(counts)

    def retain(self, uuids: set[str]) -> None:
        for uuid in [u for u in self._counts if u not in uuids]:
            del self._counts[uuid]


def _hit(gpu: pb.GpuSample, gpu_instance: str | None) -> pb.GpuSample:
    """The MIG instance an event names, else the GPU."""
    if gpu_instance is not None and gpu_instance.isdigit():
        for instance in gpu.mig_instances:
            if instance.gpu_instance_id == int(gpu_instance):
                return instance
    return gpu


def _attribute(event: pb.Event, target: pb.GpuSample) -> None:
    processes = list(target.processes)
    if not processes:
        return
    event.attributes["pids"] = ",".join(str(p.pid) for p in processes[:MAX_PIDS])
    first = processes[0]
    if len(processes) == 1:
        event.attributes["pid"] = str(first.pid)
        if first.name:
            event.attributes["process"] = first.name
    job = first.job
    named = job.job_key or job.slurm_job_id or job.k8s_pod_uid or job.container_id
    if named:
        event.attributes["job"] = named
    event.message += f" (pid {first.pid}{' ' + first.name if first.name else ''}" + (
        f" and {len(processes) - 1} more)" if len(processes) > 1 else ")"
    )
