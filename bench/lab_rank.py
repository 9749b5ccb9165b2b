"""One rank of the multi-node lab's synchronous training job (``bench/lab_cluster.py``).

Run by the lab inside its node's network namespace, with the job's torch.distributed
environment (``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``, ``GROUP_RANK``) so that the agent reads the job's identity the real way:

    python bench/lab_rank.py SPEC.json

Every step the rank takes its batch from a prefetch queue that loader threads fill (HTTP range
reads over the node's data link, or O_DIRECT reads of the node's own block device), "computes"
(a timed wait: GPU compute uses no host CPU), and all-reduces its gradient with the other ranks
over the fabric: a real ring all-reduce over TCP (reduce-scatter then all-gather, ``2 (N-1)``
transfers of ``gradient_bytes / N`` to the next rank; the reduction is XOR, so every rank ends
with the same bytes, whose digest the truth carries). With ``buckets`` above 1 the gradient is
all-reduced one bucket after another (as DDP's gradient buckets): short bursts on the wire.

The rank's own timers are the truth: per wall-clock second and over the run, the share of time
it waited for data, computed, and spent in the collective, written as JSON to the spec's
``truth`` path. A thread drives the node's fake NVML (its state file) from the same timers, as a
real GPU would show them: utilization = the share of the last second computing or in the
collective (NCCL's kernels stay resident while they wait for a peer), GPM SM activity = the share
computing only (an H100: the A100 has none), power between the class's resting and computing
draws (computing, in the collective a fifth of the way, idle; lower with throttled clocks), the
energy counter integrating it, and at each phase's start the phase's own draw in the file the
fake NVML answers instantaneous power from (what the agent reads every 0.1 s on a GPU without
GPM; with the spec's ``power``, the draw's timeline there, which the fake reads as that board's
sensor would: sampled, a 1 s mean, energy only, with a lag), 60 GiB in use, the rank's pid as
the GPU's compute process, PCIe bytes for the batch and the gradient; ``throttle`` adds
clock-event reasons, heat, and an SM clock lowered by the factor its compute step is slowed by.

The job stops on the same step on every rank: each rank's wish to stop (rank 0's deadline)
travels with the collective's messages and is OR-ed like the data.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import mmap
import os
import queue
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.lab_rig import prefetch  # noqa: E402

GIB = 1024**3
HEADER = struct.Struct("!IIB")  # step, payload bytes, flags
STOP = 1
# Per GPU class, its draw at rest and computing flat out (mW); NCCL's kernels spinning in the
# collective add a fifth of the difference. A throttled GPU's computing draw falls with its clocks.
POWER_MW = {"h100_sxm5": (90_000, 620_000), "a100_sxm4": (55_000, 380_000)}


# ---- data: a function that blocks until the next batch ----------------------------------------


def http_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], int]:
    """HTTP range reads of ``batch_bytes`` from the data server, over the node's data link."""
    host, port, size, batch = spec["host"], int(spec["port"]), int(spec["object_bytes"]), int(spec["batch_bytes"])
    local = threading.local()

    def make_batch() -> int:
        while not stop.is_set():
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(host, port, timeout=30)
            start = random.randrange(0, size - batch)
            try:
                conn.request("GET", "/data", headers={"Range": f"bytes={start}-{start + batch - 1}"})
                body = conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                local.conn = None
                time.sleep(0.1)
                continue
            if len(body) == batch:
                return batch
        return 0

    return prefetch(make_batch, int(spec.get("threads", 2)), int(spec.get("depth", 2)), stop)


def device_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], int]:
    """Random O_DIRECT reads of the node's own block device: every read goes to the device."""
    device, reads, read_bytes = spec["device"], int(spec["reads_per_batch"]), int(spec["read_bytes"])
    blocks = int(spec["device_bytes"]) // read_bytes
    local = threading.local()

    def make_batch() -> int:
        fd = getattr(local, "fd", None)
        if fd is None:
            fd = local.fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
            local.buf = mmap.mmap(-1, read_bytes)  # page-aligned, as O_DIRECT needs
        for _ in range(reads):
            os.preadv(fd, [local.buf], random.randrange(blocks) * read_bytes)
        return reads * read_bytes

    return prefetch(make_batch, int(spec.get("threads", 4)), int(spec.get("depth", 2)), stop)


LOADERS = {"http": http_loader, "device": device_loader}


# ---- the collective: a ring all-reduce over TCP -----------------------------------------------


