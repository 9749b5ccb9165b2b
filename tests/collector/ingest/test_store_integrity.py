"""The collector's database against what can go wrong with it, with real ``serve`` processes.

A second collector on the same file, a flipped bit in a stored watermark, a ``-wal`` deleted
after a crash, damaged history tables: each is refused, repaired or reported, and never
silently costs acknowledged reports.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import grpc

from nodeagent.core.wire.framing import frame_report
from tests.fakes.fleet import Collector, cli, free_port, processes
from tests.fakes.ingest_client import hello_message, send_messages, small_report
from tests.fakes.trees import REPO

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

NODE = "n1"
T = TypeVar("T")
# Reports of the last hour: the history's retention sweep (by the collector's clock) keeps them.
T0 = time.time() - 3000.0


def _report(seq: int) -> bytes:
    """A report of eight busy GPUs at T0 + seq (epoch 7): about 0.25 kB stored, so 60 of them
    take several pages of ``history_reports``."""
    report = small_report(NODE, seq)
    report.time_unix_seconds = T0 + seq
    for index in range(1, 8):
        gpu = report.gpus.add(index=index, uuid=f"GPU-{index}", utilization_gpu_ratio=0.4 + index / 100)
        gpu.processes.add(pid=100 + index, name=f"python-rank-{index}")
    return frame_report(report.SerializeToString())


def _stream(collector: Collector, seqs: range) -> grpc.StatusCode:
    """One stream of these reports, to its end (the collector acks what it stored before closing)."""
    with grpc.insecure_channel(collector.address) as channel:
        return send_messages(channel, [hello_message(NODE), *(_report(s) for s in seqs)])


@contextmanager
def _collector_with_reports(tmp_path: Path, count: int) -> Iterator[Collector]:
    """A collector on ``tmp_path / "c.db"`` that stored reports 1..count of NODE; killed at the end."""
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        assert _stream(collector, range(1, count + 1)) == grpc.StatusCode.OK
        yield collector


def test_a_second_collector_on_the_same_database_is_refused(tmp_path: Path) -> None:
    with _collector_with_reports(tmp_path, 10) as first:
        db = first.db
        second = subprocess.run(
            [sys.executable, "-m", "nodeagent.collector", "serve", "--listen", f"127.0.0.1:{free_port()}",
             "--http-listen", "127.0.0.1:0", "--db", str(db)],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        # The first one goes on, and `replay --node` still reads the file beside it.
        assert _stream(first, range(11, 21)) == grpc.StatusCode.OK
        stored = first.node(NODE)["reports_total"]
        replay = cli("collector", "replay", "--node", NODE, "--since", "1h", "--db", str(db), "--json")
    assert first.proc is not None
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0] and f"process {first.proc.pid}" in lines[0], lines
    assert second.stdout == ""
    assert stored == 20
    assert [(n["node_id"], n["reports"]) for n in json.loads(replay)["nodes"]] == [(NODE, 20)]


def test_a_stopped_collectors_lock_is_taken_by_the_next(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        collector.kill(signal.SIGKILL)  # the kernel drops a dead process's lock
        collector.start()
        assert _stream(collector, range(1, 4)) == grpc.StatusCode.OK
        assert collector.node(NODE)["reports_total"] == 3


def _log_events(collector: Collector) -> list[dict[str, Any]]:
    """The JSON log lines of the collector's latest run."""
    assert collector.log is not None
    return [json.loads(line) for line in collector.log.read_text().splitlines() if line.startswith("{")]


def _metric(collector: Collector, sample: str) -> float | None:
    for line in collector.metrics().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


def _while_stopped(collector: Collector, edit: Callable[[sqlite3.Connection], T]) -> T:
    """Stop the collector cleanly (all it holds in the database file), change the file through
    SQLite as something that is not the collector would, and start the collector again."""
    collector.kill(signal.SIGTERM)
    conn = sqlite3.connect(collector.db)
    try:
        with conn:
            out = edit(conn)
    finally:
        conn.close()
    collector.start()
    return out


