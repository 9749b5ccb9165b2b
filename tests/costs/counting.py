"""What the cost gate counts: NVML calls, Python calls and object allocations, by stage.

Counts, not times, so that a loaded machine counts what an idle one does. Python calls are the
``call`` events of ``sys.setprofile`` (a generator resumed counts as a call); allocations are those
that reach the object allocator, counted by a small C shim (``alloc_count.c``) on this thread
only, with the cyclic GC off while counting (its runs depend on other threads' allocations).
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from nodeagent.agent.gpu.deadlines import GpuReaders

SHIM_SOURCE = Path(__file__).with_name("alloc_count.c")


class ShimUnavailable(RuntimeError):
    """The allocation counter cannot be built here (no compiler or no Python.h)."""


def build_alloc_counter(out_dir: Path) -> ctypes.PyDLL:
    """Compile ``alloc_count.c`` against this interpreter's headers (once per source) and load it."""
    compiler = shutil.which("gcc")
    include = Path(sysconfig.get_paths()["include"])
    if compiler is None or not (include / "Python.h").is_file():
        raise ShimUnavailable(f"needs gcc and {include}/Python.h")
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes() + str(include).encode()).hexdigest()[:16]
    library = out_dir / f"alloc_count-{digest}.so"
    if not library.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        command = [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{include}"]
        done = subprocess.run(
            [*command, "-o", str(library), str(SHIM_SOURCE)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise ShimUnavailable(f"compiling {SHIM_SOURCE.name} failed:\n{done.stderr.strip()}")
    shim = ctypes.PyDLL(str(library))  # called with the GIL held
    shim.alloc_count_read.restype = ctypes.c_ulonglong
    return shim


class StageCounter:
    """A ``Meter`` (``tools/ingest_rig.py``): each stage's Python calls and allocations on this
    thread, less those of the stages begun inside it. Counts only inside ``with``."""

    def __init__(self, shim: ctypes.PyDLL) -> None:
        self.calls: dict[str, int] = defaultdict(int)
        self.allocations: dict[str, int] = defaultdict(int)
        self._shim = shim
        self._made = 0
        self._open: list[tuple[str, int, int, list[int]]] = []  # stage, calls, allocations at begin; inside

    def __enter__(self) -> StageCounter:
        gc.collect()
        gc.disable()
        self._shim.alloc_count_start()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        self._shim.alloc_count_stop()
        gc.enable()

    def begin(self, stage: str) -> None:
        self._open.append((stage, self._made, int(self._shim.alloc_count_read()), [0, 0]))

    def end(self) -> None:
        allocated = int(self._shim.alloc_count_read())
        stage, calls_then, allocated_then, inside = self._open.pop()
        calls, allocations = self._made - calls_then, allocated - allocated_then
        self.calls[stage] += calls - inside[0]
        self.allocations[stage] += allocations - inside[1]
        if self._open:
            self._open[-1][3][0] += calls
            self._open[-1][3][1] += allocations

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self._made += 1


class TickCalls:
    """Python calls of an agent tick: the calling thread's, and each GPU reader's inside its work.

    The tick's wait on its readers is left out (``GpuReaders._wait``): how often it wakes depends
    on the order in which the readers finish. Other threads (the event watcher) are not counted."""

    def __init__(self) -> None:
        self._by_thread: dict[int, int] = defaultdict(int)  # each thread adds to its own key only
        self._on = threading.local()
        self._undo: list[Callable[[], None]] = []

    @property
    def total(self) -> int:
        return sum(self._by_thread.values())

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Profile every thread started from now on (the GPU readers start at the first scan)."""
        read, wait = GpuReaders.read, GpuReaders._wait
        on = self._on

        def counted_work(fn: Callable[[], Any]) -> Callable[[], Any]:
            def work() -> Any:
                on.counting = True
                try:
                    return fn()
                finally:
                    on.counting = False

            return work

        def read_counted(readers: GpuReaders, work: Any, bound: float, **kwargs: Any) -> Any:
            return read(readers, {i: counted_work(fn) for i, fn in work.items()}, bound, **kwargs)

        def wait_uncounted(readers: GpuReaders, *args: Any) -> Any:
            was, on.counting = getattr(on, "counting", False), False
            try:
                return wait(readers, *args)
            finally:
                on.counting = was

        GpuReaders.read, GpuReaders._wait = read_counted, wait_uncounted  # type: ignore[method-assign]
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            GpuReaders.read, GpuReaders._wait = read, wait  # type: ignore[method-assign]

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count from now on, on this thread and in the readers' work, until the block ends."""
        self._by_thread.clear()
        self._on.counting = True
        try:
            yield
        finally:
            self._on.counting = False

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and getattr(self._on, "counting", False):
            self._by_thread[threading.get_ident()] += 1
