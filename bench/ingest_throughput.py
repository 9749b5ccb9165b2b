"""How many node reports per second one collector process takes without its backlog growing.

Starts ``nodeagent-collector serve`` on a fresh SQLite file, then offers it rising loads with
``nodeagent-collector loadgen`` (simulated 8-GPU nodes at 1 report/s each, real gRPC, one
stream per node, spread over processes). A load is sustained when the collector acknowledged
at least 98% of what was sent and the unacknowledged backlog did not grow between the middle
and the end of the run. Prints, per load: reports/s sent and acknowledged, the backlog, the
collector's CPU per report, and bytes on the wire per report next to the size of the Prometheus
text exposition of the same report (what a scrape of the same data would carry).

    python bench/ingest_throughput.py [--loads 2000,4000,...] [--seconds 15] [--processes 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from agent.simulator import Simulation

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="1000,2000,3000,4000,5000,6000,8000,10000")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    wire, exposition = _sizes()
    print(f"8-GPU report (healthy scenario): {wire} B protobuf, {exposition} B Prometheus text "
          f"({exposition / wire:.1f}x)")  # fmt: skip
    print(f"{'offered/s':>9} {'sent/s':>8} {'acked/s':>8} {'backlog mid->end':>17} {'CPU us/report':>13} "
          f"{'B/report':>8}  sustained")  # fmt: skip
    best = 0
    with tempfile.TemporaryDirectory() as tmp:
        for load in (int(x) for x in args.loads.split(",")):
            row = _step(Path(tmp) / f"c{load}.db", load, args.seconds, args.processes)
            ok = row["acked"] >= 0.98 * row["sent"] and row["backlog_end"] <= max(row["backlog_half"], 0.02 * load)
            best = max(best, load) if ok else best
            print(f"{load:>9} {row['sent_per_second']:>8.0f} {row['acked_per_second']:>8.0f} "
                  f"{row['backlog_half']:>8}->{row['backlog_end']:<8} {row['cpu_us_per_report']:>13.1f} "
                  f"{row['bytes_per_report']:>8.0f}  {'yes' if ok else 'no'}")  # fmt: skip
            if not ok:
                break
    print(f"sustained: {best} reports/s (= nodes at 1 Hz) in one collector process")


def _step(db: Path, load: int, seconds: float, processes: int) -> dict[str, float]:
    collector = subprocess.Popen(
        [sys.executable, "-m", "collector", "--log-level", "warning", "serve", "--listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--db", str(db)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert collector.stdout is not None
        address = collector.stdout.readline().split()[-1]
        proc = psutil.Process(collector.pid)
        before = proc.cpu_times()
        done = subprocess.run(
            [sys.executable, "-m", "collector", "loadgen", "--collector", address, "--nodes", str(load),
             "--rate", "1", "--duration", str(seconds), "--processes", str(processes), "--json"],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        after = proc.cpu_times()
        result = json.loads(done.stdout)
    finally:
        collector.terminate()
        collector.wait(timeout=30)
    cpu = (after.user - before.user) + (after.system - before.system)
    result["cpu_us_per_report"] = cpu / max(1, result["acked"]) * 1e6
    result["backlog_half"] = result["sent_at_half"] - result["acked_at_half"]
    result["backlog_end"] = result["sent"] - result["acked"]
    return dict(result)


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
