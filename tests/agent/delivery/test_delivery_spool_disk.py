"""A damaged or full spool disk loses nothing uncounted: produced = stored + counted as dropped.

Real processes on loopback, as in ``test_delivery``: ``nodeagent run`` with ``--spool-dir`` and
``nodeagent-collector serve``. The full disk is a small tmpfs (root only: mounting needs it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nodeagent.agent.delivery.record import HEADER_BYTES, encode
from nodeagent.agent.delivery.recovery import decode_all
from tests.conftest import require
from tests.fakes.fleet import Agent, Collector, free_port, processes, wait_for

FAST = ["--interval", "0.03", "--no-collector.gpu"]


def _agent(collector: Collector, node: str, spool: Path, *args: str) -> Agent:
    return Agent(["--collector", collector.address, "--node-id", node, *FAST, "--spool-dir", str(spool), *args])


@contextmanager
def _tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    mountpoint.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)], check=False)
    require(done.returncode == 0, "cannot mount a tmpfs here (no CAP_SYS_ADMIN?)")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _fill_up(path: Path) -> None:
    with path.open("wb", buffering=0) as handle:
        for _ in range(10_000):  # 2 MiB in 4 KiB writes at most
            try:
                handle.write(b"g" * 4096)
            except OSError:
                break
        for _ in range(4096):
            try:
                handle.write(b"g")
            except OSError:
                return


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _disk_failures(port: int) -> float | None:
    return _metric(port, "nodeagent_agent_spool_disk_failures_total")


def test_a_full_tmpfs_spool_loses_nothing_uncounted_and_the_agent_goes_on(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    metrics_port = free_port()
    with _tmpfs(tmp_path / "fs", "2m") as fs, processes() as started:
        # Leave room for a few dozen reports only; the spool's own bound (64 MiB) is far above it.
        filler = fs / "filler"
        filler.write_bytes(b"f" * (_free_bytes(fs) - 40 * 1024))
        spool = fs / "spool"
        # No collector yet: the reports pile up on the small disk until it is full.
        first = _agent(collector, "node-t", spool, "--max-reports", "100", "--deadline", "90",
                       "--metrics-listen", f"127.0.0.1:{metrics_port}").start(tmp_path / "a1.log")  # fmt: skip
        started.append(first)
        failed = wait_for(lambda: _disk_failures(metrics_port) == 1 or first.proc.poll() is not None, timeout=30)  # type: ignore[union-attr]
        assert failed and first.proc.poll() is None, first.tail()  # type: ignore[union-attr]
        assert _free_bytes(fs) < 8 * 1024
        assert _metric(metrics_port, "nodeagent_agent_spool_on_disk") == 0
        started.append(collector.start())
        code, one = first.wait(timeout=90)
        assert code == 0, first.tail()
        # Acknowledged segments were deleted meanwhile: fill the disk up to the last byte again, so
        # the restart finds no room even for a new state file. It carries on above every seq sent.
        _fill_up(fs / "filler2")
        second = _agent(collector, "node-t", spool, "--max-reports", "50", "--deadline", "60")
        started.append(second.start(tmp_path / "a2.log"))
        code, two = second.wait(timeout=90)
        assert code == 0, second.tail()
        node = collector.node("node-t")
    assert "spool directory failed" in first.tail()
    assert "spool directory failed" in second.tail()
    assert one["produced"] == 100 and two["produced"] == 50
    assert two["epoch"] == one["epoch"] == node["epoch"]
    assert two["last_seq"] == 150
    # Every report produced is stored or counted as dropped, exactly; none was taken for a duplicate.
    assert node["reports_total"] + two["dropped_total"] == 150
    assert node["duplicates_total"] == 0
    assert node["spool_dropped_reports_total"] == two["dropped_total"]


def test_flipped_bytes_in_the_spool_cost_only_their_own_reports(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    spool = tmp_path / "spool"
    with processes() as started:
        started.append(collector.start())
        code, _ = (
            _agent(collector, "node-b", spool, "--max-reports", "40", "--deadline", "60")
            .start(tmp_path / "a1.log")
            .wait(timeout=90)
        )
        assert code == 0
        collector.kill(signal.SIGTERM)
        # The collector is away: reports 41..70 stay in the spool, state.json says acked 40.
        away = _agent(collector, "node-b", spool, "--max-reports", "30", "--deadline", "3")
        started.append(away.start(tmp_path / "a2.log"))
        code, summary = away.wait(timeout=60)
        assert (code, summary["last_seq"], summary["unacked"]) == (1, 70, 30), away.tail()
        _flip_payloads(spool, {41, 55})  # the record just above the acked mark, and one further on
        collector.start()
        back = _agent(collector, "node-b", spool, "--max-reports", "50", "--deadline", "60")
        started.append(back.start(tmp_path / "a3.log"))
        code, summary = back.wait(timeout=90)
        assert code == 0, back.tail()
        node = collector.node("node-b")
    assert summary["last_seq"] == 120  # no seq handed out twice
    assert summary["dropped_total"] == 2  # exactly the two destroyed reports
    assert (node["reports_total"], node["last_seq"], node["duplicates_total"]) == (118, 120, 0)
    assert node["spool_dropped_reports_total"] == 2


def test_the_spool_directory_stays_within_its_bound(tmp_path: Path) -> None:
    bound = 64 * 1024
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    spool = tmp_path / "spool"
    with processes() as started:
        agent = _agent(collector, "node-d", spool, "--max-reports", "200", "--deadline", "60",
                       "--spool-max-bytes", str(bound)).start(tmp_path / "a.log")  # fmt: skip
        started.append(agent)
        peak, end = 0, time.monotonic() + 200 * 0.03 + 3.0  # no collector while the agent samples
        while time.monotonic() < end and agent.proc is not None and agent.proc.poll() is None:
            peak = max(peak, _frozen(agent.proc.pid, lambda: _disk_bytes(spool)))
            time.sleep(0.01)
        started.append(collector.start())
        code, summary = agent.wait(timeout=90)
        assert code == 0, agent.tail()
        node = collector.node("node-d")
    assert peak <= bound
    assert peak > bound // 2  # it did fill up to near the bound
    assert 0 < summary["dropped_total"] < 200
    assert (node["reports_total"], node["last_seq"], node["gap_reports_total"]) == (
        200 - summary["dropped_total"],
        200,
        0,
    )


def _frozen(pid: int, measure: Callable[[], int]) -> int:
    """``measure()`` while every thread of ``pid`` is stopped: one instant of the directory, not
    a listing during which one segment goes and another grows."""
    os.kill(pid, signal.SIGSTOP)
    try:
        tasks = Path(f"/proc/{pid}/task")
        for _ in range(500):  # 5 s at most
            states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
            if all(state in "tTZX" for state in states):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the agent did not stop")
        return measure()
    finally:
        os.kill(pid, signal.SIGCONT)


def _disk_bytes(directory: Path) -> int:
    total = 0
    for path in directory.glob("*"):
        try:
            stats = path.stat()
        except FileNotFoundError:
            continue  # deleted between listing and stat
        total += max(stats.st_size, stats.st_blocks * 512)
    return total


def _flip_payloads(spool: Path, seqs: set[int]) -> None:
    """Flip one byte in the middle of each of these reports' payloads."""
    flipped: set[int] = set()
    for segment in sorted(spool.glob("seg-*.log")):
        blob = segment.read_bytes()
        damaged, offset = bytearray(blob), 0
        for record in decode_all(blob)[0]:
            if record.seq in seqs:
                damaged[offset + HEADER_BYTES + len(record.data) // 2] ^= 0xFF
                flipped.add(record.seq)
            offset += len(encode(record))
        segment.write_bytes(bytes(damaged))
    assert flipped == seqs, f"not in the spool: {seqs - flipped}"
