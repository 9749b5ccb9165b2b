"""Which pod and container holds each GPU, from the kubelet's pod-resources API.

dcgm-exporter labels a GPU's series with ``pod``, ``namespace`` and ``container`` from the kubelet's
``v1.PodResourcesLister/List`` (gRPC on the unix socket ``/var/lib/kubelet/pod-resources/kubelet.sock``):
each container's devices of resource ``nvidia.com/gpu`` are GPU UUIDs. The agent asks the same,
on a thread of its own every ``refresh_seconds`` with a deadline, so neither the sampling tick
nor a scrape ever waits on the kubelet; they read the last answer. While the socket does not
exist (not a Kubernetes node, or a DaemonSet that does not mount it) nothing is asked and no
GPU has the labels.

The same answer names the namespace a GPU's processes are billed to: each tick, the daemon stamps
``JobRef.k8s_namespace`` on every process of a GPU, or of a MIG instance, that the kubelet
allocated to pods of one namespace (``gpu_namespaces``, ``stamp_namespaces``), for the
collector's ledger by namespace.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final

import grpc
import structlog

from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    # Imported once the socket exists: a node without a kubelet never loads the API's classes.
    from nodeagent.podresources.v1 import api_pb2

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_REFRESH_SECONDS: Final = 10.0
CALL_TIMEOUT_SECONDS: Final = 2.0
# The NVIDIA device plugin's resource, and its time-sliced variant (device ids "GPU-<uuid>::<n>").
GPU_RESOURCES: Final = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
# MIG devices under the mixed strategy ("nvidia.com/mig-1g.10gb"), whose device ids are MIG UUIDs.
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"

log = structlog.get_logger("nodeagent.pod_resources")

Labels = Mapping[str, Mapping[str, str]]  # GPU UUID -> {"pod", "namespace", "container"}


def gpu_owners(response: api_pb2.ListPodResourcesResponse) -> dict[str, dict[str, str]]:
    """Each allocated GPU's (and MIG device's) pod, namespace and container, by UUID, as
    dcgm-exporter names them.
    A GPU two containers share (time slicing) keeps the first one listed."""
    owners: dict[str, dict[str, str]] = {}
    for uuid, pod, container in _gpu_allocations(response):
        owners.setdefault(uuid, {"pod": pod.name, "namespace": pod.namespace, "container": container.name})
    return owners


def gpu_namespaces(response: api_pb2.ListPodResourcesResponse) -> dict[str, str]:
    """Each allocated GPU's (and MIG device's) namespace, by UUID, where every container the
    kubelet lists on it is of one namespace; "" for a GPU pods of two namespaces share (time
    slicing): a bill must not charge one namespace for another's time."""
    seen: dict[str, set[str]] = {}
    for uuid, pod, _container in _gpu_allocations(response):
        seen.setdefault(uuid, set()).add(pod.namespace)
    return {uuid: next(iter(names)) if len(names) == 1 else "" for uuid, names in seen.items()}


def _gpu_allocations(
    response: api_pb2.ListPodResourcesResponse,
) -> Iterator[tuple[str, api_pb2.PodResources, api_pb2.ContainerResources]]:
    """(GPU or MIG device UUID, pod, container) of each GPU device the kubelet allocated, in its
    order (a time-sliced device id ``GPU-<uuid>::<n>`` is the GPU's UUID)."""
    for pod in response.pod_resources:
        for container in pod.containers:
            for device in container.devices:
                name = device.resource_name
                if name in GPU_RESOURCES or name.startswith(MIG_RESOURCE_PREFIX):
                    for device_id in device.device_ids:
                        yield device_id.split("::", 1)[0], pod, container


def stamp_namespaces(report: pb.NodeReport, namespaces: Mapping[str, str]) -> None:
    """Set ``JobRef.k8s_namespace`` on the processes of each GPU and MIG instance the kubelet
    allocated (by UUID: a MIG instance's is the MIG device's) to its pod's namespace
    (``gpu_namespaces``).

    A MIG GPU's own process list (the processes of all its instances) is not allocated by its UUID
    under the mixed strategy: a process there takes the namespace its instance's copy was given.
    A GPU no pod holds leaves its processes as they were."""
    if not namespaces:
        return
    for gpu in report.gpus:
        by_pid: dict[int, str] = {}
        for instance in gpu.mig_instances:
            namespace = namespaces.get(instance.uuid, "") if instance.uuid else ""
            if namespace:
                for process in instance.processes:
                    process.job.k8s_namespace = namespace
                    by_pid[process.pid] = namespace
        own = namespaces.get(gpu.uuid, "") if gpu.uuid else ""
        for process in gpu.processes:
            namespace = own or by_pid.get(process.pid, "")
            if namespace:
                process.job.k8s_namespace = namespace


class PodResources:
    """The kubelet's GPU allocations, refreshed in the background; ``labels()`` never blocks."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        timeout_seconds: float = CALL_TIMEOUT_SECONDS,
    ) -> None:
        self.socket_path = socket_path
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self._labels: Labels = {}  # replaced whole, never mutated: readers on other threads
        self._namespaces: Mapping[str, str] = {}  # the same
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def labels(self) -> Labels:
        return self._labels

    def namespaces(self) -> Mapping[str, str]:
        """Each allocated GPU's namespace, by UUID (``gpu_namespaces``)."""
        return self._namespaces

    def refresh(self) -> None:
        """One List call (on the caller's thread); the map stays as it was when the call fails."""
        if not os.path.exists(self.socket_path):
            self._labels, self._namespaces = {}, {}
            return
        from nodeagent.podresources.v1 import api_pb2, api_pb2_grpc  # noqa: PLC0415

        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                response = api_pb2_grpc.PodResourcesListerStub(channel).List(
                    api_pb2.ListPodResourcesRequest(), timeout=self.timeout_seconds
                )
        except grpc.RpcError as err:
            if not self._failing:
                log.warning("kubelet pod-resources unavailable", socket=self.socket_path, error=str(err.code()))
            self._failing = True
            return
        if self._failing:
            log.info("kubelet pod-resources answering again", socket=self.socket_path)
        self._failing = False
        self._labels, self._namespaces = gpu_owners(response), gpu_namespaces(response)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-resources", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_seconds + 1)

    def _run(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(self.refresh_seconds):
                return
