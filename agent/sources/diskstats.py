"""Disks: ``<procfs>/diskstats`` (14, 18 or 20 fields), whole disks only, with their
rotational flag, size, NVMe transport (an RDMA- or TCP-attached volume is recognised as
such) and mount points from the node's mount table (``Roots.mountinfo``).

Which disks, node_exporter's way: ``--collector.diskstats.device-include`` or
``--collector.diskstats.device-exclude``, regular expressions searched in the device name (not
anchored), mutually exclusive; the exclude has a default, which an include replaces. The
default leaves out RAM disks, compressed swap and floppies; node_exporter's also leaves out
partitions, which this reader never reports (whole disks only), and loop devices, which it keeps
when bound (the lab's volumes are loop devices): give node_exporter's pattern to drop them too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.agent.kernel.files import list_dir
from nodeagent.agent.sources.base import Source, SourceContext, SourceOption
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

SECTOR_BYTES = 512
# Never data disks: RAM disks, compressed swap, floppies.
DEFAULT_DEVICE_EXCLUDE = r"^(z?ram|fd)\d+$"
INCLUDE, EXCLUDE = "diskstats.device-include", "diskstats.device-exclude"
# Partition names, for trees where sysfs does not say (`partition` attribute).
_PARTITION = re.compile(r"^((?:h|s|v|xv)d[a-z]+)\d+$|^((?:nvme\d+n\d+|mmcblk\d+|loop\d+|nbd\d+|md\d+))p\d+$")
_NVME_NAMESPACE = re.compile(r"^nvme(\d+)n(\d+)$")


@dataclass(frozen=True, slots=True)
class DeviceFilter:
    """node_exporter's device filter: a device is ignored when it matches ``exclude`` or does not
    match ``include`` (``re.search``: a pattern is anchored only by its own ``^``/``$``)."""

    exclude: re.Pattern[str] | None = re.compile(DEFAULT_DEVICE_EXCLUDE)
    include: re.Pattern[str] | None = None

    def ignored(self, name: str) -> bool:
        return (self.exclude is not None and self.exclude.search(name) is not None) or (
            self.include is not None and self.include.search(name) is None
        )


def device_filter(options: Mapping[str, str]) -> DeviceFilter:
    """The filter the flags give; ``ValueError`` (one line) for both flags or a bad pattern.

    As in node_exporter, an include replaces the default exclude, and an exclude given as ""
    beside an include is no exclude."""
    include, exclude = options.get(INCLUDE), options.get(EXCLUDE)
    if include and exclude:
        raise ValueError(f"--collector.{INCLUDE} and --collector.{EXCLUDE} are mutually exclusive")
    if include:
        return DeviceFilter(exclude=None, include=_pattern(INCLUDE, include))
    if exclude is None:
        return DeviceFilter()
    return DeviceFilter(exclude=_pattern(EXCLUDE, exclude) if exclude else None)


@dataclass(frozen=True, slots=True)
class DiskStat:
    major: int
    minor: int
    name: str
    values: tuple[int, ...]  # the 11, 15 or 17 counters after the name


def parse_diskstats(text: str) -> list[DiskStat]:
    """Every line with 14, 18 or 20 fields (or any count >= 14); others are skipped."""
    stats: list[DiskStat] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14:
            continue
        try:
            values = tuple(map(int, fields[3:]))
            stats.append(DiskStat(int(fields[0]), int(fields[1]), fields[2], values))
        except ValueError:
            continue
    return stats


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(major:minor, mount point) per line of mountinfo."""
    mounts: list[tuple[str, str]] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        mounts.append((fields[2], _unescape(fields[4])))
    return mounts


def parent_disk(name: str) -> str | None:
    """The disk a partition name belongs to by naming convention, else None."""
    match = _PARTITION.match(name)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def fill_sample(sample: pb.DiskSample, values: tuple[int, ...]) -> None:
    v = values
    sample.reads_completed_total = v[0]
    sample.reads_merged_total = v[1]
    sample.read_bytes_total = v[2] * SECTOR_BYTES
    sample.read_time_milliseconds_total = v[3]
    sample.writes_completed_total = v[4]
    sample.writes_merged_total = v[5]
    sample.written_bytes_total = v[6] * SECTOR_BYTES
    sample.write_time_milliseconds_total = v[7]
    sample.io_in_progress = v[8]
    sample.io_time_milliseconds_total = v[9]
    sample.io_weighted_time_milliseconds_total = v[10]
    if len(v) >= 15:
        sample.discards_completed_total = v[11]
        sample.discards_merged_total = v[12]
        sample.discarded_bytes_total = v[13] * SECTOR_BYTES
        sample.discard_time_milliseconds_total = v[14]
    if len(v) >= 17:
        sample.flushes_completed_total = v[15]
        sample.flush_time_milliseconds_total = v[16]


