"""The package as an installed copy runs, for a bench that reads a process's resident memory.

Compiles the package's modules: this environment may run with PYTHONDONTWRITEBYTECODE, and a
module without its ``.pyc`` is compiled at every import, whose temporaries stay in the heap (an
installed package, the .deb's included, ships compiled modules). Then drops the page cache of
the environment's shared libraries (clean pages only): a library pip has just written in one
piece sits in the page cache in large folios, and a process that maps it counts them whole
(about 5 MB more for gRPC's cygrpc right after ``make setup``); the next process reads them back
as a reboot would leave them.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import sys
from pathlib import Path

PACKAGE_FOLDERS = ("agent", "core", "collector", "proto", "tools")


def as_installed(repo: Path) -> None:
    for folder in PACKAGE_FOLDERS:
        compileall.compile_dir(repo / folder, quiet=1)
    site_dir = Path(next(p for p in sys.path if p.endswith("site-packages")))
    for library in site_dir.rglob("*.so*"):
        with contextlib.suppress(OSError):
            fd = os.open(library, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
