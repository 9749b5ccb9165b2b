"""The bottleneck lab's emulated training job: a loader feeds batches to a training loop.

Run by ``bench/lab.py`` as its own process (inside the lab's network namespace or block-throttle
cgroup where the scenario needs it):

    python bench/lab_job.py SPEC.json

The spec names the loader (``kind`` and its settings), the compute time per step and the run's
length. The loop's own timers are the truth: the share of wall time spent waiting for the next
batch, per wall-clock second and over the run, written to the spec's ``truth`` path as JSON.
The loop's compute share over the last second drives the fake NVML's utilization (its state
file), so the real agent sees an emulated GPU beside the real host counters. With ``gpu`` set
the compute is a real CUDA step (PyTorch) and the fake is not written.
"""

from __future__ import annotations

import http.client
import json
import mmap
import multiprocessing
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.lab_rig import prefetch  # noqa: E402

BLOCK_BYTES = 4096
GIB = 1024**3
# When each pass over a storage loader's dataset ended (wall clock).
PASS_ENDS: list[float] = []


# ---- loaders: each returns a function that blocks until the next batch -----------------------


def network_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], object]:
    """HTTP range reads of ``batch_bytes`` from the lab's server, over the shaped veth."""
    host, port, size = spec["server_host"], int(spec["server_port"]), int(spec["object_bytes"])
    batch = int(spec["batch_bytes"])
    local = threading.local()

    def make_batch() -> object:
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
            return b""
        return len(body)

    return prefetch(make_batch, int(spec.get("threads", 4)), 4, stop)


def storage_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], object]:
    """Random block reads of the lab's loop device by several threads: O_DIRECT (every read goes
    to the device), or through the page cache (``buffered``) with read-ahead off, over a dataset of
    ``dataset_blocks`` blocks read in one shuffled order per pass."""
    device, reads = spec["device"], int(spec["reads_per_batch"])
    direct = not spec.get("buffered", False)
    read_bytes = int(spec.get("read_bytes", BLOCK_BYTES))
    device_blocks = int(spec["device_bytes"]) // read_bytes
    dataset = int(spec.get("dataset_blocks") or device_blocks)
    order: list[int] = []
    started_pass = [False]
    lock = threading.Lock()

    def next_block() -> int:
        with lock:
            if not order:
                if started_pass[0]:
                    PASS_ENDS.append(time.time())
                started_pass[0] = True
                order.extend(random.sample(range(dataset), dataset))
            return order.pop()

    local = threading.local()

    def make_batch() -> object:
        fd = getattr(local, "fd", None)
        if fd is None:
            fd = local.fd = os.open(device, os.O_RDONLY | (os.O_DIRECT if direct else 0))
            if not direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            local.buf = mmap.mmap(-1, read_bytes)  # page-aligned, as O_DIRECT needs
        for _ in range(reads):
            block = next_block() if not direct else random.randrange(device_blocks)
            os.preadv(fd, [local.buf], block * read_bytes)
        return reads

    return prefetch(make_batch, int(spec.get("threads", 8)), 4, stop)


def _decode(rounds: int) -> int:
    """Decode-like CPU work (a pure-Python byte loop): it holds one core."""
    acc = 0
    for i in range(rounds):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return acc


def _cpu_worker(rounds: int, out: Any, stop: Any) -> None:
    while not stop.is_set():
        out.put(_decode(rounds))


def cpu_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], object]:
    """``workers`` processes decode batches (worker processes, as a DataLoader has)."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue(maxsize=4)
    halt = ctx.Event()
    workers = [
        ctx.Process(target=_cpu_worker, args=(int(spec["rounds_per_batch"]), out, halt), daemon=True)
        for _ in range(int(spec["workers"]))
    ]
    for worker in workers:
        worker.start()

    def watch() -> None:
        stop.wait()
        halt.set()
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()

    threading.Thread(target=watch, daemon=True).start()
    return out.get  # type: ignore[no-any-return]


def clean_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], object]:
    """Batches ready faster than the loop takes them (a short wait, no resource)."""
    seconds = float(spec.get("batch_seconds", 0.005))

    def make_batch() -> object:
        time.sleep(seconds)
        return 1

    return prefetch(make_batch, 1, 8, stop)


def h2d_loader(spec: dict[str, Any], stop: threading.Event) -> Callable[[], object]:
    """Large pageable host-to-device copies in the loop's thread (--gpu only): the copy through a
    staging buffer holds the stream, and the GPU waits for it."""
    import torch

    batch = torch.empty(int(spec.get("batch_bytes", 256 << 20)), dtype=torch.uint8)  # pageable

    def next_batch() -> object:
        on_gpu = batch.to("cuda")
        torch.cuda.synchronize()
        return on_gpu

    return next_batch


LOADERS: dict[str, Callable[[dict[str, Any], threading.Event], Callable[[], object]]] = {
    "network": network_loader,
    "storage": storage_loader,
    "cpu": cpu_loader,
    "clean": clean_loader,
    "h2d": h2d_loader,
}


# ---- the GPU: the fake's state file, or a real CUDA step ---------------------------------------


class FakeGpu:
    """One emulated GPU: a compute step is a timed wait (it uses no host CPU); utilization and
    memory follow the loop through the fake NVML's state file."""

    def __init__(self, state_path: Path) -> None:
        from tests.fakes.nvml.state import a100_sxm4

        self.path = state_path
        self.state = a100_sxm4(count=1)
        self.state.clock = None  # the fake's own clock: the agent samples on its own
        gpu = self.state.gpus[0]
        gpu.mem_used = 20 * GIB
        gpu.procs = {os.getpid(): 20 * GIB}
        self.write(0)

    def write(self, util_percent: int) -> None:
        self.state.gpus[0].util_gpu = util_percent
        self.state.gpus[0].util_mem = util_percent // 2
        self.state.write(self.path)

    def step(self, seconds: float) -> None:
        time.sleep(seconds)