@register
class DiskstatsSource(Source):
    name = "diskstats"
    help = "Disk I/O counters (diskstats), transport, size and mounts of whole disks"
    options = (
        SourceOption(
            "device-include", "Regexp of diskstats devices to include (mutually exclusive to device-exclude).", "REGEX"
        ),
        SourceOption(
            "device-exclude",
            "Regexp of diskstats devices to exclude (mutually exclusive to device-include) "
            f"[default: {DEFAULT_DEVICE_EXCLUDE}; partitions are never reported].",
            "REGEX",
        ),
    )

    @classmethod
    def check_options(cls, options: Mapping[str, str]) -> None:
        device_filter(options)

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._filter = device_filter(ctx.options)
        self._disks: set[str] = set()
        self._seen: set[str] = set()

    def scan(self, info: pb.NodeInfo) -> None:
        roots, files = self.ctx.roots, self.ctx.files
        text = files.read_text(roots.proc("diskstats"))
        stats = parse_diskstats(text) if text is not None else []
        by_devno = {f"{s.major}:{s.minor}": s.name for s in stats}
        disks = [s.name for s in stats if not self._filter.ignored(s.name) and self._is_disk(s.name)]
        mounts: dict[str, list[str]] = {d: [] for d in disks}
        mount_text = files.read_text(roots.mountinfo())
        for devno, point in parse_mountinfo(mount_text) if mount_text else []:
            dev = by_devno.get(devno)
            if dev is None:
                continue
            owner = dev if dev in mounts else self._parent(dev)
            if owner in mounts:
                mounts[owner].append(point)
        del info.disks[:]
        for name in disks:
            info.disks.append(self._describe(name, mounts[name]))
        self._disks = set(disks)
        self._seen = {s.name for s in stats}

    def collect(self, report: pb.NodeReport) -> None:
        text = self.ctx.files.read_text(self.ctx.roots.proc("diskstats"))
        if text is None:
            return
        for stat in parse_diskstats(text):
            if stat.name not in self._disks:
                if stat.name not in self._seen:
                    self.needs_rescan = True
                continue
            fill_sample(report.disks.add(name=stat.name), stat.values)

    def _is_disk(self, name: str) -> bool:
        sys_block = self.ctx.roots.sys("class", "block", name)
        if os.path.exists(os.path.join(sys_block, "partition")):
            return False
        if name.startswith("loop"):
            # An unbound loop device is no disk; a bound one is (tests use them).
            return os.path.exists(self.ctx.roots.sys("block", name, "loop", "backing_file"))
        if os.path.isdir(self.ctx.roots.sys("block", name)):
            return True
        return parent_disk(name) is None

    def _parent(self, partition: str) -> str | None:
        link = self.ctx.roots.sys("class", "block", partition)
        if os.path.islink(link):
            parent = os.path.basename(os.path.dirname(os.path.realpath(link)))
            if parent != "block":
                return parent
        return parent_disk(partition)

    def _describe(self, name: str, mountpoints: list[str]) -> pb.DiskInfo:
        files = self.ctx.files
        block = self.ctx.roots.sys("block", name)
        disk = pb.DiskInfo(name=name, mountpoints=sorted(mountpoints))
        rotational = files.read_int(f"{block}/queue/rotational")
        if rotational is not None:
            disk.rotational = rotational == 1
        sectors = files.read_int(f"{block}/size")
        if sectors is not None:
            disk.size_bytes = sectors * SECTOR_BYTES
        disk.model = files.read_str(f"{block}/device/model") or ""
        match = _NVME_NAMESPACE.match(name)
        if match is not None:
            controller, transport = self._nvme_transport(match.group(1))
            disk.nvme_controller, disk.transport = controller, transport
            if not disk.model and controller:
                disk.model = files.read_str(self.ctx.roots.sys("class", "nvme", controller, "model")) or ""
        return disk

    def _nvme_transport(self, instance: str) -> tuple[str, str]:
        """Controller and transport (pcie, rdma, tcp, fc, loop) of namespace ``nvme<instance>nN``.

        Without native multipath the instance is the controller's; with it, the block device
        is named after the subsystem, whose controllers are listed in nvme-subsystem/."""
        files, roots = self.ctx.files, self.ctx.roots
        candidates = [f"nvme{instance}"]
        subsys = roots.sys("class", "nvme-subsystem", f"nvme-subsys{instance}")
        candidates += [c for c in list_dir(subsys) if re.fullmatch(r"nvme\d+", c)]
        for controller in candidates:
            transport = files.read_str(roots.sys("class", "nvme", controller, "transport"))
            if transport:
                return controller, transport
        return (candidates[0] if os.path.isdir(roots.sys("class", "nvme", candidates[0])) else ""), ""


def _pattern(option: str, text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as err:
        raise ValueError(f"--collector.{option} {text!r}: not a regular expression ({err})") from err


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)
