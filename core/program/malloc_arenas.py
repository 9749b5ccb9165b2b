"""At most a few glibc malloc arenas, for a long-running program with many threads.

glibc gives a thread that allocates while another holds the main arena an arena of its own, up
to 8 per core (16 on a 2-core node); each keeps its freed pages and its top resident. The
agent's daemon runs about 19 threads (a reader per GPU, the NVML event thread, the sender, the
pod-resources watch and gRPC's own), few of which allocate much: ``mallopt(M_ARENA_MAX, 2)`` at
start, before any thread, lets them share two and took 0.3 to 0.5 MB off its peak RSS
(docs/performance.md), as ``MALLOC_ARENA_MAX=2`` in the environment would. Python's small
objects come from its own allocator, which arenas do not concern.

Without glibc (musl) there is no ``mallopt`` to call: nothing changes.
"""

from __future__ import annotations

import ctypes
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
