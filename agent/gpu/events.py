"""XID and double-bit ECC events, waited for in a background thread.

NVML delivers these through an event set that one must block on; the sampler must not. A thread
waits with a short timeout (so ``stop`` takes effect within it), turns each event into a
``pb.Event`` and queues it; the gpu source drains the queue into the next report.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.agent.gpu import nvml_events
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.gpu.nvml_types import GpuEvent
from nodeagent.v1 import nodeagent_pb2 as pb

WAIT_MS = 250
QUEUE_LIMIT = 1024
# Xids that mean the GPU or its data can no longer be trusted (NVIDIA's Xid catalogue):
# 48 double-bit ECC, 62 internal micro-controller halt, 64 row-remap failure, 74 NVLink error,
# 79 fallen off the bus, 94/95 contained/uncontained ECC, 119/120 GSP errors.
CRITICAL_XIDS = frozenset({48, 62, 64, 74, 79, 94, 95, 119, 120})


@dataclass(frozen=True, slots=True)
class WatchedGpu:
    index: int
    uuid: str
    gpu: Gpu


class EventWatcher:
    """Registers the GPUs for XID and double-bit ECC events and waits for them in a thread."""

    def __init__(self, gpus: Sequence[WatchedGpu]) -> None:
        self._by_handle = {w.gpu.handle_id: w for w in gpus if not w.gpu.lost}
        self._queue: deque[pb.Event] = deque(maxlen=QUEUE_LIMIT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: nvml_events.EventSet | None = None
        self.registered: dict[int, int] = {}  # GPU index -> event types registered

    def start(self) -> bool:
        """Create the event set and start waiting; False when NVML offers no events here."""
        event_set = nvml_events.EventSet.create()
        if event_set is None:
            return False
        for watched in self._by_handle.values():
            types = event_set.register(watched.gpu, nvml_events.EVENT_XID | nvml_events.EVENT_DOUBLE_BIT_ECC)
            if types:
                self.registered[watched.index] = types
        if not self.registered:
            event_set.free()
            return False
        self._set = event_set
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()
        return True

    def drain(self) -> list[pb.Event]:
        """Events received since the last drain, oldest first."""
        out: list[pb.Event] = []
        while True:
            try:
                out.append(self._queue.popleft())
            except IndexError:
                return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_MS / 1000.0 * 4)
            if self._thread.is_alive():
                # Still inside nvmlEventSetWait: freeing the set under it could crash the
                # process; leave it to NVML's shutdown.
                self._set = None
            self._thread = None
        if self._set is not None:
            self._set.free()
            self._set = None

    def _run(self) -> None:
        assert self._set is not None
        while not self._stop.is_set():
            started = time.monotonic()
            event = self._set.wait(WAIT_MS)
            if event is None:
                # A timeout took WAIT_MS; an error returns at once: pace the retries.
                if time.monotonic() - started < WAIT_MS / 2000.0:
                    self._stop.wait(WAIT_MS / 1000.0)
                continue
            watched = self._by_handle.get(event.handle_id)
            if watched is not None:
                self._queue.append(to_event(watched, event))


def to_event(watched: WatchedGpu, event: GpuEvent) -> pb.Event:
    subject = f"gpu:{watched.index}"
    attributes = {"uuid": watched.uuid}
    if event.gpu_instance_id is not None:  # the MIG instance it hit
        attributes["gpu_instance_id"] = str(event.gpu_instance_id)
        if event.compute_instance_id is not None:
            attributes["compute_instance_id"] = str(event.compute_instance_id)
    if event.event_type & nvml_events.EVENT_XID:
        xid = event.data
        attributes["xid"] = str(xid)
        return pb.Event(
            time_unix_seconds=event.time_unix_seconds,
            kind="xid",
            severity="critical" if xid in CRITICAL_XIDS else "warning",
            subject=subject,
            message=f"Xid {xid} on GPU {watched.index}",
            attributes=attributes,
        )
    if event.event_type & nvml_events.EVENT_DOUBLE_BIT_ECC:
        return pb.Event(
            time_unix_seconds=event.time_unix_seconds,
            kind="ecc_double_bit",
            severity="critical",
            subject=subject,
            message=f"double-bit ECC error on GPU {watched.index}",
            attributes=attributes,
        )
    attributes["event_type"] = hex(event.event_type)
    return pb.Event(
        time_unix_seconds=event.time_unix_seconds,
        kind="gpu_event",
        severity="info",
        subject=subject,
        message=f"NVML event {event.event_type:#x} on GPU {watched.index}",
        attributes=attributes,
    )
