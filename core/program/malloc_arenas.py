"""At most a few glibc malloc arenas for a long-running program with many threads, and what
start-up freed handed back to the kernel.

glibc gives a thread that allocates while another holds the main arena an arena of its own, up
to 8 per core (16 on a 2-core node); each keeps its freed pages and its top resident. The
agent's daemon runs about 19 threads (a reader per GPU, the NVML event thread, the sender, the
pod-resources watch and gRPC's own), few of which allocate much: ``mallopt(M_ARENA_MAX, 2)`` at
start, before any thread, lets them share two and took 0.3 to 0.5 MB off its peak RSS
(docs/performance.md), as ``MALLOC_ARENA_MAX=2`` in the environment would. Python's small
objects come from its own allocator, which arenas do not concern.

``release_freed_memory()`` once start-up is over (the daemon: after its first tick, the GPU scan
and the first reads done) collects Python's garbage and asks glibc to return the free pages in
the middle of its heap (``malloc_trim(0)``), which it otherwise keeps for reuse: 0.2 to 0.4 MB
of the daemon's peak RSS.

Without glibc (musl) there is no ``mallopt`` or ``malloc_trim`` to call: nothing changes.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Final

M_ARENA_MAX: Final = -8  # malloc.h
DAEMON_ARENAS: Final = 2


def limit_malloc_arenas(count: int = DAEMON_ARENAS) -> bool:
    """At most ``count`` malloc arenas from now on (threads started before keep theirs): whether
    glibc took the limit. An environment's ``MALLOC_ARENA_MAX`` is left to rule where it is set."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))


def release_freed_memory() -> bool:
    """Collect Python's garbage, then hand glibc's free heap pages back: whether glibc returned any."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return bool(trim(0))
