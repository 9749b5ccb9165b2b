"""A daemon's threads share two glibc malloc arenas (core/program/malloc_arenas.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Eight threads allocate from C at once (bytes over Python's small-object limit come from
# malloc); glibc's malloc_info then says how many arenas ("heaps") the process has.
_PROBE = """
import ctypes, os, re, sys, tempfile, threading
from nodeagent.core.program.malloc_arenas import limit_malloc_arenas
took = limit_malloc_arenas() if sys.argv[1] == "limit" else None
start, done = threading.Barrier(8), threading.Barrier(9)
def allocate():
    start.wait()
    kept = [bytes(4096 + n) for n in range(64)]
    done.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
done.wait()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
path = tempfile.mktemp()
stream = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, stream)
libc.fclose(stream)
print(took, len(re.findall(r'<heap nr="', open(path).read())))
os.unlink(path)
"""


def _arenas(mode: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    took, heaps = done.stdout.split()
    return took, int(heaps)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_threads_share_two_arenas_once_limited() -> None:
    took, heaps = _arenas("limit")
    assert took == "True"
    assert heaps <= 2, f"{heaps} malloc arenas for 8 threads after limit_malloc_arenas()"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_without_the_limit_each_thread_gets_an_arena() -> None:
    """What the limit saves: the probe above does tell arenas apart."""
    _, heaps = _arenas("none")
    assert heaps > 2


def test_an_environment_limit_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.core.program.malloc_arenas import limit_malloc_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


# 16 MB in blocks glibc serves from its heap (bytes over Python's small-object limit), freed but
# for one block allocated after them, which keeps glibc from trimming its heap's top by itself.
_FREED = """
import sys
from nodeagent.core.program.malloc_arenas import release_freed_memory
def anon_kib():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon:"))
blocks = [bytes(1024) for _ in range(16384)]
keep = bytes(1024)
del blocks
before = anon_kib()
took = release_freed_memory() if sys.argv[1] == "release" else None
print(took, before - anon_kib())
"""


def _released_kib(mode: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", _FREED, mode], capture_output=True, text=True, timeout=60, check=True)
    took, kib = done.stdout.split()
    return took, int(kib)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_hands_freed_heap_pages_back() -> None:
    took, released = _released_kib("release")
    assert took == "True"
    assert released > 8 * 1024, f"{released} KiB released of 16 MB freed"
    _, kept = _released_kib("keep")
    assert kept < 1024, "glibc gave the pages back by itself: the test no longer tells"