def _flip_bit_14_of_the_watermark(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
    """The node's watermark with bit 14 flipped; what it reads, and what SQLite's own check says."""
    conn.execute("UPDATE watermarks SET seq = seq | 16384 WHERE node_id = ?", (NODE,))
    flipped = conn.execute("SELECT seq FROM watermarks WHERE node_id = ?", (NODE,)).fetchall()
    return flipped, conn.execute("PRAGMA integrity_check").fetchall()


def test_a_flipped_bit_in_a_stored_watermark_is_repaired_not_obeyed(tmp_path: Path) -> None:
    """A watermark of 16,404 where 20 reports were stored would have the next 16,000 reports
    acknowledged and dropped as duplicates: it is repaired from the node row, logged, counted."""
    with _collector_with_reports(tmp_path, 20) as collector:
        flipped, integrity = _while_stopped(collector, _flip_bit_14_of_the_watermark)
        assert _stream(collector, range(21, 31)) == grpc.StatusCode.OK
        node = collector.node(NODE)
        repairs = _metric(collector, 'nodeagent_store_repairs_total{what="watermark"}')
    assert (flipped, integrity) == ([(16404,)], [("ok",)])  # SQLite itself sees nothing wrong
    assert (node["reports_total"], node["duplicates_total"], node["gap_reports_total"]) == (30, 0, 0)
    repaired = [e for e in _log_events(collector) if e["event"] == "stored watermark damaged; repaired"]
    assert [(e["level"], e["node"], e["watermark_seq"], e["node_row_seq"], e["now"]) for e in repaired] == [
        ("error", NODE, 16404, 20, 20)
    ]
    assert repairs == 1.0


def _tables_in_main_file(db: Path, tmp: Path) -> dict[str, int]:
    """Rows per table in the database file alone, as if its -wal were gone (read from a copy)."""
    copy = tmp / "main-file-alone.db"
    shutil.copyfile(db, copy)
    with sqlite3.connect(copy) as conn:
        names = [name for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        counts = {name: conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0] for name in names}
    conn.close()
    return counts


def test_a_wal_deleted_after_a_crash_is_reported_not_ignored(tmp_path: Path) -> None:
    with _collector_with_reports(tmp_path, 20) as collector:
        db = collector.db
        collector.kill(signal.SIGKILL)
        collector.start()  # a crash alone loses nothing and raises no alarm
        assert collector.node(NODE)["reports_total"] == 20
        quiet = [e for e in _log_events(collector) if e["level"] == "error"]
        quiet_count = _metric(collector, "nodeagent_store_lost_commits_total")
        assert _stream(collector, range(21, 31)) == grpc.StatusCode.OK
        collector.kill(signal.SIGKILL)
        # The acknowledged state is in the -wal only: the database file alone has no node.
        alone = _tables_in_main_file(db, tmp_path)
        Path(f"{db}-wal").unlink()
        collector.start()
        nodes_after = collector.nodes()
        lost = _metric(collector, "nodeagent_store_lost_commits_total")
        assert _stream(collector, range(31, 41)) == grpc.StatusCode.OK  # and it goes on
        node = collector.node(NODE)
    assert quiet == []
    assert alone.get("nodes", 0) == 0 and alone.get("watermarks", 0) == 0
    assert nodes_after == []  # what SQLite does with a missing -wal: all of it gone
    errors = [e for e in _log_events(collector) if e["level"] == "error"]
    assert [e["event"] for e in errors] == ["database lost commits it had made: acknowledged reports may be missing"]
    assert errors[0]["generation"] == 0 and errors[0]["recorded"] == errors[0]["lost_commits"] > 0
    assert (quiet_count, lost) == (0.0, errors[0]["lost_commits"])
    assert node["reports_total"] == 10
    # Reported once: the next start finds the sidecar at the database's generation.
    with processes() as started:
        collector.start()
        started.append(collector)
        again = _metric(collector, "nodeagent_store_lost_commits_total")
    assert again == 0.0 and [e for e in _log_events(collector) if e["level"] == "error"] == []


def _alerts(collector: Collector, *extra: str) -> list[tuple[str, str, str]]:
    rows = json.loads(cli("collector", "alerts", "--json", "--collector", collector.address, *extra))
    return [(a["name"], a["node_id"], a["state"]) for a in rows]


def _history_errors(collector: Collector) -> list[dict[str, Any]]:
    return [e for e in _log_events(collector) if e["event"].startswith("history unavailable")]


def _garble_first_leaf(db: Path, table: str) -> None:
    """Garbage over the b-tree page holding the table's first rows (a bad sector, a stray write)."""
    with sqlite3.connect(db) as conn:
        leaves = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path", (table,)
        ).fetchall()
        page_bytes = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    assert len(leaves) >= 2, leaves  # the newest rows stay readable: start-up reads only those
    with db.open("r+b") as file:
        file.seek((leaves[0][0] - 1) * page_bytes)
        file.write(b"\xa5" * page_bytes)


