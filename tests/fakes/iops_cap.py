"""A block device with a provisioned IOPS cap, as cloud volumes have, through the kernel's block
I/O throttle (cgroup v1 ``blkio.throttle.read_iops_device`` or cgroup v2 ``io.max riops=``).

A loop device's reads land on this machine's own disk, whose speed drifts with whatever else
runs; under a cap well below what the disk does, every process measuring the device sees the
same steady rate, so two tools can be compared on it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Wrap = Callable[[list[str]], list[str]]


class IopsCapUnavailable(RuntimeError):
    """No block I/O controller this process can use."""


@contextlib.contextmanager
def iops_cap(device: str, read_iops: int) -> Iterator[Wrap]:
    """Cap reads of ``device`` at ``read_iops`` for the commands passed through the yielded
    wrapper (it starts them inside a fresh cgroup). The cgroup is removed afterwards."""
    rdev = os.stat(device).st_rdev
    devno = f"{os.major(rdev)}:{os.minor(rdev)}"
    group, procs = _make_group(devno, read_iops)
    try:
        yield lambda command: ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *command]
    finally:
        for _ in range(50):  # the kernel empties a cgroup a moment after its last process exits
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _make_group(devno: str, read_iops: int) -> tuple[Path, Path]:
    name = f"nodeagent-test-{os.getpid()}"
    v1 = Path("/sys/fs/cgroup/blkio")
    if (v1 / "blkio.throttle.read_iops_device").exists():
        group = v1 / name
        try:
            group.mkdir(exist_ok=True)
            (group / "blkio.throttle.read_iops_device").write_text(f"{devno} {read_iops}\n")
        except OSError as err:
            raise IopsCapUnavailable(f"cgroup v1 blkio: {err}") from err
        return group, group / "cgroup.procs"
    for root in _cgroup2_mounts():
        if "io" not in (root / "cgroup.controllers").read_text().split():
            continue
        group = root / name
        try:
            (root / "cgroup.subtree_control").write_text("+io\n")
            group.mkdir(exist_ok=True)
            (group / "io.max").write_text(f"{devno} riops={read_iops}\n")
        except OSError as err:
            raise IopsCapUnavailable(f"cgroup v2 io at {root}: {err}") from err
        return group, group / "cgroup.procs"
    raise IopsCapUnavailable("no blkio (cgroup v1) or io (cgroup v2) controller mounted")


def _cgroup2_mounts() -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2" and (Path(fields[1]) / "cgroup.controllers").exists():
            mounts.append(Path(fields[1]))
    return mounts