class CudaGpu:
    """A real training step on the GPU: a matmul chain sized to take about ``seconds``."""

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("lab: --gpu needs PyTorch with a CUDA GPU; none is visible")
        self.torch = torch
        self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        self.per_matmul = self._time_one()

    def _time_one(self) -> float:
        torch = self.torch
        for _ in range(3):
            self.a @ self.a
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(20):
            self.a @ self.a
        torch.cuda.synchronize()
        return max(1e-5, (time.perf_counter() - started) / 20)

    def write(self, util_percent: int) -> None:  # the real driver reports utilization itself
        pass

    def step(self, seconds: float) -> None:
        for _ in range(max(1, round(seconds / self.per_matmul))):
            self.a @ self.a
        self.torch.cuda.synchronize()


# ---- the loop ---------------------------------------------------------------------------------


def run(spec: dict[str, Any]) -> dict[str, Any]:
    # Loader threads hand the GIL back within a millisecond, not Python's default 5 ms: the loop's
    # own bookkeeping between steps (GPU idle that is no waiting for data) stays small.
    sys.setswitchinterval(0.001)
    stop = threading.Event()
    gpu: FakeGpu | CudaGpu = CudaGpu() if spec.get("gpu") else FakeGpu(Path(spec["nvml_state"]))
    next_batch = LOADERS[spec["kind"]](spec, stop)
    share = spec.get("compute_share")
    if share is not None:
        # The loader's own pace here and now (the machine is shared): the step that makes the loop
        # compute ``share`` of the time, so the job needs about 1/share times what the loader gives.
        calibrate_until, count = time.time() + float(spec.get("calibrate_seconds", 3.0)), 0
        began = time.time()
        while time.time() < calibrate_until:
            next_batch()
            count += 1
        step_seconds = float(share) * (time.time() - began) / max(1, count)
    else:
        step_seconds = float(spec["step_seconds"])
    Path(spec["ready"]).write_text(f"{step_seconds}\n")  # the lab starts the agent now
    deadline = time.time() + float(spec["seconds"])
    # (start, end) of every wait for a batch and every compute step, in wall-clock time.
    waits: list[tuple[float, float]] = []
    computes: list[tuple[float, float]] = []
    computing_since: list[float] = []  # the step in progress, if any

    def utilization() -> None:
        # In a thread of its own: the state file's write must not hold up the loop (on a disk the
        # storage scenarios saturate, a rename can take tens of milliseconds).
        while not stop.wait(0.2):
            now = time.time()
            busy = _covered(computes, now - 1.0, now) + sum(now - max(t, now - 1.0) for t in computing_since[-1:])
            gpu.write(min(100, round(100 * busy)))

    writer = threading.Thread(target=utilization, daemon=True)
    writer.start()
    started = time.time()
    try:
        while time.time() < deadline:
            t0 = time.time()
            next_batch()
            t1 = time.time()
            computing_since.append(t1)
            gpu.step(step_seconds)
            t2 = time.time()
            computing_since.clear()
            waits.append((t0, t1))
            computes.append((t1, t2))
    finally:
        stop.set()
        writer.join(timeout=5)
    ended = time.time()
    seconds = [[float(s), round(_covered(waits, s, s + 1) / 1.0, 4)] for s in range(int(started) + 1, int(ended))]
    return {
        "started_unix_seconds": started,
        "ended_unix_seconds": ended,
        "steps": len(computes),
        "step_seconds": step_seconds,
        "first_pass_end_unix_seconds": PASS_ENDS[0] if PASS_ENDS else None,
        "wait_share": round(_covered(waits, started, ended) / (ended - started), 4),
        # What is neither waiting nor computing: the loop's bookkeeping (the GPU idles then too).
        "overhead_share": round(
            1 - (_covered(waits, started, ended) + _covered(computes, started, ended)) / (ended - started), 4
        ),
        "per_second": seconds,
    }


def _covered(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of ``spans`` inside [lo, hi). Spans are in time order and do not overlap: only the
    tail back to ``lo`` is read (the loop's own bookkeeping must stay far below its steps)."""
    total = 0.0
    for a, b in reversed(spans):
        if b <= lo:
            break
        total += max(0.0, min(b, hi) - max(a, lo))
    return total


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    truth = run(spec)
    tmp = Path(spec["truth"] + ".tmp")
    tmp.write_text(json.dumps(truth))
    os.replace(tmp, spec["truth"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