def test_damaged_history_stops_the_history_not_ingest_and_can_be_reset(tmp_path: Path) -> None:
    with _collector_with_reports(tmp_path, 60) as collector:
        db = collector.db
        collector.kill(signal.SIGTERM)  # a clean stop: everything is in the database file
        _garble_first_leaf(db, "history_reports")
        with sqlite3.connect(db) as conn:
            try:
                conn.execute("SELECT SUM(LENGTH(report)) FROM history_reports").fetchall()
                damaged = ""
            except sqlite3.DatabaseError as err:
                damaged = str(err)
            node_rows = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
        conn.close()
        collector.start()
        # The flush's retention sweep meets the damage: before, every flush failed from then on.
        assert _stream(collector, range(61, 81)) == grpc.StatusCode.OK
        stored = collector.node(NODE)
        firing = _alerts(collector)
        available = _metric(collector, "nodeagent_store_history_available")
        refused_while_running = subprocess.run(
            [sys.executable, "-m", "nodeagent.collector", "reset-history", "--db", str(db)],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        collector.kill(signal.SIGTERM)
        errors = _history_errors(collector)
        assert damaged == "database disk image is malformed" and node_rows == 1
        assert (stored["reports_total"], stored["duplicates_total"]) == (80, 0)
        assert [(e["level"], e["during"]) for e in errors] == [("error", "a flush")]
        assert "malformed" in errors[0]["error"] and "reset-history" in errors[0]["rebuild"]
        assert ("HistoryUnavailable", "", "firing") in firing and available == 0.0
        reset = cli("collector", "reset-history", "--db", str(db))
        collector.start()
        assert _stream(collector, range(81, 91)) == grpc.StatusCode.OK
        after_reset = collector.node(NODE)
        history = json.loads(
            cli("collector", "history", NODE, "--since", "1d", "--json", "--collector", collector.address)
        )
        alerts_after = _alerts(collector, "--all")
        available_after = _metric(collector, "nodeagent_store_history_available")
    assert refused_while_running.returncode == 2 and "stop the collector first" in refused_while_running.stderr
    assert "history of" in reset and "deleted" in reset
    # After the reset: the node, its watermark and the alert's record kept; new history kept again.
    assert (after_reset["reports_total"], after_reset["duplicates_total"]) == (90, 0)
    assert sum(row["samples"] for row in history if row["gpu"] is None) == 10
    assert [a for a in alerts_after if a[0] == "HistoryUnavailable"] == [("HistoryUnavailable", "", "resolved")]
    assert available_after == 1.0
    assert _history_errors(collector) == []
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def test_a_stored_report_that_does_not_decompress_does_not_stop_the_start(tmp_path: Path) -> None:
    """The open minute is rebuilt at start from the stored reports past its last write: one of them
    damaged (a zlib error) stops the history, not the collector."""
    with _collector_with_reports(tmp_path, 30) as collector:
        newest = "(SELECT MAX(rowid) FROM history_reports)"
        _while_stopped(
            collector,
            lambda conn: conn.execute(f"UPDATE history_reports SET report = X'789c00ff' WHERE rowid = {newest}"),
        )
        assert _stream(collector, range(31, 41)) == grpc.StatusCode.OK
        stored = collector.node(NODE)
        firing = _alerts(collector)
    assert stored["reports_total"] == 40
    errors = _history_errors(collector)
    assert [(e["level"], e["during"]) for e in errors] == [("error", "reading it at start-up")]
    assert "cannot be read back" in errors[0]["error"]
    assert ("HistoryUnavailable", "", "firing") in firing
