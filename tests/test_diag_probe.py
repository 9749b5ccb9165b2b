"""``diag --probe``: direct-I/O read throughput and IOPS on the dataset mount, bounded, leaving
nothing behind; on a loop-device-backed ext4 mount its IOPS are within 10% of fio's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.diag.probe import MIN_FILE_BYTES, ProbeError, ProbeOptions, run_probe
from tests.conftest import require_root_tools
from tests.fakes.diag import host_tree, roots_args, run_diag
from tests.fakes.trees import REPO

PROBE_SECONDS = 3
FIO_FILE_MIB = 128


def probe_or_skip(options: ProbeOptions) -> object:
    try:
        return run_probe(options)
    except ProbeError as err:
        if "direct I/O" in str(err):
            pytest.skip(f"this filesystem has no direct I/O: {err}")
        raise


def test_probe_measures_and_leaves_nothing_behind(tmp_path: Path) -> None:
    started = time.monotonic()
    result = probe_or_skip(ProbeOptions(str(tmp_path), seconds=0.2, size_bytes=MIN_FILE_BYTES))
    elapsed = time.monotonic() - started
    figures = result.to_dict()  # type: ignore[attr-defined]
    assert figures["file_created"] and figures["file_bytes"] == MIN_FILE_BYTES
    assert figures["read_bytes_per_second"] > 0 and figures["read_iops"] > 0
    assert figures["read_latency_seconds"] == pytest.approx(1 / figures["read_iops"])
    assert list(tmp_path.iterdir()) == []
    assert elapsed < 10  # two 0.2 s phases plus writing 16 MiB


@pytest.mark.root
def test_a_probe_that_cannot_run_warns_and_diag_stays_healthy(tmp_path: Path) -> None:
    require_root_tools("mount", "umount")
    with pytest.raises(ProbeError, match="not a directory"):
        run_probe(ProbeOptions(str(tmp_path / "nothing")))
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True, timeout=30)
    try:
        roots = host_tree(tmp_path / "host")
        run = run_diag(
            *roots_args(roots), "--window", "0", "--kernel-log", os.devnull, "--json",
            "--probe", "--probe-path", str(small),
        )  # fmt: skip
    finally:
        subprocess.run(["umount", str(small)], check=False, timeout=30)
    assert run.exit_code == 0, run.out + run.err
    row = run.checks("probe.read")[0]
    assert row["status"] == "WARN" and "not enough free space" in row["value"]
    assert run.report["probe"] is None


@pytest.fixture
def loop_mount(tmp_path: Path) -> Iterator[Path]:
    """An ext4 filesystem on a loop device (direct I/O to its backing file, so reads reach a disk
    rather than the host's page cache), mounted on a temporary directory."""
    require_root_tools("fio", "losetup", "mkfs.ext4", "mount", "umount")
    backing = tmp_path / "volume.img"
    with open(backing, "wb") as handle:
        handle.truncate(512 * 2**20)
    device = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=on", str(backing)],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, timeout=60, capture_output=True)
        subprocess.run(["mount", device, str(mountpoint)], check=True, timeout=30)
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", str(mountpoint)], check=False, timeout=30)
    finally:
        subprocess.run(["losetup", "-d", device], check=False, timeout=30)


def fio_iops(directory: Path, seconds: float = PROBE_SECONDS) -> float:
    done = subprocess.run(
        [
            "fio", "--name=randread", f"--directory={directory}", f"--size={FIO_FILE_MIB}M", "--rw=randread",
            "--bs=4k", "--direct=1", "--ioengine=psync", "--iodepth=1", "--numjobs=1", "--time_based",
            f"--runtime={seconds}", "--output-format=json",
        ],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return float(json.loads(done.stdout)["jobs"][0]["read"]["iops"])


@pytest.mark.root
def test_probe_iops_match_fio_on_a_loop_device_mount(loop_mount: Path) -> None:
    fio_iops(loop_mount, seconds=1)  # lays out fio's file and warms the layers below the loop device
    before = fio_iops(loop_mount)
    done = subprocess.run(
        [
            sys.executable, "-m", "agent", "diag", "--json", "--window", "0", "--probe",
            "--probe-path", str(loop_mount), "--probe-seconds", str(PROBE_SECONDS), "--probe-size-mib", "128",
        ],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    after = fio_iops(loop_mount)
    assert done.returncode in (0, 1), done.stderr  # the probe itself never fails a healthy run
    report = json.loads(done.stdout)
    probe = report["probe"]
    assert probe["path"] == str(loop_mount) and probe["file_created"] and probe["queue_depth"] == 1
    fio = (before + after) / 2
    assert fio > 200
    assert probe["read_iops"] == pytest.approx(fio, rel=0.10), (probe, before, after)
    assert probe["read_bytes_per_second"] > probe["read_iops"] * 4096  # 1 MiB reads move more
    row = next(r for r in report["checks"] if r["check"] == "probe.read")
    assert row["status"] == "PASS" and row["subject"] == f"mount:{loop_mount}"
    assert not [p.name for p in loop_mount.iterdir() if p.name.startswith(".nodeagent-probe")]

    # Read-only (a dataset volume often is): the probe reads the largest file there instead.
    subprocess.run(["mount", "-o", "remount,ro", str(loop_mount)], check=True, timeout=30)
    result = run_probe(ProbeOptions(str(loop_mount), seconds=0.3))
    assert not result.file_created and result.file_bytes == FIO_FILE_MIB * 2**20
    assert result.read_iops > 0
