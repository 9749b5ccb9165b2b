"""Where the collector's event-loop thread spends its time per report, stage by stage.

In one process, without gRPC: a real ``Ingest`` on a fresh SQLite file holds ``--nodes``
simulated 8-GPU nodes (the reports ``nodeagent-collector loadgen`` sends: a pool of simulator
ticks, each node's id, epoch, seq and time merged in), fed one report per node per simulated
second, with a flush every ``--flush-every`` reports (at 1,000 reports/s and serve's 50 ms
flush, 50). Each report takes the path ``collector/ingest/streams.py`` gives it: parse
(``FromString`` and ``DiscardUnknownFields``), serialize, validate (``check_report``, proving
most reports valid from those bytes), then ``Ingest.accept``. The stages inside ``accept`` are
timed by wrapping them (alert rules, the detector, the job roll-up, the timeline and the
verdict's signals, the history); what is left of ``accept`` is its own bookkeeping (dedup, the
node's row). A flush is timed on this thread's
CPU clock, so the store thread's commit is left out, as it is off the event loop in ``serve``.
The flusher's monotonic clock follows the simulated one (a simulated second is a second, as for
``serve`` under 1 Hz agents), so what it does by the wall clock happens as often as there.

The first ``--warmup`` simulated seconds are not counted (the detectors' windows fill, the
history opens its minutes). Prints microseconds per report per stage and their sum: the
event-loop thread's work per report beyond gRPC's own (``bench/ingest_throughput.py`` measures
that whole, against ``bench/grpc_floor_server.py``). ``--cprofile N`` prints the N functions
with the most time of their own instead.

    python bench/ingest_profile.py [--nodes 1000] [--seconds 30] [--warmup 10] [--json] [--cprofile N]
    python bench/ingest_profile.py --no-gpm [--power-samples 10]    # an A100-class fleet
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

from nodeagent.tools.ingest_rig import ORDER, IngestRig
from nodeagent.tools.loadgen import _report_pool
from nodeagent.v1 import nodeagent_pb2 as pb


class CpuMeter:
    """Each stage's CPU time on this thread, less the stages begun inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[tuple[str, float, list[float]]] = []  # stage, start, time of the stages inside

    def begin(self, stage: str) -> None:
        self._open.append((stage, time.thread_time(), [0.0]))

    def end(self) -> None:
        stage, started, inner = self._open.pop()
        spent = time.thread_time() - started
        self.seconds[stage] = self.seconds.get(stage, 0.0) + spent - inner[0]
        if self._open:
            self._open[-1][2][0] += spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30, help="Simulated seconds counted (1 report per node each).")
    parser.add_argument("--warmup", type=int, default=10, help="Simulated seconds run first, not counted.")
    parser.add_argument("--flush-every", type=int, default=50, help="Reports between flushes.")
    parser.add_argument("--scenario", default="healthy")
    parser.add_argument("--no-history", action="store_true", help="As serve --no-history.")
    parser.add_argument("--no-gpm", action="store_true",
                        help="An A100-class fleet: no GPM; the detector reads every GPU's power.")  # fmt: skip
    parser.add_argument("--power-samples", type=int, default=0, metavar="N",
                        help="With --no-gpm: N power readings between reports on every GPU "
                             "(power_samples_watts, as the agent sends them; 10 at its default 0.1 s).")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cprofile", type=int, default=0, metavar="N", help="Print the top N functions instead.")
    args = parser.parse_args()
    if args.nodes < 1 or args.seconds < 1 or args.warmup < 0 or args.flush_every < 1:
        parser.error("need --nodes, --seconds, --flush-every >= 1 and --warmup >= 0")
    with tempfile.TemporaryDirectory() as tmp:
        stages, reports = asyncio.run(_run(args, Path(tmp) / "profile.db"))
    if args.cprofile:
        return
    per_report = {name: stages.get(name, 0.0) / reports * 1e6 for name in ORDER}
    total = sum(per_report.values())
    if args.json:
        print(json.dumps({"nodes": args.nodes, "reports": reports, "us_per_report": per_report, "total_us": total}))
        return
    print(f"{args.nodes} nodes, {reports} reports counted ({args.scenario}, history "
          f"{'off' if args.no_history else 'on'}, a flush every {args.flush_every} reports)")  # fmt: skip
    print(f"{'stage':<18} {'us/report':>9} {'share':>6}")
    for name in ORDER:
        print(f"{name:<18} {per_report[name]:>9.1f} {per_report[name] / total:>6.1%}")
    print(f"{'total':<18} {total:>9.1f}")


def _without_gpm(info: pb.NodeInfo, pool: list[bytes], readings: int) -> tuple[pb.NodeInfo, list[bytes]]:
    """The pool as GPUs without GPM send it: no GPM fields, and ``readings`` draws read between
    reports (a step computing 0.6 of the time at 400 W and spinning 0.4 at 120 W), so the
    detector's power share runs on every GPU of every report."""
    info = pb.NodeInfo.FromString(info.SerializeToString())
    for g in info.gpu.gpus:
        g.gpm_supported = False
    out = []
    for raw in pool:
        report = pb.NodeReport.FromString(raw)
        for g in report.gpus:
            for name in ("sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio"):
                g.ClearField(name)
            g.power_samples_watts.extend(400.0 if k < 0.6 * readings else 120.0 for k in range(readings))
        out.append(report.SerializeToString())
    return info, out


async def _run(args: argparse.Namespace, db: Path) -> tuple[dict[str, float], int]:
    info, pool = _report_pool(args.scenario)
    if args.no_gpm or args.power_samples:
        info, pool = _without_gpm(info, pool, args.power_samples)
    rig = IngestRig(db, args.nodes, flush_every=args.flush_every, history=not args.no_history, pool=(info, pool))
    meter = CpuMeter()
    try:
        await rig.run(args.warmup)
        profiler = cProfile.Profile() if args.cprofile else None
        if profiler is not None:
            profiler.enable()
        reports = await rig.run(args.seconds, meter)
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.cprofile)
    finally:
        await rig.close()
    return meter.seconds, max(1, reports)


if __name__ == "__main__":
    sys.exit(main())
