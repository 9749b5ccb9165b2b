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

from nodeagent.agent.cli.main import cli
from nodeagent.agent.sources import Roots
from nodeagent.core.program.command_line import run_cli
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


def host_tree(
    root: Path, cores: int = 64, memory_gib: int = 2048, nic_mbit: int | None = None, ib_ports: int = 0
) -> Roots:
    """procfs and sysfs of a host with ``cores`` CPUs and ``memory_gib`` of memory; with
    ``nic_mbit`` an eth0 up at that speed, with ``ib_ports`` that many InfiniBand NDR ports
    (mlx5_N/1) ACTIVE at 400 Gb/s; no disks. By default nothing but the GPUs to judge."""
    cpu_line = "cpu{} 100 0 100 1000 0 0 0 0 0 0\n"
    stat = cpu_line.format(" ") + "".join(cpu_line.format(i) for i in range(cores)) + "ctxt 1\n"
    files = {
        "proc/stat": stat,
        "proc/meminfo": f"MemTotal: {memory_gib * 1024 * 1024} kB\nMemAvailable: {memory_gib * 1024 * 1024} kB\n",
        "proc/net/dev": NET_DEV_HEADER,
        "proc/diskstats": "",
        "proc/self/mountinfo": "",
        "sys/class/net/.keep": "",
    }
    if nic_mbit is not None:
        files["proc/net/dev"] += "  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
        eth0 = "sys/class/net/eth0/"
        attributes = {"operstate": "up", "carrier": "1", "carrier_changes": "2", "speed": str(nic_mbit), "mtu": "9000"}
        files.update({eth0 + name: value + "\n" for name, value in {**attributes, "type": "1"}.items()})
    for n in range(ib_ports):
        port = f"sys/class/infiniband/mlx5_{n}/ports/1/"
        files[port + "state"] = "4: ACTIVE\n"
        files[port + "phys_state"] = "5: LinkUp\n"
        files[port + "rate"] = "400 Gb/sec (4X NDR)\n"
        files[port + "link_layer"] = "InfiniBand\n"
    write_tree(root, files)
    return Roots(procfs=str(root / "proc"), sysfs=str(root / "sys"))


def roots_args(roots: Roots) -> list[str]:
    return ["--procfs", roots.procfs, "--sysfs", roots.sysfs]
