"""The package as an installed copy runs, for a bench that reads a process's resident memory.

Compiles the package's modules: this environment may run with PYTHONDONTWRITEBYTECODE, and a
module without its ``.pyc`` is compiled at every import, whose temporaries stay in the heap (an
installed package, the .deb's included, ships compiled modules). Then drops the page cache of
the environment's shared libraries (clean pages only): a library pip has just written in one
piece sits in the page cache in large folios, and a process that maps it counts them whole
(about 5 MB more for gRPC's cygrpc right after ``make setup``); the next process reads them back
as a reboot would leave them. ``agent_command`` runs the agent on another interpreter of the same
ABI with this environment's packages (Debian's python3.11, which the .deb's environment uses).
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


def agent_command(python: str | None) -> list[str]:
    """``python -m nodeagent.agent``, on another interpreter of the same ABI with this environment's
    packages when ``python`` is given (Debian's python3.11, which the .deb's environment uses)."""
    if python is None:
        return [sys.executable, "-m", "nodeagent.agent"]
    site_dir = next(p for p in sys.path if p.endswith("site-packages"))
    launch = (
        f"import runpy, site, sys; site.addsitedir({site_dir!r}); sys.argv[0] = 'nodeagent'; "
        "runpy.run_module('nodeagent.agent', run_name='__main__')"
    )
    return [python, "-c", launch]
