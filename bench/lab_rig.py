"""What the bottleneck labs (``bench/lab.py``, one node; ``bench/lab_cluster.py``, a multi-node
job) share: processes in sessions of their own, loop devices, the collector's TOML, waiting."""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
ENV_EXTRA = {"PYTHONUNBUFFERED": "1"}


T = TypeVar("T")


def prefetch(make_batch: Callable[[], T], threads: int, depth: int, stop: threading.Event) -> Callable[[], T]:
    """``threads`` producers fill a bounded queue (a DataLoader's prefetch); the labs' jobs and
    ranks read their batches from it."""
    batches: queue.Queue[T] = queue.Queue(maxsize=depth)

    def produce() -> None:
        while not stop.is_set():
            batch = make_batch()
            while not stop.is_set():
                try:
                    batches.put(batch, timeout=0.2)
                    break
                except queue.Full:
                    continue

    for _ in range(threads):
        threading.Thread(target=produce, daemon=True).start()
    return batches.get


class LabError(RuntimeError):
    """The lab cannot run a scenario here (one line: why)."""


def sh(*args: str, timeout: float = 30, stdin: str | None = None) -> str:
    done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=timeout, input=stdin)
    if done.returncode != 0:
        raise LabError(f"{' '.join(args[:6])}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def popen(command: list[str], log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``command`` in a session of its own (the whole group goes at the end), its stderr to
    ``log``, its stdout a pipe."""
    with log.open("w") as handle:
        return subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, **ENV_EXTRA, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=handle,
            text=True,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to the process's group, SIGKILL after 10 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


@contextlib.contextmanager
def loop_device(backing: Path, size_bytes: int, *, direct_io: bool) -> Iterator[str]:
    """A loop device over a new file of ``size_bytes`` random bytes; detached at the end."""
    if shutil.which("losetup") is None:
        raise LabError("no losetup (util-linux)")
    with backing.open("wb") as out:  # real blocks (a sparse file reads zeros without the disk)
        chunk = os.urandom(1 << 20)
        for _ in range(size_bytes >> 20):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    command = ["losetup", "--find", "--show", *(["--direct-io=on"] if direct_io else []), str(backing)]
    device = sh(*command).strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True, timeout=30)
        backing.unlink(missing_ok=True)


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def toml(tables: dict[str, dict[str, Any]]) -> str:
    out = io.StringIO()
    for table, values in tables.items():
        out.write(f"[{table}]\n")
        for key, value in values.items():
            out.write(f"{key} = {_toml_value(value)}\n")
    return out.getvalue()


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + " }"
    return json.dumps(value)


def interrupt(signum: int, frame: object) -> None:
    """SIGTERM (and SIGINT, set by the lab itself: started from a shell's background job it would
    be ignored) unwind like Ctrl-C: every rig's cleanup runs."""
    raise KeyboardInterrupt


def install_interrupts() -> None:
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