class Ring:
    """This rank's two fabric connections: from the previous rank (accepted) and to the next."""

    def __init__(self, rank: int, world: int, listen: tuple[str, int], peer: tuple[str, int], timeout: float) -> None:
        self.rank, self.world = rank, world
        server = socket.create_server(listen, reuse_port=False)
        server.settimeout(timeout)
        deadline = time.monotonic() + timeout
        self.send_sock = self._connect(peer, deadline)
        self.recv_sock, _ = server.accept()
        server.close()
        for s in (self.send_sock, self.recv_sock):
            s.settimeout(timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.outbox: queue.Queue[bytes | None] = queue.Queue()
        self.sender = threading.Thread(target=self._send_loop, daemon=True)
        self.sender.start()
        self.error: BaseException | None = None
        self.sent_bytes = 0
        self.received_bytes = 0

    @staticmethod
    def _connect(peer: tuple[str, int], deadline: float) -> socket.socket:
        while True:
            try:
                return socket.create_connection(peer, timeout=5)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _send_loop(self) -> None:
        try:
            while (message := self.outbox.get()) is not None:
                self.send_sock.sendall(message)
                self.outbox.task_done()
        except BaseException as err:  # the main thread sees it at the next join
            self.error = err
            with contextlib.suppress(ValueError):
                while True:
                    self.outbox.task_done()

    def _send(self, step: int, flags: int, payload: bytes | memoryview) -> None:
        self.outbox.put(HEADER.pack(step, len(payload), flags) + bytes(payload))
        self.sent_bytes += len(payload)

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.recv_sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError(f"rank {self.rank}: the previous rank closed the ring")
            got += k
        return buf

    def _recv(self, step: int) -> tuple[int, bytearray]:
        got_step, length, flags = HEADER.unpack(self._recv_exact(HEADER.size))
        if got_step != step:
            raise ConnectionError(f"rank {self.rank}: step {got_step} from the previous rank, expected {step}")
        self.received_bytes += length
        return flags, self._recv_exact(length)

    def all_reduce(self, step: int, data: bytearray, flags: int) -> int:
        """XOR-reduce ``data`` across the ring in place; return the OR of every rank's flags."""
        n, i = self.world, self.rank
        size = len(data) // n
        chunks = [memoryview(data)[k * size : (k + 1) * size] for k in range(n)]
        for s in range(n - 1):  # reduce-scatter
            self._send(step, flags, chunks[(i - s) % n])
            got_flags, got = self._recv(step)
            flags |= got_flags
            k = (i - s - 1) % n
            mine = chunks[k]
            mine[:] = (int.from_bytes(mine, "little") ^ int.from_bytes(got, "little")).to_bytes(size, "little")
        for s in range(n - 1):  # all-gather
            self._send(step, flags, chunks[(i + 1 - s) % n])
            got_flags, got = self._recv(step)
            flags |= got_flags
            chunks[(i - s) % n][:] = got
        self.outbox.join()
        if self.error is not None:
            raise ConnectionError(f"rank {self.rank}: sending to the next rank: {self.error}")
        return flags

    def close(self) -> None:
        self.outbox.put(None)
        for s in (self.send_sock, self.recv_sock):
            with contextlib.suppress(OSError):
                s.close()


# ---- the GPU: the fake NVML's state file -------------------------------------------------------


class FakeGpu:
    """The node's emulated GPU, written from the rank's timers."""

    def __init__(
        self,
        path: Path,
        profile: str,
        identity: dict[str, str],
        throttle: dict[str, Any] | None,
        live: str = "",
        power: dict[str, Any] | None = None,
    ) -> None:
        from tests.fakes.nvml.state import PROFILES, PowerTimeline

        self.path = path
        self.state = PROFILES[profile](count=1)
        self.state.clock = None  # the fake's own clock: the agent samples on its own
        self.gpu = self.state.gpus[0]
        self.gpu.uuid = identity.get("uuid", self.gpu.uuid)  # each node's GPU its own
        self.gpu.serial = identity.get("serial", self.gpu.serial)
        self.throttle = throttle
        self.idle_mw, self.busy_mw = POWER_MW.get(profile, POWER_MW["h100_sxm5"])
        self.lock = threading.Lock()
        self.pcie_rx = 0  # bytes the rank moved into and out of the GPU (batch, gradient)
        self.pcie_tx = 0
        self._last = (time.monotonic(), 0, 0)
        self.live = Path(live) if live else None  # the draw now ($FAKE_NVML_POWER_LIVE)
        # A power sensor other than the ideal one (--power, --read-lag-ms): the draw's timeline in
        # that file, which the fake reads as the GPU's power_mode says (the state carries it).
        self.timeline = PowerTimeline(self.live).resume() if power and self.live else None
        for key, value in (power or {}).items():
            setattr(self.gpu, key, value)
        slowed = float(throttle["factor"]) if throttle else 1.0
        span = self.busy_mw - self.idle_mw
        # The draw in each phase, as the 1 s mean below blends them: idle waiting for data,
        # computing, NCCL's kernels spinning in the collective a fifth of the way.
        self.phase_mw = {
            "data": self.idle_mw,
            "compute": round(self.idle_mw + span * (0.8 / slowed + 0.2)),
            "collective": round(self.idle_mw + span * 0.2),
        }

    def phase(self, kind: str) -> None:
        """The GPU enters a phase: its draw now, for NVML's instantaneous power (the agent reads it
        every 0.1 s on a GPU without GPM). Replaced whole (rename): the library never reads half."""
        if self.live is None:
            return
        if self.timeline is not None:
            self.timeline.set(self.phase_mw.get(kind, self.idle_mw))
            return
        tmp = self.live.with_name(self.live.name + ".tmp")
        tmp.write_text(f"{self.phase_mw.get(kind, self.idle_mw)}\n")
        os.replace(tmp, self.live)

    def start(self) -> None:
        g = self.gpu
        g.mem_used = 60 * GIB
        g.procs = {os.getpid(): 60 * GIB}
        if self.throttle:
            # Clocks held down by the factor the step is slowed by (a compute-bound step scales so).
            g.clock_reasons = int(self.throttle["clock_reasons"])
            g.sm_clock = round(g.sm_clock / float(self.throttle["factor"]))
            g.temp = int(self.throttle["temp"])

    def moved(self, rx: int, tx: int) -> None:
        with self.lock:
            self.pcie_rx += rx
            self.pcie_tx += tx

    def write(self, busy: float, computing: float) -> None:
        """``busy``: share of the last second computing or in the collective; ``computing``: computing."""
        g = self.gpu
        now = time.monotonic()
        with self.lock:
            rx, tx = self.pcie_rx, self.pcie_tx
        then, rx0, tx0 = self._last
        dt = max(1e-3, now - then)
        self._last = (now, rx, tx)
        g.util_gpu = min(100, round(100 * busy))
        g.util_mem = min(100, round(60 * computing))
        g.gpm_sm_active = round(100 * computing, 2)
        g.gpm_sm_occupancy = round(45 * computing, 2)
        g.gpm_tensor = round(55 * computing, 2)
        g.gpm_gr_active = round(100 * busy, 2)
        g.gpm_dram = round(40 * computing, 2)
        slowed = float(self.throttle["factor"]) if self.throttle else 1.0
        span = self.busy_mw - self.idle_mw
        g.power_mw = round(self.idle_mw + span * (0.8 * computing / slowed + 0.2 * busy))
        g.energy_mj += round(g.power_mw * dt)
        g.pcie_rx_bytes, g.pcie_tx_bytes = rx, tx
        g.pcie_rx_kbs, g.pcie_tx_kbs = round((rx - rx0) / dt / 1024), round((tx - tx0) / dt / 1024)
        if not self.throttle:
            g.temp = 40 + round(30 * computing)
        self.state.write(self.path)

    def stop(self) -> None:
        """The job ended: no process, no memory, idle."""
        g = self.gpu
        g.procs, g.mem_used = {}, 0
        self.phase("idle")
        self.write(0.0, 0.0)


# ---- the loop -----------------------------------------------------------------------------------

Spans = list[tuple[float, float]]


def _covered(spans: Spans, lo: float, hi: float) -> float:
    """Seconds of ``spans`` (in time order, not overlapping) inside [lo, hi)."""
    total = 0.0
    for a, b in reversed(spans):
        if b <= lo:
            break
        total += max(0.0, min(b, hi) - max(a, lo))
    return total


def run(spec: dict[str, Any]) -> dict[str, Any]:
    sys.setswitchinterval(0.001)  # loader and sender threads hand the GIL back quickly
    stop = threading.Event()
    rank, world = int(spec["rank"]), int(spec["world_size"])
    throttle = spec.get("throttle")
    gpu = FakeGpu(
        Path(spec["nvml_state"]), spec.get("profile", "h100_sxm5"), spec.get("gpu") or {}, throttle,
        spec.get("power_live", ""), spec.get("power"),
    )  # fmt: skip
    buckets = int(spec.get("buckets", 1))
    compute = float(spec["compute_seconds"]) * (float(throttle["factor"]) if throttle else 1.0)
    gradient = bytearray(random.randbytes(int(spec["gradient_bytes"]) // (world * buckets) * world * buckets))
    ring = Ring(rank, world, tuple(spec["listen"]), tuple(spec["next"]), float(spec.get("connect_timeout", 60)))
    next_batch = LOADERS[spec["data"]["kind"]](spec["data"], stop)
    ring.all_reduce(0, bytearray(world * 8), 0)  # a barrier: every rank is connected
    gpu.start()
    spans: dict[str, Spans] = {"data": [], "compute": [], "collective": []}
    current: list[tuple[str, float]] = []  # the span in progress

    def share(kinds: tuple[str, ...], lo: float, hi: float) -> float:
        total = sum(_covered(spans[k], lo, hi) for k in kinds)
        for kind, since in current[-1:]:
            if kind in kinds:
                total += max(0.0, hi - max(since, lo))
        return min(1.0, total / (hi - lo))

    def drive_gpu() -> None:
        # In a thread of its own: the state file's write must not hold up the loop.
        while not stop.wait(0.25):
            now = time.time()
            gpu.write(share(("compute", "collective"), now - 1, now), share(("compute",), now - 1, now))

    writer = threading.Thread(target=drive_gpu, daemon=True)
    writer.start()
    Path(spec["ready"]).write_text(f"{os.getpid()}\n")
    started = time.time()
    deadline = started + float(spec["seconds"])
    step, flags = 0, 0
    try:
        while not flags & STOP:
            step += 1
            # Each phase goes into its spans as it ends (the GPU's writer reads them meanwhile).
            t0 = time.time()
            current.append(("data", t0))
            gpu.phase("data")
            got = next_batch()
            gpu.phase("compute")
            t1 = time.time()
            spans["data"].append((t0, t1))
            current[-1] = ("compute", t1)
            gpu.moved(got, 0)
            time.sleep(compute)
            gpu.phase("collective")
            t2 = time.time()
            spans["compute"].append((t1, t2))
            current[-1] = ("collective", t2)
            gradient[0:8] = step.to_bytes(8, "little")  # this step's gradient
            want = STOP if (rank == 0 and t2 >= deadline) else 0
            if buckets == 1:
                flags = ring.all_reduce(step, gradient, want)
            else:  # bursts: one all-reduce per gradient bucket, in turn (as DDP's buckets)
                size, got = len(gradient) // buckets, 0
                for b in range(buckets):
                    part = bytearray(gradient[b * size : (b + 1) * size])
                    got |= ring.all_reduce(step, part, want)
                    gradient[b * size : (b + 1) * size] = part
                flags = got
            t3 = time.time()
            spans["collective"].append((t2, t3))
            current.clear()
            moved = 2 * (world - 1) * len(gradient) // world
            gpu.moved(moved, moved)
    finally:
        stop.set()
        writer.join(timeout=5)
        ring.close()
    ended = time.time()
    gpu.stop()
    per_second = []
    for s in range(int(started) + 1, int(ended)):
        data, comp, coll = (round(_covered(spans[k], s, s + 1), 4) for k in ("data", "compute", "collective"))
        per_second.append([float(s), data, comp, coll])
    length = ended - started
    shares = {k: round(_covered(v, started, ended) / length, 4) for k, v in spans.items()}
    return {
        "rank": rank,
        "world_size": world,
        "pid": os.getpid(),
        "started_unix_seconds": started,
        "ended_unix_seconds": ended,
        "steps": step,
        "compute_seconds": compute,
        "data_share": shares["data"],
        "compute_share": shares["compute"],
        "collective_share": shares["collective"],
        "wait_share": round(shares["data"] + shares["collective"], 4),
        "sent_bytes": ring.sent_bytes,
        "received_bytes": ring.received_bytes,
        # The last all-reduce's result: the same on every rank when the collective is real.
        "result_digest": hashlib.sha256(gradient).hexdigest()[:16],
        # Each step's all-reduce, in seconds: the least over the ranks at a step is the collective's
        # own transfers (the last rank to arrive waits for no one).
        "collective_per_step": [round(b - a, 5) for a, b in spans["collective"]],
        # [unix second, data wait, compute, collective] in seconds of that second.
        "per_second": per_second,
    }


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    truth = run(spec)
    tmp = Path(spec["truth"] + ".tmp")
    tmp.write_text(json.dumps(truth))
    os.replace(tmp, spec["truth"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
