"""What one refresh of ``nodeagent top`` costs in CPU, next to the tick it shows.

For this machine's own sampler (live: /proc, /sys, NVML where there is one) and for a simulated
8-GPU node, runs ``--refreshes`` refreshes the way ``top`` does (a tick, the detector, the frame
drawn to an 80- and a 200-column terminal) and prints the median CPU time (this thread's) of the
tick and of the view (the detector and the snapshot over the report, the frame, rich's rendering
to text).

    python bench/top_refresh.py [--refreshes 30]
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import time

from rich.console import Console

from nodeagent.agent.cli.top import _SimulatedNode, _Top
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import enabled_names
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=30)
    args = parser.parse_args()
    sim = _SimulatedNode("ordinary-cloud", "bench", 8, DetectorConfig().window_seconds)
    simulated = _Top(sim, NodeDetector("bench", DetectorConfig()))
    for report in sim.history(1.0):
        simulated.feed(report)
    live = _Top(Sampler(enabled_names({}), node_id=platform.node()), NodeDetector("live", DetectorConfig()))
    for name, app in (("simulated 8-GPU node", simulated), (f"this machine ({platform.node()})", live)):
        for width in (80, 200):
            ticks, views = [], []
            for _ in range(args.refreshes):
                app.tick()
                console = Console(file=io.StringIO(), width=width, force_terminal=True)
                started = time.thread_time()
                console.print(app.view(width))
                views.append(app._feed_cpu_seconds + time.thread_time() - started)
                assert app.state.tick_cpu_seconds is not None
                ticks.append(app.state.tick_cpu_seconds)
                time.sleep(0.05)
            print(
                f"{name:<34} {width:>3} cols: tick {statistics.median(ticks) * 1000:6.2f} ms CPU, "
                f"view {statistics.median(views) * 1000:6.2f} ms CPU (median of {args.refreshes})"
            )


if __name__ == "__main__":
    main()
