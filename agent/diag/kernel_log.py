"""Xid errors from the kernel log: the NVIDIA driver writes one line per Xid, naming the GPU by its
PCI address, and the log goes back to boot (NVML's events only show what happens while one waits).

Sources, in order: a file given by the operator (a saved ``dmesg``, a test fixture), else
``/dev/kmsg``, else the ``dmesg`` command. Both need root or ``kernel.dmesg_restrict=0``; when
neither can be read the check says so and skips.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

KMSG: Final = "/dev/kmsg"
_MAX_RECORDS: Final = 1_000_000  # the ring buffer holds far fewer; a bound all the same
_MAX_SECONDS: Final = 2.0
# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
_XID: Final = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?\): (\d+)(?:,\s*(.*))?"
)


@dataclass(frozen=True, slots=True)
class KernelLog:
    source: str  # the file, "/dev/kmsg" or "dmesg"; "" when none could be read
    lines: tuple[str, ...]
    unreadable_reason: str = ""


@dataclass(frozen=True, slots=True)
class XidRecord:
    pci: tuple[int, int, int]  # (domain, bus, device), as in the GPU's pci.bus_id
    xid: int
    detail: str  # the rest of the driver's line


def read_kernel_log(path: str | None = None) -> KernelLog:
    """The kernel log's lines from ``path``, or from this machine's log."""
    if path is not None and os.path.realpath(path) == KMSG:
        path = None  # read as a stream of records, not as a file (which would wait for more)
    if path is not None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return KernelLog(path, tuple(handle.read().splitlines()))
        except OSError as err:
            return KernelLog("", (), f"{path}: {err.strerror or err}")
    reasons = []
    try:
        return KernelLog(KMSG, tuple(_read_kmsg()))
    except OSError as err:
        reasons.append(f"{KMSG}: {err.strerror or err}")
    dmesg = shutil.which("dmesg")
    if dmesg is None:
        reasons.append("no dmesg command")
    else:
        try:
            done = subprocess.run([dmesg], capture_output=True, text=True, errors="replace", timeout=5, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            reasons.append(f"dmesg: {err}")
        else:
            if done.returncode == 0:
                return KernelLog("dmesg", tuple(done.stdout.splitlines()))
            reasons.append(f"dmesg: {done.stderr.strip() or f'exit {done.returncode}'}")
    return KernelLog("", (), "; ".join(reasons) + " (needs root or kernel.dmesg_restrict=0)")


def parse_xids(lines: Iterable[str]) -> list[XidRecord]:
    """Every Xid line, oldest first."""
    out: list[XidRecord] = []
    for line in lines:
        match = _XID.search(line)
        if match is not None:
            pci = (int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16))
            out.append(XidRecord(pci, int(match.group(4)), (match.group(5) or "").strip()))
    return out


def pci_address(bus_id: str) -> tuple[int, int, int] | None:
    """NVML's ``00000000:07:00.0`` as (domain, bus, device)."""
    match = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?", bus_id.strip())
    if match is None:
        return None
    return int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)


def _read_kmsg() -> list[str]:
    """Every record in the ring buffer, without waiting for new ones. Each read returns one
    record, ``prio,seq,usec,flags;message`` with continuation lines after it."""
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    lines: list[str] = []
    deadline = time.monotonic() + _MAX_SECONDS
    try:
        for _ in range(_MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break  # read everything there is
            except OSError as err:
                if err.errno == errno.EPIPE:
                    continue  # overwritten while we read: the next one follows
                raise
            if not record:
                break
            _, _, message = record.decode("utf-8", "replace").partition(";")
            lines.append(message.split("\n", 1)[0])
            if time.monotonic() > deadline:
                break
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return lines
