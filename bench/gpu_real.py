"""Real-GPU check: what the agent sees on an NVIDIA GPU in three phases.

Needs a machine with an NVIDIA driver and PyTorch with CUDA. For each phase it runs
``nodeagent sample --json`` (GPU source only) alongside the workload and prints, per
phase and GPU, the mean utilization, SM activity (GPM, Hopper and newer), memory used and
PCIe receive/transmit:

  idle        nothing running on the GPU
  matmul      a tight bf16 matmul loop: utilization and SM activity near 100%
  starved     a training step fed by a DataLoader that is deliberately too slow
              (each batch sleeps): the GPU waits for data, utilization drops

Beside each phase it reads ``nvidia-smi --query-gpu`` once a second, so the agent's
utilization and memory can be set against the driver's own tool in the same window. Last it
measures the GPU source's sampling tick on the real library: CPU per tick and NVML calls
per GPU per tick (bench/agent_overhead.py's worker, without the fake library).

Finishes in well under 5 minutes (3 phases x PHASE_SECONDS plus start-up).

    python bench/gpu_real.py [--phase-seconds 40] [--raw FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
METRICS = (
    ("utilization_gpu_ratio", "util", 100, "%"),
    ("sm_active_ratio", "SM active", 100, "%"),
    ("memory_used_bytes", "mem used", 1e-9, " GB"),
    ("pcie_rx_bytes_per_second", "PCIe rx", 1e-9, " GB/s"),
    ("pcie_tx_bytes_per_second", "PCIe tx", 1e-9, " GB/s"),
)


SMI_FIELDS = ("index", "utilization.gpu", "memory.used")


def sample_during(seconds: float, workload: Any) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Run the agent for ``seconds`` while ``workload(stop_event)`` runs in a thread.

    Returns the agent's rate snapshots and nvidia-smi's rows of the same window.
    """
    stop = threading.Event()
    worker = threading.Thread(target=workload, args=(stop,), daemon=True)
    worker.start()
    time.sleep(3.0)  # let the workload reach its steady state
    smi = subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits", "-l", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        agent = subprocess.run(
            [
                sys.executable, "-m", "nodeagent.agent", "sample", "--json", "--count", str(int(seconds)),
                "--interval", "1",
                "--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband",
                "--no-collector.cpu", "--no-collector.meminfo", "--no-collector.pressure", "--collector.gpu",
            ],
            cwd=REPO, capture_output=True, text=True, check=True, timeout=seconds + 60,
        )  # fmt: skip
    finally:  # a failed phase leaves neither nvidia-smi nor the workload running
        smi.terminate()
        smi_out, _ = smi.communicate(timeout=10)
        stop.set()
        worker.join(timeout=30)
    smi_rows = [[cell.strip() for cell in line.split(",")] for line in smi_out.splitlines() if line.strip()]
    return [json.loads(line) for line in agent.stdout.splitlines()[1:]], smi_rows


def idle(stop: threading.Event) -> None:
    stop.wait()


def matmul(stop: threading.Event) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        for _ in range(20):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize()


def train_on(load: Callable[[int], None], workers: int, stop: threading.Event) -> None:
    """Train a small image model from a DataLoader with ``workers`` processes, each sample of
    which first runs ``load(index)`` (a slow read, a slow decode), until ``stop`` is set."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset[Any]):
        def __len__(self) -> int:
            return 1_000_000

        def __getitem__(self, index: int) -> Any:
            load(index)
            return torch.randn(3, 224, 224), index % 1000

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 7, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(64, 1000),
    ).cuda()  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Images(), batch_size=64, num_workers=workers, pin_memory=True)
    for images, labels in loader:
        if stop.is_set():
            break
        loss = torch.nn.functional.cross_entropy(model(images.cuda(non_blocking=True)), labels.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _slow_read(_index: int) -> None:
    time.sleep(0.004)  # a slow remote read per sample: the worker waits, using no CPU


def starved(stop: threading.Event) -> None:
    train_on(_slow_read, 2, stop)


def _smi_means(rows: list[list[str]]) -> dict[int, tuple[float | None, float | None]]:
    """Per GPU index: nvidia-smi's mean utilization (%) and memory used (GB)."""
    util: dict[int, list[float]] = {}
    mem: dict[int, list[float]] = {}
    for row in rows:
        if len(row) != len(SMI_FIELDS) or not row[0].isdigit():
            continue
        index = int(row[0])
        for cell, into, scale in ((row[1], util, 1.0), (row[2], mem, 1.048576e-3)):  # MiB -> GB
            with contextlib.suppress(ValueError):  # "[N/A]"
                into.setdefault(index, []).append(float(cell) * scale)
    return {
        index: (
            statistics.fmean(util[index]) if util.get(index) else None,
            statistics.fmean(mem[index]) if mem.get(index) else None,
        )
        for index in util.keys() | mem.keys()
    }


def summarise(phase: str, snaps: list[dict[str, Any]], smi_rows: list[list[str]]) -> list[str]:
    lines = []
    smi = _smi_means(smi_rows)
    by_gpu: dict[int, list[dict[str, Any]]] = {}
    for snap in snaps:
        for row in snap.get("gpus", []):
            by_gpu.setdefault(row["index"], []).append(row)
    for index, rows in sorted(by_gpu.items()):
        cells = [phase, f"GPU {index}", str(len(rows))]
        for key, _, scale, unit in METRICS:
            values = [r[key] for r in rows if r.get(key) is not None]
            cells.append(f"{statistics.fmean(values) * scale:.1f}{unit}" if values else "n/a")
        smi_util, smi_mem = smi.get(index, (None, None))
        cells.append(f"{smi_util:.1f}%" if smi_util is not None else "n/a")
        cells.append(f"{smi_mem:.1f} GB" if smi_mem is not None else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def tick_cost(cycles: int) -> dict[str, Any]:
    """The GPU source's sampling tick on the real library, in a fresh process."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "agent_overhead.py"), "--agent-worker", "/proc", "/sys",
         "--cycles", str(cycles), "--gpus"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase-seconds", type=int, default=40)
    parser.add_argument("--raw", type=Path, help="Also write every phase's snapshots to this file (JSON Lines).")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("gpu_real: needs PyTorch with CUDA (pip install torch)") from None
    if not torch.cuda.is_available():
        raise SystemExit("gpu_real: no CUDA GPU visible to PyTorch")
    header = "| phase | GPU | samples | " + " | ".join(label for _, label, _, _ in METRICS)
    header += " | nvidia-smi util | nvidia-smi mem |"
    lines = [header, "|" + "---|" * (5 + len(METRICS))]
    for phase, workload in (("idle", idle), ("matmul", matmul), ("starved loader", starved)):
        started = time.monotonic()
        snaps, smi_rows = sample_during(args.phase_seconds, workload)
        lines += summarise(phase, snaps, smi_rows)
        if args.raw is not None:
            with args.raw.open("a") as raw:
                raw.writelines(json.dumps({"phase": phase, **snap}) + "\n" for snap in snaps)
        print(f"{phase}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    print("\n".join(lines))
    cost = tick_cost(50)
    print(
        f"\nGPU source tick on the real library ({cost['gpus']} GPUs, with the host sources): "
        f"{cost['cpu_seconds_per_cycle'] * 1e3:.2f} ms CPU per tick, "
        f"{cost['nvml_calls_per_gpu_per_tick']:.1f} NVML calls per GPU per tick "
        f"({cost['nvml_field_value_calls_per_gpu_per_tick']:.1f} field-value calls), "
        f"report {cost['report_bytes']} B, peak RSS {cost['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
