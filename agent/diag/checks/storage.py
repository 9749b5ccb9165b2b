"""Storage: the expected mounts present, on the expected transport (an RDMA-attached volume must
not have come back over TCP), with free space for checkpoints.

Mounts come from the node's mount table (``Roots.mountinfo``); the transport from the disk behind the mount (the
NVMe controller's transport: pcie, rdma, tcp, fc) or, for network filesystems, from the mount
itself (NFS ``proto=rdma``, Lustre ``@o2ib``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import NODE, CheckResult, failed, passed, skipped, warned
from nodeagent.v1 import nodeagent_pb2 as pb

LOW_FREE_RATIO = 0.05  # without an expectation, warn below this share of the volume free
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Mount:
    point: str
    fstype: str
    source: str
    options: str  # the filesystem's super options (NFS proto=, ...)


def parse_mountinfo(text: str) -> list[Mount]:
    """``36 35 98:0 /mnt1 /mnt2 rw master:1 - ext3 /dev/root rw,errors=continue`` per line."""
    mounts = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 2:
            continue
        mounts.append(Mount(_unescape(fields[4]), rest[0], _unescape(rest[1]), rest[2] if len(rest) > 2 else ""))
    return mounts


def transport_of(mount: Mount, disks: Sequence[pb.DiskInfo]) -> str:
    """rdma, tcp, pcie, fc (NVMe), block (other disks), or the filesystem type."""
    disk = next((d for d in disks if mount.point in d.mountpoints), None)
    if disk is not None:
        return disk.transport or "block"
    if mount.fstype.startswith("nfs"):
        return "rdma" if re.search(r"(^|,)proto=rdma(,|$)", mount.options) else "tcp"
    if mount.fstype == "lustre":
        return "rdma" if "@o2ib" in mount.source else "tcp"
    return mount.fstype


def run(ctx: DiagContext) -> list[CheckResult]:
    expect = ctx.profile.storage
    if not expect.mounts:
        return [skipped("storage.mounts", NODE, "no expected mounts (--expect-mount or a profile's [storage] mounts)")]
    path = ctx.roots.mountinfo()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            mounts = parse_mountinfo(handle.read())
    except OSError as err:
        return [warned("storage.mounts", NODE, f"{path}: {err.strerror}", "readable", "cannot list the mounts")]
    by_point = {m.point: m for m in mounts}  # the last mount on a point is the visible one
    results: list[CheckResult] = []
    for point in expect.mounts:
        subject = f"mount:{point}"
        mount = by_point.get(point.rstrip("/") or "/")
        if mount is None:
            hint = "not mounted: check /etc/fstab, `mount -a`, the volume's attachment (NVMe-oF, NFS server)"
            results.append(failed("storage.mounts", subject, "not mounted", "mounted", hint))
            continue
        results.append(passed("storage.mounts", subject, f"{mount.fstype} from {mount.source}", "mounted"))
        transport = transport_of(mount, ctx.observation.info.disks)
        if expect.transport is not None:
            if transport.lower() != expect.transport.lower():
                hint = (
                    f"the volume is attached over {transport}, not {expect.transport}: reattach it "
                    "(`nvme connect -t rdma`, `mount -o proto=rdma`)"
                )
                results.append(failed("storage.transport", subject, transport, expect.transport, hint))
            else:
                results.append(passed("storage.transport", subject, transport, expect.transport))
        results.append(_free(point, subject, expect.min_free_bytes))
    return results


def _free(point: str, subject: str, minimum: float | None) -> CheckResult:
    try:
        stat = os.statvfs(point)
    except OSError as err:
        return skipped("storage.free", subject, f"cannot stat {point}: {err.strerror}")
    free = stat.f_bavail * stat.f_frsize
    size = stat.f_blocks * stat.f_frsize
    value = f"{free / _GIB:.1f} GiB free of {size / _GIB:.1f} GiB"
    hint = "too little room for checkpoints: delete old ones or grow the volume"
    if minimum is not None:
        want = f"≥ {minimum / _GIB:.0f} GiB"
        return (
            failed("storage.free", subject, value, want, hint)
            if free < minimum
            else passed("storage.free", subject, value, want)
        )
    if size and free / size < LOW_FREE_RATIO:
        return warned("storage.free", subject, value, f"≥ {LOW_FREE_RATIO:.0%} free", hint)
    return passed("storage.free", subject, value)


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)
