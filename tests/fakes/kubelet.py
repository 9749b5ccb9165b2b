"""A fake kubelet: ``v1.PodResourcesLister/List`` on a unix socket, answering what a test sets."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from nodeagent.podresources.v1 import api_pb2, api_pb2_grpc


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, response: api_pb2.ListPodResourcesResponse | None = None) -> None:
        self.response = response or api_pb2.ListPodResourcesResponse()
        self.hold = threading.Event()  # while set, List waits for release (a stuck kubelet)
        self.release = threading.Event()
        self.calls = 0

    def List(self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext) -> object:
        self.calls += 1
        if self.hold.is_set():
            self.release.wait(10)
        return self.response

    def allocate(self, pod: str, namespace: str, container: str, resource: str, *device_ids: str) -> None:
        """One container of a pod holding devices (GPU UUIDs for ``nvidia.com/gpu``)."""
        entry = next((p for p in self.response.pod_resources if (p.name, p.namespace) == (pod, namespace)), None)
        if entry is None:
            entry = self.response.pod_resources.add(name=pod, namespace=namespace)
        held = next((c for c in entry.containers if c.name == container), None) or entry.containers.add(name=container)
        held.devices.add(resource_name=resource, device_ids=list(device_ids))


@contextlib.contextmanager
def serving(kubelet: FakeKubelet, socket: Path) -> Iterator[Path]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield socket
    finally:
        kubelet.release.set()
        server.stop(grace=None)
