"""Disk topology: an RDMA-attached NVMe volume is recognised as such, partitions fold into
their disk, mount points come from mountinfo."""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.agent.sources import Roots
from tests.fakes.trees import write_tree

DISKSTATS = """ 259       0 nvme0n1 10 0 80 1 0 0 0 0 0 1 1
 259       1 nvme0n1p1 5 0 40 1 0 0 0 0 0 1 1
 259       2 nvme1n1 20 0 160 2 0 0 0 0 0 2 2 0 0 0 0 0 0
 259       3 nvme2n1 30 0 240 3 0 0 0 0 0 3 3
   8       0 sda 40 0 320 4 0 0 0 0 0 4 4
   8       1 sda1 40 0 320 4 0 0 0 0 0 4 4
"""
MOUNTINFO = r"""22 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p1 rw
30 22 259:2 / /mnt/dataset rw,relatime - xfs /dev/nvme1n1 rw
31 22 259:3 / /mnt/check\040points rw,relatime - xfs /dev/nvme2n1 rw
32 22 8:1 / /scratch rw - ext4 /dev/sda1 rw
33 22 0:21 / /proc rw - proc proc rw
"""


def test_nvme_transport_partitions_and_mounts(tmp_path: Path, make_sampler) -> None:
    root = write_tree(
        tmp_path,
        {
            "proc/diskstats": DISKSTATS,
            "proc/self/mountinfo": MOUNTINFO,
            "sys/class/nvme/nvme0/transport": "pcie\n",
            "sys/class/nvme/nvme0/model": "Local NVMe\n",
            "sys/class/nvme/nvme1/transport": "rdma\n",
            # Native multipath: nvme2n1 is named after subsystem 2, served by controller nvme5.
            "sys/class/nvme-subsystem/nvme-subsys2/nvme5/.keep": "",
            "sys/class/nvme/nvme5/transport": "tcp\n",
            "sys/block/nvme1n1/size": "2097152\n",
            "sys/block/nvme1n1/queue/rotational": "0\n",
            "sys/block/sda/queue/rotational": "1\n",
            "sys/devices/pci0/sda/sda1/partition": "1\n",
        },
    )
    (root / "sys/class/block").mkdir(parents=True)
    os.symlink("../../devices/pci0/sda/sda1", root / "sys/class/block/sda1")
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["diskstats"])
    report = sampler.tick()
    assert [d.name for d in report.disks] == ["nvme0n1", "nvme1n1", "nvme2n1", "sda"]
    disks = {d.name: d for d in sampler.info.disks}
    assert (disks["nvme0n1"].transport, disks["nvme0n1"].nvme_controller) == ("pcie", "nvme0")
    assert disks["nvme0n1"].model == "Local NVMe"
    assert disks["nvme1n1"].transport == "rdma"
    assert (disks["nvme2n1"].transport, disks["nvme2n1"].nvme_controller) == ("tcp", "nvme5")
    assert disks["sda"].transport == ""
    assert list(disks["nvme0n1"].mountpoints) == ["/"]
    assert list(disks["nvme1n1"].mountpoints) == ["/mnt/dataset"]
    assert list(disks["nvme2n1"].mountpoints) == ["/mnt/check points"]
    assert list(disks["sda"].mountpoints) == ["/scratch"]
    assert disks["nvme1n1"].size_bytes == 2097152 * 512
    assert disks["nvme1n1"].rotational is False
    assert disks["sda"].rotational is True


def test_new_disk_appears_after_rescan(tmp_path: Path, make_sampler) -> None:
    root = write_tree(tmp_path, {"proc/diskstats": " 8 0 sda 1 0 8 1 0 0 0 0 0 1 1\n"})
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["diskstats"])
    assert [d.name for d in sampler.tick().disks] == ["sda"]
    write_tree(root, {"proc/diskstats": " 8 0 sda 1 0 8 1 0 0 0 0 0 1 1\n 8 16 sdb 2 0 16 1 0 0 0 0 0 1 1\n"})
    # The tick that meets sdb asks for a rescan; the next one reports it and its topology.
    sampler.tick()
    report = sampler.tick()
    assert [d.name for d in report.disks] == ["sda", "sdb"]
    assert [d.name for d in report.info.disks] == ["sda", "sdb"]


def test_under_another_procfs_root_the_mounts_are_init_s(tmp_path: Path) -> None:
    # A container with the host's /proc at /host/proc: "self" would be the container itself.
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text("container mounts\n")
    roots = Roots(procfs=str(tmp_path))
    assert roots.mountinfo() == str(tmp_path / "self" / "mountinfo")  # no init entry: fall back
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "mountinfo").write_text("host mounts\n")
    assert roots.mountinfo() == str(tmp_path / "1" / "mountinfo")
    assert Roots().mountinfo() == "/proc/self/mountinfo"  # on the node itself, its own view
