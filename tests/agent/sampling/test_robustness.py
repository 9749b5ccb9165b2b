"""Missing or garbage files under the roots: the rest is still reported, no traceback."""

from __future__ import annotations

from pathlib import Path

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.sources import Roots
from nodeagent.agent.views.snapshots import snapshot
from tests.fakes.trees import NET_DEV_HEADER, write_tree

GOOD_NET_DEV = (
    NET_DEV_HEADER
    + """  eth0: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0
  eth1: garbage here
  eth2: 300 3 0 0 0 0 0 0 400 4 0 0 0 0 0 0
"""
)


def test_empty_roots_give_an_empty_report_without_errors(tmp_path: Path, make_sampler) -> None:
    sampler = make_sampler(Roots(str(tmp_path), str(tmp_path)))
    report = sampler.tick()
    assert all(c.success for c in report.collectors)
    assert not report.nics and not report.disks and not report.rdma_ports
    snapshot(None, report, sampler.info)


def test_garbage_lines_and_files_lose_only_themselves(tmp_path: Path, make_sampler) -> None:
    port = "sys/class/infiniband/mlx5_0/ports/1"
    root = write_tree(
        tmp_path,
        {
            "proc/net/dev": GOOD_NET_DEV,
            "proc/diskstats": "not a diskstats line\n 259 0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11\n 8 0 sda x y z\n",
            "proc/stat": "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 zz\nctxt abc\n",
            "proc/meminfo": "MemTotal: 1000 kB\nBogus line\nCached: lots kB\n",
            "proc/loadavg": "nonsense\n",
            "proc/pressure/cpu": "some avg10=x avg60=0 avg300=0 total=1\n",
            "proc/pressure/io": "some avg10=1.00 avg60=2.00 avg300=3.00 total=42\n",
            "proc/pressure/memory": "",
            f"{port}/state": "garbage\n",
            f"{port}/rate": "fast\n",
            f"{port}/counters/port_rcv_data": "N/A (no PMA)\n",
            f"{port}/counters/port_xmit_data": "12\n",
            f"{port}/counters/symbol_error": "-x-\n",
            "sys/class/net/eth0/speed": "not-a-number\n",
            "sys/class/net/eth0/mtu": "1500\n",
            "sys/class/net/eth0/operstate": "up\n",
        },
    )
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")))
    report = sampler.tick()
    assert all(c.success for c in report.collectors), [c.error for c in report.collectors]
    assert [n.name for n in report.nics] == ["eth0", "eth2"]
    eth0 = report.nics[0]
    assert eth0.mtu == 1500 and eth0.operstate == "up"
    assert not eth0.HasField("speed_bytes_per_second")
    assert [d.name for d in report.disks] == ["nvme0n1"]
    assert report.host.memory_total_bytes == 1000 * 1024
    assert not report.host.HasField("memory_cached_bytes")
    assert not report.host.HasField("load1")
    assert not report.host.HasField("pressure_cpu")
    assert report.host.pressure_io.some_total_microseconds == 42
    assert not report.host.HasField("pressure_memory")
    mlx5 = report.rdma_ports[0]
    assert not mlx5.HasField("rx_bytes_total")
    assert mlx5.tx_bytes_total == 48
    assert not mlx5.HasField("rate_bytes_per_second")
    assert mlx5.state == "garbage" and not mlx5.HasField("state_id")


def test_unreadable_attribute_loses_only_that_value(tmp_path: Path, make_sampler) -> None:
    port = "sys/class/infiniband/bnxt_re0/ports/1"
    root = write_tree(tmp_path, {f"{port}/state": "4: ACTIVE\n", f"{port}/rate": "100 Gb/sec (4X EDR)\n"})
    # A device without counters/ (irdma, bnxt_re) and a directory where a file should be.
    (root / port / "phys_state").mkdir()
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["infiniband"])
    report = sampler.tick()
    port_sample = report.rdma_ports[0]
    assert port_sample.state == "ACTIVE"
    assert port_sample.phys_state == ""
    assert port_sample.rate_bytes_per_second == 100e9 / 8
    assert not port_sample.HasField("rx_bytes_total")


def test_a_source_that_raises_loses_only_its_section(tmp_path: Path, make_sampler, monkeypatch) -> None:
    from nodeagent.agent.sources import meminfo

    root = write_tree(tmp_path, {"proc/meminfo": "MemTotal: 1 kB\n", "proc/loadavg": "1.0 2.0 3.0 1/1 1\n"})

    def explode(_text: str) -> dict[str, int]:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(meminfo, "parse_meminfo", explode)
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")))
    report = sampler.tick()
    status = {c.name: c for c in report.collectors}
    assert not status["meminfo"].success
    assert status["meminfo"].error == "RuntimeError: boom"
    assert status["cpu"].success and report.host.load1 == 1.0
    assert [e.kind for e in report.events] == ["collector_error"]


def test_a_device_that_disappears_and_returns(tmp_path: Path, make_sampler) -> None:
    import shutil

    nic = "sys/class/net/eth0"
    root = write_tree(tmp_path, {f"{nic}/mtu": "9000\n", "proc/net/dev": GOOD_NET_DEV})
    # Rescan every tick (the test clock advances 1 s per tick).
    config = AgentConfig(rescan_seconds=1.0)
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), config=config, sources=["netdev"])
    assert sampler.tick().nics[0].mtu == 9000
    shutil.rmtree(root / nic)
    assert not sampler.tick().nics[0].HasField("mtu")
    write_tree(root, {f"{nic}/mtu": "1500\n"})
    assert sampler.tick().nics[0].mtu == 1500


def test_kernel_files_reopen_after_enodev(tmp_path: Path, monkeypatch) -> None:
    import errno
    import os

    from nodeagent.agent.kernel.files import KernelFiles

    path = tmp_path / "speed"
    path.write_text("25000\n")
    files = KernelFiles()
    assert files.read_int(str(path)) == 25000
    real_pread = os.pread
    calls = {"n": 0}

    def pread_once_enodev(fd: int, n: int, offset: int) -> bytes:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.ENODEV, "No such device")
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread_once_enodev)
    path.unlink()
    path.write_text("50000\n")  # a new device under the same name
    assert files.read_int(str(path)) == 50000
    monkeypatch.setattr(os, "pread", lambda *_: (_ for _ in ()).throw(OSError(errno.EINVAL, "Invalid")))
    assert files.read_int(str(path)) is None  # link down: `speed` has no value now
    files.close()
    assert len(files) == 0


def test_procfs_files_longer_than_one_read_are_read_whole() -> None:
    from nodeagent.agent.kernel.files import KernelFiles

    # /proc/self/maps of a Python process spans several pages, and procfs hands out about
    # one page per read: a reader that stops at the first short read loses the rest.
    whole = Path("/proc/self/maps").read_bytes()
    assert len(whole) > 8192, "precondition: maps spans several pages"
    files = KernelFiles()
    try:
        data = files.read_bytes("/proc/self/maps")
    finally:
        files.close()
    assert data is not None
    assert abs(len(data.splitlines()) - len(whole.splitlines())) <= 3
