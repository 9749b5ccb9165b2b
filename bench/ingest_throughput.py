"""How many node reports per second one collector process takes without its backlog growing.

Starts ``nodeagent-collector serve`` on a fresh SQLite file, then offers it rising loads with
``nodeagent-collector loadgen`` (simulated 8-GPU nodes at 1 report/s each, real gRPC, one
stream per node, spread over processes). A load is sustained when the load generator could
offer it (it shares this machine's cores), the collector acknowledged at least 98% of what was
sent and the unacknowledged backlog did not grow. Prints, per load: reports/s sent and
acknowledged, the backlog left, bytes on the wire per report (gRPC message with its 5-byte
prefix) next to the Prometheus text exposition of the same report, and CPU per report: the
whole collector process, its main thread (the event loop, which holds the interpreter lock and
so bounds what one process takes), and the same for a reference server that only reads and
acknowledges each message (bench/grpc_floor_server.py), with the ratio of the two. It also
prints the load generator's CPU per message and, from the reference's figures, the ceilings of
this machine: what one process's event-loop thread takes when it does nothing but read and
acknowledge, and what the machine's cores take when both ends of the stream are Python gRPC.

    python bench/ingest_throughput.py [--loads 2000,4000,...] [--seconds 15] [--processes 2] [--workers N]

``--workers N`` is passed to ``serve`` as given (1: one process, the figures of docs/performance.md);
without it, ``serve`` runs with its own default.

With ``--remote-write on`` the collector also writes every series to a receiver: by default one
on loopback that takes and discards what it is sent, with ``--receiver prometheus`` or
``--receiver victoria-metrics`` a real one (Debian's, started on loopback for the run, as the
live tests start it); it then prints the share acknowledged, the samples the collector built,
sent and dropped, the reports it could not hand its remote-write process, and the samples the
receiver itself counts as received.

    python bench/ingest_throughput.py --loads 1500 --seconds 10 --remote-write on \
        --remote-write-resolution-seconds 0 --receiver victoria-metrics
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from nodeagent.tools.simulator import Simulation

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the receivers the live tests use (tests/fakes/tsdb.py)

from tests.fakes.tsdb import RECEIVERS, Receiver  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="1000,2000,3000,4000,6000,8000,10000")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--history", choices=("on", "off"), default="on", help="The collector's history (serve --no-history when off)."
    )
    parser.add_argument(
        "--remote-write", choices=("on", "off"), default="off",
        help="Remote write to a local receiver that takes and discards what it is sent.",
    )  # fmt: skip
    parser.add_argument(
        "--remote-write-resolution-seconds", type=float, default=0.0,
        help="serve's --remote-write-resolution-seconds: 0 sends every report (the dearest case).",
    )  # fmt: skip
    parser.add_argument(
        "--receiver", choices=("sink", *RECEIVERS), default="sink",
        help="The remote-write receiver: a loopback sink, or a real Prometheus or VictoriaMetrics.",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=None, help="serve's --workers, passed only when given.")
    args = parser.parse_args()
    print(
        f"history {args.history}, remote write {args.remote_write}"
        + (
            f" (one sample per series every {args.remote_write_resolution_seconds:g} s)"
            if args.remote_write == "on"
            else ""
        )
    )
    tmp_receiver = tempfile.TemporaryDirectory()
    receiver: _Sink | Receiver | None = None
    if args.remote_write == "on":
        receiver = _Sink() if args.receiver == "sink" else RECEIVERS[args.receiver](Path(tmp_receiver.name)).start()
    wire, exposition = _sizes()
    print(f"8-GPU report (healthy scenario): {wire} B protobuf, {exposition} B Prometheus text "
          f"({exposition / wire:.1f}x)")  # fmt: skip
    print(f"{'offered/s':>9} {'sent/s':>7} {'acked/s':>7} {'backlog':>7} {'B/report':>8} {'CPU us/report':>13} "
          f"{'main thread':>11} {'reference':>9} {'ratio':>5} {'loadgen':>7}  sustained")  # fmt: skip
    best, capacity, floors = 0, [], []
    with tempfile.TemporaryDirectory() as tmp:
        for load in (int(x) for x in args.loads.split(",")):
            extra = [] if args.history == "on" else ["--no-history"]
            if args.workers is not None:
                extra += ["--workers", str(args.workers)]
            if receiver is not None:
                extra += ["--remote-write-url", _write_url(receiver),
                          "--remote-write-resolution-seconds", f"{args.remote_write_resolution_seconds:g}"]  # fmt: skip
            received_before = _received(receiver)
            row = _step(_collector(Path(tmp) / f"c{load}.db") + extra, load, args.seconds, args.processes)
            row["received"] = _received(receiver) - received_before
            floor = _step([sys.executable, str(REPO / "bench" / "grpc_floor_server.py")], load, args.seconds,
                          args.processes)  # fmt: skip
            offered = row["sent"] >= 0.95 * load * args.seconds
            ok = offered and row["acked"] >= 0.98 * row["sent"] and row["backlog_end"] <= max(row["backlog_half"], 50)
            best = max(best, load) if ok else best
            ratio = row["main_us_per_report"] / floor["main_us_per_report"]
            capacity.append(1e6 / row["main_us_per_report"])
            floors.append(floor)
            print(f"{load:>9} {row['sent_per_second']:>7.0f} {row['acked_per_second']:>7.0f} "
                  f"{row['backlog_end']:>7} "
                  f"{row['bytes_per_report']:>8.0f} {row['cpu_us_per_report']:>13.0f} "
                  f"{row['main_us_per_report']:>11.0f} "
                  f"{floor['main_us_per_report']:>9.0f} {ratio:>5.2f} {row['loadgen_us_per_report']:>7.0f}  "
                  f"{'yes' if ok else 'no' if offered else 'loadgen could not offer it'}")  # fmt: skip
            if receiver is not None:
                _print_remote_write(row, args.seconds, args.receiver)
            if args.history == "on":
                _print_history_size(Path(tmp) / f"c{load}.db", load, args.seconds)
            if not ok:
                break
    if isinstance(receiver, Receiver):
        receiver.stop()
    tmp_receiver.cleanup()
    print(f"sustained: {best} reports/s (= nodes at 1 Hz) in one collector process; its event-loop thread "
          f"would saturate near {max(capacity):.0f} reports/s")  # fmt: skip
    main_floor = min(f["main_us_per_report"] for f in floors)
    process_floor = min(f["cpu_us_per_report"] for f in floors)
    exchange = min(f["cpu_us_per_report"] + f["loadgen_us_per_report"] for f in floors)
    cores = os.cpu_count() or 1
    print(f"reference (read + ack, nothing else): {main_floor:.0f} us of its event-loop thread and "
          f"{process_floor:.0f} us of its process (all threads) per message; its loop would saturate near "
          f"{1e6 / main_floor:.0f} messages/s, and 10,000 messages/s would take {process_floor / 100:.1f} of "
          f"this machine's {cores} cores before any work is done")  # fmt: skip
    print(f"with a Python load generator on the same cores, a do-nothing exchange costs {exchange:.0f} us of "
          f"CPU per message: this machine offers and takes at most about {cores * 1e6 / exchange:.0f} "
          f"messages/s")  # fmt: skip


def _print_history_size(db: Path, nodes: int, seconds: float) -> None:
    """Bytes the history took (SQLite's dbstat), scaled to one node-day at 1 Hz: per-minute rows
    grow with the day; the full-resolution reports stop growing at their window (1 h)."""
    with sqlite3.connect(db) as conn:
        sizes = dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
        minutes = conn.execute("SELECT COUNT(DISTINCT minute) FROM history_minutes").fetchone()[0] or 1
    minute_bytes = sizes.get("history_minutes", 0) / nodes / minutes
    report_bytes = sum(v for k, v in sizes.items() if "history_reports" in k) / nodes / seconds
    print(f"history on disk: {minute_bytes * 1440 / 1e6:.2f} MB per node-day of minutes, "
          f"{report_bytes * 3600 / 1e6:.2f} MB per node for a 1 h window of reports")  # fmt: skip


def _collector(db: Path) -> list[str]:
    return [sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve", "--listen", "127.0.0.1:0",
            "--http-listen", "127.0.0.1:0", "--db", str(db),
            # Every simulated node streams from 127.0.0.1: the per-source bound is for real fleets.
            "--max-streams-per-source", "100000"]  # fmt: skip


def _step(server_command: list[str], load: int, seconds: float, processes: int) -> dict[str, float]:
    """Run one load against a fresh server; CPU per acknowledged (or, for the reference, sent) report."""
    server = subprocess.Popen(server_command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        address = server.stdout.readline().split()[-1]
        http = server.stdout.readline().split()[-1] if "--http-listen" in server_command else ""
        proc = psutil.Process(server.pid)
        before, main_before = _cpu(proc)
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent.collector", "loadgen", "--collector", address, "--nodes", str(load),
             "--rate", "1", "--duration", str(seconds), "--processes", str(processes), "--json"],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        after, main_after = _cpu(proc)
        result = json.loads(done.stdout)
        if "--remote-write-url" in server_command:
            result.update(_drained_counters(http))
    finally:
        server.terminate()
        server.wait(timeout=30)
    reports = max(1, result["sent"])
    result["cpu_us_per_report"] = (after - before) / reports * 1e6
    result["main_us_per_report"] = (main_after - main_before) / reports * 1e6
    # The load generator's workers, over the timed window only (start-up left out).
    result["loadgen_us_per_report"] = result["cpu_seconds"] / reports * 1e6
    result["backlog_half"] = result["sent_at_half"] - result["acked_at_half"]
    result["backlog_end"] = result["sent"] - result["acked"]
    return dict(result)


class _Sink:
    """A remote-write receiver on loopback that reads each request and answers 204."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/write"


def _drained_counters(http: str, seconds: float = 60.0) -> dict[str, float]:
    """The remote-write counters once the queue is empty (or after ``seconds``): what it built,
    sent, dropped, and the reports it could not hand over."""
    deadline = time.monotonic() + seconds
    while True:
        counters = _remote_write_counters(http)
        time.sleep(0.5)
        again = _remote_write_counters(http)
        settled = again["queued"] == 0 and again["handed_over"] == counters["handed_over"]
        if settled or time.monotonic() > deadline:
            return again


def _remote_write_counters(http: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()

    def one(pattern: str) -> float:
        return sum(float(v) for v in re.findall("^" + pattern + r" (\S+)$", text, re.MULTILINE))

    return {
        "remote_write_samples": one(r'nodeagent_remote_write_samples_total\{result="sent",url="[^"]*"\}'),
        "dropped_samples": one(
            r'nodeagent_remote_write_samples_total\{result="(?:dropped_queue_full|refused)",url="[^"]*"\}'
        ),
        "queued": one(r'nodeagent_remote_write_queued_samples\{url="[^"]*"\}'),
        "handed_over": one(r"nodeagent_remote_write_reports_handed_over_total"),
        "reports_dropped": one(r'nodeagent_remote_write_reports_dropped_total\{reason="[^"]*"\}'),
        "remote_write_cpu_seconds": one(r"nodeagent_remote_write_process_cpu_seconds_total"),
    }


def _print_remote_write(row: dict[str, float], seconds: float, kind: str) -> None:
    """Acked share, and the samples: built by the remote-write process, sent, dropped, received."""
    sent, built = row["remote_write_samples"], row["remote_write_samples"] + row["dropped_samples"] + row["queued"]
    per_report = built / max(1.0, row["handed_over"])
    # A report not handed over was never built: its samples are estimated at the mean per report.
    offered = built + row["reports_dropped"] * per_report
    cpu_us = row["remote_write_cpu_seconds"] / max(1.0, built) * 1e6
    print(f"acked {row['acked'] / max(1, row['sent']):.1%} of the reports sent; remote write: "
          f"{row['handed_over']:.0f} reports handed over, {row['reports_dropped']:.0f} not (counted), "
          f"{built:.0f} samples built ({per_report:.0f} per report, {built / seconds:.0f}/s), {sent:.0f} sent, "
          f"{row['dropped_samples']:.0f} dropped; {cpu_us:.1f} us of the remote-write process's CPU "
          "per sample")  # fmt: skip
    if kind != "sink":
        print(f"{kind} received {row['received']:.0f} samples: {row['received'] / max(1.0, offered):.1%} of the "
              f"{offered:.0f} the collector offered (sent, dropped, or in reports not handed over)")  # fmt: skip


def _write_url(receiver: _Sink | Receiver) -> str:
    return receiver.url if isinstance(receiver, _Sink) else receiver.write_url


def _received(receiver: _Sink | Receiver | None) -> float:
    return receiver.samples_received() if isinstance(receiver, Receiver) else 0.0


def _cpu(proc: psutil.Process) -> tuple[float, float]:
    """CPU seconds of the whole process and of its main thread (the event loop: the GIL's holder)."""
    threads = {t.id: t.user_time + t.system_time for t in proc.threads()}
    times = proc.cpu_times()
    return times.user + times.system, threads.get(proc.pid, 0.0)


def _sizes() -> tuple[int, int]:
    simulation = Simulation("healthy", node_id="node-000001", seed=1)
    simulation.step(1.0)
    report = simulation.step(1.0)
    report.epoch, report.seq = 1, 2
    return report.ByteSize(), len(exposition(report).encode())


def exposition(report: Message) -> str:
    """The report as Prometheus text: one sample per number, labelled as node_exporter and
    dcgm-exporter would (node, device/gpu/cpu), with HELP and TYPE lines per metric."""
    samples: dict[str, list[str]] = {}
    _walk(report, "nodeagent", {"node": getattr(report, "node_id", "")}, samples)
    lines: list[str] = []
    for name, rows in samples.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} {name.replace('_', ' ')}.", f"# TYPE {name} {kind}", *rows]
    return "\n".join(lines) + "\n"


def _walk(message: Message, prefix: str, labels: dict[str, str], out: dict[str, list[str]]) -> None:
    for field, value in message.ListFields():
        name = f"{prefix}_{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                _sample(out, name, {**labels, "counter": key}, item)
        elif field.message_type is not None and field.is_repeated:
            for index, item in enumerate(value):
                ident = getattr(item, "name", "") or getattr(item, "cpu", "") or str(getattr(item, "index", index))
                _walk(item, name, {**labels, field.name.rstrip("s"): ident}, out)
        elif field.message_type is not None:
            _walk(value, name, labels, out)
        elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES) or field.is_repeated:
            continue
        else:
            _sample(out, name, labels, value)


def _sample(out: dict[str, list[str]], name: str, labels: dict[str, str], value: object) -> None:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    out.setdefault(name, []).append(f"{name}{{{text}}} {float(value)!r}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
