"""How many node reports per second one collector takes without its backlog growing, with 1
and more worker processes (``serve --workers N``) measured side by side in the same run.

For each worker count, starts ``nodeagent-collector serve --workers N`` on a fresh SQLite file,
then offers it rising loads with ``nodeagent-collector loadgen`` (simulated 8-GPU nodes at 1
report/s each, real gRPC, one stream per node, spread over processes; with N > 1 each stream is
redirected by the front to its owning worker, as an agent's is), then halves the gap between the
last load sustained and the first that was not (``--refine``). A load is sustained when the load
generator could offer it (it shares this machine's cores), the collector acknowledged at least
98% of what was sent and the unacknowledged backlog did not grow. Prints, per load: reports/s
sent and acknowledged, the backlog left, bytes on the wire per report (gRPC message with its
5-byte prefix; the Prometheus text exposition of the same report beside it once), and CPU per
report: all the collector's processes, its event-loop threads (the main thread of each worker:
it holds the interpreter lock and so bounds what one process takes), each worker's main thread
per report of the nodes it took, the front's share, and the load generator's. Per worker count:
the sustained load and those costs there, next to a reference server that only reads and
acknowledges each message (bench/grpc_floor_server.py) at the load one worker's loop took, and
the ratio of the sustained loads (N workers vs 1, this run). Finally the machine's ceilings from
the reference: one event loop that does nothing but read and acknowledge, and the cores when
both ends of the stream are Python gRPC.

    python bench/ingest_throughput.py [--workers 1,2] [--loads 1000,2000,...] [--seconds 15] [--processes 2]

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
import functools
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from nodeagent.tools.simulator import Simulation

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the receivers the live tests use (tests/fakes/tsdb.py)

if TYPE_CHECKING:
    from tests.fakes.tsdb import Receiver
# The real receivers are imported only when asked for (they need PyYAML, a test dependency).
RECEIVER_KINDS = ("prometheus", "victoria-metrics")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="1000,1500,2000,2500,3000,3500,4000,5000,6000,8000,10000")
    parser.add_argument(
        "--workers", default="1",
        help="serve --workers counts to measure in this run, e.g. 1,2: each its own rising loads, judged side by side.",
    )  # fmt: skip
    parser.add_argument(
        "--refine", type=int, default=2,
        help="Halvings between the last sustained load and the first that was not, per worker count.",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--collector-cpus", default="",
        help="CPUs for the collector (taskset list, e.g. 0,1), and --loadgen-cpus for the load generator: on a "
        "machine with cores to spare, the load generator then takes none of the collector's.",
    )  # fmt: skip
    parser.add_argument("--loadgen-cpus", default="", help="CPUs for the load generator (taskset list).")
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
        "--receiver", choices=("sink", *RECEIVER_KINDS), default="sink",
        help="The remote-write receiver: a loopback sink, or a real Prometheus or VictoriaMetrics.",
    )  # fmt: skip
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    loads = [int(x) for x in args.loads.split(",")]
    print(
        f"history {args.history}, remote write {args.remote_write}"
        + (
            f" (one sample per series every {args.remote_write_resolution_seconds:g} s)"
            if args.remote_write == "on"
            else ""
        )
        + (
            f"; {os.cpu_count()} cores shared by the collector and the load generator ({args.processes} processes)"
            if not (args.collector_cpus or args.loadgen_cpus)
            else f"; collector on CPUs {args.collector_cpus or 'any'}, load generator ({args.processes} processes) "
            f"on CPUs {args.loadgen_cpus or 'any'}"
        )
    )
    tmp_receiver = tempfile.TemporaryDirectory()
    receiver: _Sink | Receiver | None = None
    if args.remote_write == "on":
        receiver = _Sink() if args.receiver == "sink" else _real_receiver(args.receiver, Path(tmp_receiver.name))
    wire, exposition = _sizes()
    print(f"8-GPU report (healthy scenario): {wire} B protobuf, {exposition} B Prometheus text "
          f"({exposition / wire:.1f}x)")  # fmt: skip
    print(f"{'workers':>7} {'offered/s':>9} {'sent/s':>7} {'acked/s':>7} {'backlog':>7} {'B/report':>8} "
          f"{'CPU us/report':>13} {'main thread':>11} {'front':>5} {'loadgen':>7} {'others':>6}  sustained  "
          f"(main thread of each worker)")  # fmt: skip
    extra = [] if args.history == "on" else ["--no-history"]
    if receiver is not None:
        extra += ["--remote-write-url", _write_url(receiver),
                  "--remote-write-resolution-seconds", f"{args.remote_write_resolution_seconds:g}"]  # fmt: skip
    summaries: dict[int, dict[str, Any]] = {}
    floors: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:

        def step(workers: int, load: int) -> dict[str, Any]:
            db = Path(tmp) / f"w{workers}-{load}.db"
            received_before = _received(receiver)
            row = _step(_pinned(args.collector_cpus) + _collector(db, workers) + extra, load, args.seconds,
                        args.processes, workers, _pinned(args.loadgen_cpus))  # fmt: skip
            row["received"] = _received(receiver) - received_before
            _print_row(workers, load, row)
            if receiver is not None:
                _print_remote_write(row, args.seconds, args.receiver)
            if args.history == "on" and workers == 1:
                _print_history_size(db, load, args.seconds)
            return row

        for workers, (best, best_row) in _sustained(step, counts, loads, args.refine).items():
            # The reference at the load each worker's event loop took: its messages/s per process.
            reference = [*_pinned(args.collector_cpus), sys.executable, str(REPO / "bench" / "grpc_floor_server.py")]
            floor = _step(reference,
                          max(1, round((best or loads[0]) / workers)), args.seconds, args.processes, 1,
                          _pinned(args.loadgen_cpus))  # fmt: skip
            floors.append(floor)
            summaries[workers] = _summary(workers, best, best_row, floor)
    if receiver is not None and not isinstance(receiver, _Sink):
        receiver.stop()
    tmp_receiver.cleanup()
    _print_summaries(summaries)
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


def _sustained(
    step: Callable[[int, int], dict[str, Any]], counts: list[int], loads: list[int], refine: int
) -> dict[int, tuple[int, dict[str, Any] | None]]:
    """Per worker count, the highest load sustained: the rising loads until one is not, then
    ``refine`` halvings of the gap (to 50 reports/s) between the last that was and the first that
    was not. The counts take turns at each load, so that what else runs on the machine weighs on
    each alike and their ratio is judged on the same machine state."""
    best: dict[int, tuple[int, dict[str, Any] | None]] = dict.fromkeys(counts, (0, None))
    failed: dict[int, int] = {}
    for load in loads:
        rising = [workers for workers in counts if workers not in failed]
        if not rising:
            break
        for workers in rising:
            row = step(workers, load)
            if row["ok"]:
                best[workers] = (load, row)
            else:
                failed[workers] = load
    for _ in range(refine):
        for workers in counts:
            if workers not in failed:
                continue
            load = round((best[workers][0] + failed[workers]) / 2 / 50) * 50
            if load in (best[workers][0], failed[workers]) or load <= 0:
                continue
            row = step(workers, load)
            if row["ok"]:
                best[workers] = (load, row)
            else:
                failed[workers] = load
    return best


def _print_row(workers: int, load: int, row: dict[str, Any]) -> None:
    verdict = "yes" if row["ok"] else "no" if row["offered"] else "loadgen could not offer it"
    each = ", ".join(f"{us:.0f}" for us in row["worker_main_us"])
    print(f"{workers:>7} {load:>9} {row['sent_per_second']:>7.0f} {row['acked_per_second']:>7.0f} "
          f"{row['backlog_end']:>7} {row['bytes_per_report']:>8.0f} {row['cpu_us_per_report']:>13.0f} "
          f"{row['main_us_per_report']:>11.0f} {row['front_us_per_report']:>5.0f} "
          f"{row['loadgen_us_per_report']:>7.0f} {row['others_cores']:>6.2f}  {verdict}  ({each})")  # fmt: skip


def _summary(workers: int, best: int, row: dict[str, Any] | None, floor: dict[str, Any]) -> dict[str, Any]:
    each = list(row["worker_main_us"]) if row else []
    mean = sum(each) / len(each) if each else 0.0
    return {
        "sustained": best,
        "main_mean_us": mean,
        # All the workers' main threads together, per report the collector took.
        "main_sum_us": row["main_us_per_report"] if row else 0.0,
        "floor_us": floor["main_us_per_report"],
        "floor_load": floor["sent_per_second"],
        "collector_us": row["cpu_us_per_report"] if row else 0.0,
        "front_us": row["front_us_per_report"] if row else 0.0,
        "front_redirect_us": row["front_us_per_redirect"] if row else 0.0,
        "loadgen_us": row["loadgen_us_per_report"] if row else 0.0,
        "others": row["others_cores"] if row else 0.0,
        "each": each,
    }


def _print_summaries(summaries: dict[int, dict[str, Any]]) -> None:
    cores = os.cpu_count() or 1
    for workers, s in summaries.items():
        each = ", ".join(f"{us:.0f}" for us in s["each"])
        ratio = s["main_mean_us"] / s["floor_us"] if s["floor_us"] else 0.0
        machine = s["sustained"] * (s["collector_us"] + s["loadgen_us"]) / 1e6
        print(f"workers {workers}: sustained {s['sustained']:.0f} reports/s; main thread per report of each "
              f"worker ({each}) us, mean {s['main_mean_us']:.0f}, all together {s['main_sum_us']:.0f}; gRPC floor "
              f"{s['floor_us']:.0f} us at {s['floor_load']:.0f}/s (ratio {ratio:.2f}); the collector's processes "
              f"{s['collector_us']:.0f} us{_front(s)}, the load generator {s['loadgen_us']:.0f} us "
              f"per report: {machine:.2f} of {cores} cores at that load")  # fmt: skip
    for workers, s in summaries.items():
        if s["collector_us"]:
            loops, shared, alone = _bounds(workers, s, cores)
            print(f"workers {workers}, bounds from those costs: the event loops {loops:.0f} reports/s, this "
                  f"machine's {cores} cores {shared:.0f} with the load generator on them and {alone:.0f} "
                  f"without it")  # fmt: skip
    one = summaries.get(1)
    for workers, s in summaries.items():
        if workers == 1 or one is None or not one["sustained"] or not s["collector_us"] or not one["collector_us"]:
            continue
        here = min(_bounds(workers, s, cores)[:2]) / min(_bounds(1, one, cores)[:2])
        apart = min(_bounds(workers, s, cores)[0], _bounds(workers, s, cores)[2]) / min(
            _bounds(1, one, cores)[0], _bounds(1, one, cores)[2]
        )
        print(f"{workers} workers vs 1 (this run): {s['sustained']:.0f} / {one['sustained']:.0f} reports/s = "
              f"{s['sustained'] / one['sustained']:.2f}x sustained (others kept {one['others']:.2f} and "
              f"{s['others']:.2f} cores busy); from the costs, {here:.2f}x with the load generator on these "
              f"cores, {apart:.2f}x with it elsewhere")  # fmt: skip


def _front(s: dict[str, Any]) -> str:
    if not s["front_redirect_us"]:
        return ""
    return f" (the front {s['front_us']:.0f}: {s['front_redirect_us']:.0f} us per stream it redirected)"


def _bounds(workers: int, s: dict[str, Any], cores: int) -> tuple[float, float, float]:
    """Reports/s that bound ``workers`` workers, from their CPU per report: their event loops (each
    a core at most), the cores shared with the load generator, the cores without it."""
    loops = workers * 1e6 / s["main_mean_us"]
    return loops, cores * 1e6 / (s["collector_us"] + s["loadgen_us"]), cores * 1e6 / s["collector_us"]


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


def _collector(db: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "nodeagent.collector", "--log-level", "warning", "serve", "--listen", "127.0.0.1:0",
            "--http-listen", "127.0.0.1:0", "--db", str(db), *_workers_flag(workers),
            # Every simulated node streams from 127.0.0.1: the per-source bound is for real fleets.
            "--max-streams-per-source", "100000"]  # fmt: skip


@functools.cache
def _workers_flag(workers: int) -> list[str]:
    """``--workers N``; a build of serve without the flag is one process, and takes only 1."""
    help_text = subprocess.run([sys.executable, "-m", "nodeagent.collector", "serve", "--help"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    if "--workers" in help_text:
        return ["--workers", str(workers)]
    if workers != 1:
        sys.exit(f"this build's serve has no --workers: cannot measure {workers} workers")
    return []


def _pinned(cpus: str) -> list[str]:
    """``taskset`` in front of a command when CPUs are named (the processes it starts inherit them)."""
    return ["taskset", "-c", cpus] if cpus else []


def _step(
    server_command: list[str], load: int, seconds: float, processes: int, workers: int, loadgen_prefix: list[str]
) -> dict[str, Any]:
    """Run one load against a fresh server; CPU per acknowledged (or, for the reference, sent)
    report: all its processes, and each worker's main thread per report of the nodes it took."""
    server = subprocess.Popen(server_command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        address = server.stdout.readline().split()[-1]
        http = server.stdout.readline().split()[-1] if "--http-listen" in server_command else ""
        front = psutil.Process(server.pid)
        loops = _worker_loops(front, address, workers)
        everyone = [front, *(proc for proc in loops.values() if proc.pid != front.pid)]
        before = [_cpu(proc) for proc in everyone]
        machine_before = _machine()
        done = subprocess.run(
            [*loadgen_prefix, sys.executable, "-m", "nodeagent.collector", "loadgen", "--collector", address,
             "--nodes", str(load),
             "--rate", "1", "--duration", str(seconds), "--processes", str(processes), "--json"],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        after = [_cpu(proc) for proc in everyone]
        machine_after = _machine()
        result: dict[str, Any] = json.loads(done.stdout)
        if "--remote-write-url" in server_command:
            result.update(_drained_counters(http))
    finally:
        server.terminate()
        server.wait(timeout=30)
    reports = max(1, result["sent"])
    spent = {proc.pid: (a[0] - b[0], a[1] - b[1]) for proc, b, a in zip(everyone, before, after, strict=True)}
    collector_seconds = sum(total for total, _main in spent.values())
    result["cpu_us_per_report"] = collector_seconds / reports * 1e6
    # Cores busy meanwhile with anything else on the machine (the load generator's whole run and
    # this collector's processes left out): a shared machine's noise, said beside each figure.
    busy, loadgen_seconds, wall = (after - before for after, before in zip(machine_after, machine_before, strict=True))
    result["others_cores"] = max(0.0, busy - loadgen_seconds - collector_seconds) / wall
    result["main_us_per_report"] = sum(spent[proc.pid][1] for proc in loops.values()) / reports * 1e6
    result["front_us_per_report"] = spent[front.pid][0] / reports * 1e6 if workers > 1 else 0.0
    # The front works when a stream says hello (idle, it spends nothing): its cost is per redirect.
    redirected = result["streams_redirected"]
    result["front_us_per_redirect"] = spent[front.pid][0] / redirected * 1e6 if workers > 1 and redirected else 0.0
    # Each worker's main thread per report of the nodes the load generator's streams ended on it.
    by_target = result.get("sent_by_target", {})
    result["worker_main_us"] = [
        spent[proc.pid][1] / max(1, by_target.get(target, 0)) * 1e6 for target, proc in sorted(loops.items())
    ]
    # The load generator's workers, over the timed window only (start-up left out).
    result["loadgen_us_per_report"] = result["cpu_seconds"] / reports * 1e6
    result["backlog_half"] = result["sent_at_half"] - result["acked_at_half"]
    result["backlog_end"] = result["sent"] - result["acked"]
    result["offered"] = result["sent"] >= 0.95 * load * seconds
    result["ok"] = (
        result["offered"]
        and result["acked"] >= 0.98 * result["sent"]
        and result["backlog_end"] <= max(result["backlog_half"], 50)
    )
    return result


def _worker_loops(front: psutil.Process, address: str, workers: int) -> dict[str, psutil.Process]:
    """The processes whose event loops take the agents' streams, by the HOST:PORT they listen on:
    the server itself for one process, else its children with a TCP listener (the workers)."""
    if workers <= 1:
        return {address: front}
    host = address.rpartition(":")[0]
    deadline = time.monotonic() + 30
    while True:
        found: dict[str, psutil.Process] = {}
        for child in front.children(recursive=True):
            try:
                ports = [c.laddr.port for c in child.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
            except psutil.Error:
                continue
            found.update({f"{host}:{port}": child for port in ports})
        if len(found) >= workers or time.monotonic() > deadline:
            if len(found) < workers:
                sys.exit(f"found {len(found)} of {workers} workers listening")
            return found
        time.sleep(0.2)


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
    """The remote-write families of the collector's /metrics, summed over receivers and (behind a
    front) over the workers, whose samples carry a ``worker`` label."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def one(name: str, label: str = "", values: tuple[str, ...] = ()) -> float:
        return sum(s.value for s in samples if s.name == name and (not label or s.labels.get(label) in values))

    return {
        "remote_write_samples": one("nodeagent_remote_write_samples_total", "result", ("sent",)),
        "dropped_samples": one("nodeagent_remote_write_samples_total", "result", ("dropped_queue_full", "refused")),
        "queued": one("nodeagent_remote_write_queued_samples"),
        "handed_over": one("nodeagent_remote_write_reports_handed_over_total"),
        "reports_dropped": one("nodeagent_remote_write_reports_dropped_total"),
        "remote_write_cpu_seconds": one("nodeagent_remote_write_process_cpu_seconds_total"),
    }


def _print_remote_write(row: dict[str, float], seconds: float, kind: str) -> None:
    """Acked share, and the samples: built by the remote-write process, sent, dropped, received."""
    sent, built = row["remote_write_samples"], row["remote_write_samples"] + row["dropped_samples"] + row["queued"]
    per_report = built / max(1.0, row["handed_over"])
    # A report not handed over was never built: its samples are estimated at the mean per report.
    offered = built + row["reports_dropped"] * per_report
    cpu_us = row["remote_write_cpu_seconds"] / max(1.0, built) * 1e6
    print(f"acked {row['acked'] / max(1, row['sent']):.1%} of the reports sent ({row['acked']:.0f}); remote write: "
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
    return receiver.samples_received() if receiver is not None and not isinstance(receiver, _Sink) else 0.0


def _real_receiver(kind: str, tmp: Path) -> Receiver:
    from tests.fakes.tsdb import RECEIVERS

    return RECEIVERS[kind](tmp).start()


def _machine() -> tuple[float, float, float]:
    """CPU seconds every core spent busy, the CPU seconds of this script's finished children (the
    load generator and its processes, once waited for) and the time."""
    times = psutil.cpu_times()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
    return busy, children.ru_utime + children.ru_stime, time.monotonic()


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
