"""Running ``nodeagent diag`` in this process, and a small host tree for it.

In-process runs go through the real command line (``run_cli``), with stdout and stderr captured,
so the exit status and output are what a user gets; they just skip the interpreter start.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cli import cli, run_cli
from agent.collectors import Roots
from tests.fakes.trees import NET_DEV_HEADER, write_tree


@dataclass
class DiagRun:
    exit_code: int
    out: str
    err: str

    @property
    def report(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.out)
        return parsed

    def checks(self, check: str, status: str | None = None) -> list[dict[str, str]]:
        """The results of ``check`` (with ``status``)."""
        return [
            r for r in self.report["checks"] if r["check"] == check and (status is None or r["status"] == status)
        ]  # fmt: skip

    def statuses(self, prefix: str = "") -> dict[tuple[str, str], str]:
        """(check, subject) -> status, for checks whose name starts with ``prefix``."""
        return {(r["check"], r["subject"]): r["status"] for r in self.report["checks"] if r["check"].startswith(prefix)}

    def problems(self, prefix: str = "") -> dict[tuple[str, str], str]:
        return {k: v for k, v in self.statuses(prefix).items() if v in ("WARN", "FAIL")}


def run_diag(*args: str) -> DiagRun:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(cli, "nodeagent", ["diag", *args])
    return DiagRun(code, out.getvalue(), err.getvalue())


def host_tree(root: Path, cores: int = 64, memory_gib: int = 2048) -> Roots:
    """procfs and sysfs of a host with ``cores`` CPUs, ``memory_gib`` of memory, and no NICs,
    disks or RDMA ports: the GPU checks' cases see nothing else to judge."""
    cpu_line = "cpu{} 100 0 100 1000 0 0 0 0 0 0\n"
    stat = cpu_line.format(" ") + "".join(cpu_line.format(i) for i in range(cores)) + "ctxt 1\n"
    write_tree(
        root,
        {
            "proc/stat": stat,
            "proc/meminfo": f"MemTotal: {memory_gib * 1024 * 1024} kB\nMemAvailable: {memory_gib * 1024 * 1024} kB\n",
            "proc/net/dev": NET_DEV_HEADER,
            "proc/diskstats": "",
            "proc/self/mountinfo": "",
            "sys/class/net/.keep": "",
        },
    )
    return Roots(procfs=str(root / "proc"), sysfs=str(root / "sys"))


def roots_args(roots: Roots) -> list[str]:
    return ["--procfs", roots.procfs, "--sysfs", roots.sysfs]
