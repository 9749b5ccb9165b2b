"""``nodeagent top``: this node, live, with the detector's verdict computed in-process.

The sampling path is the agent's own (``Sampler.tick``), so a refresh costs what a tick costs plus
the detector and the drawing; the footer shows both, in CPU time (``bench/top_refresh.py``
measures them). The verdict comes from the
collector's detector (``nodeagent.core.detector``) fed with the same reports, configured by the
same ``[detector]`` keys, so a renter with one node and no collector gets the answer.

Keys: ``q`` quit, ``s`` sort the GPUs, ``p`` (or space) pause the display, ``h`` help.
"""

from __future__ import annotations

import contextlib
import os
import platform
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live

from nodeagent.agent.cli.options import agent_config, enabled_sources, root_dir, source_flags, source_options
from nodeagent.agent.kernel.files import raise_open_file_limit
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots
from nodeagent.agent.views.snapshots import snapshot
from nodeagent.agent.views.top_frame import SORTS, ViewState, frame
from nodeagent.core.detector.config import DetectorConfig, DetectorConfigError
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.settings.readers import read_toml
from nodeagent.tools.simulator import SCENARIOS, ScenarioError, Simulation
from nodeagent.v1 import nodeagent_pb2 as pb


class _SimulatedNode:
    """A simulated node that already ran for one detector window, so the verdict shows at once."""

    def __init__(self, scenario: str, node_id: str, gpus: int, history_seconds: float, interval: float) -> None:
        # The history ends one refresh before now: the first frame's rates are over a whole
        # interval, as every later one's, not over the moments the history took to build (a few
        # operations over a few milliseconds read as a rate several times off).
        start = time.time() - history_seconds - interval
        self.simulation = Simulation(scenario, node_id=node_id, start_time=start, gpus=gpus)
        self.info = self.simulation.info()
        self.history_seconds = history_seconds

    def history(self, interval: float) -> Iterator[pb.NodeReport]:
        steps = int(self.history_seconds / interval)
        for index in range(steps):
            yield self.simulation.step(0.0 if index == 0 else interval)

    def tick(self) -> pb.NodeReport:
        return self.simulation.step(max(0.0, time.time() - self.simulation.time_unix_seconds))

    def close(self) -> None:
        """Nothing to release."""


class _Top:
    def __init__(self, source: Sampler | _SimulatedNode, detector: NodeDetector) -> None:
        self.source = source
        self.detector = detector
        self.state = ViewState(detector_window_seconds=detector.config.window_seconds)
        self.previous: pb.NodeReport | None = None
        self.first_time: float | None = None
        self.snap: dict[str, Any] | None = None
        # The detector's and the snapshot's share of the last refresh, counted with the drawing.
        self._feed_cpu_seconds = 0.0

    def feed(self, report: pb.NodeReport) -> None:
        """One report into the detector and the snapshot (the detector needs the topology once)."""
        if self.previous is None and not report.HasField("info"):
            report.info.CopyFrom(self.source.info)
        self.detector.observe(report)
        info = self.source.info
        if self.first_time is None:
            self.first_time = report.time_unix_seconds
            if info.gpu.unavailable_reason:
                self.state.no_gpu_reason = info.gpu.unavailable_reason
        self.state.detector_seen_seconds = report.time_unix_seconds - self.first_time
        self.snap = snapshot(self.previous, report, info)
        self.previous = report

    def tick(self) -> None:
        started = time.thread_time()
        report = self.source.tick()
        sampled = time.thread_time()
        self.feed(report)
        self.state.tick_cpu_seconds = sampled - started
        self._feed_cpu_seconds = time.thread_time() - sampled

    def view(self, width: int) -> Any:
        return frame(self.snap or {}, self.detector.verdict.to_plain(), self.state, width)

    def draw(self, live: Live, width: int) -> None:
        """Build and paint the frame; its CPU time shows in the next one (rich renders on paint)."""
        started = time.thread_time()
        live.update(self.view(width), refresh=True)
        self.state.view_cpu_seconds = self._feed_cpu_seconds + time.thread_time() - started


@click.command()
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, help="Seconds between refreshes."
)
@click.option("--once", is_flag=True, help="Print one frame and exit (scripts, bug reports).")
@click.option("--simulate", "scenario", metavar="SCENARIO", help=f"Show a simulated node: {', '.join(SCENARIOS)}.")
@click.option("--gpus", type=click.IntRange(1, 64), default=8, show_default=True, help="GPUs of the simulated node.")
@click.option(
    "--detector-config",
    "detector_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A collector.toml whose [detector] table configures the verdict (the collector's keys).",
)
@click.option("--procfs", default="/proc", show_default=True, callback=root_dir("--procfs"), help="procfs root.")
@click.option("--sysfs", default="/sys", show_default=True, callback=root_dir("--sysfs"), help="sysfs root.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Agent configuration (TOML).")
@source_flags
def top(
    interval: float,
    once: bool,
    scenario: str | None,
    gpus: int,
    detector_path: Path | None,
    procfs: str,
    sysfs: str,
    config_path: Path | None,
    **source_switches: bool | str | None,
) -> None:
    """This node live: GPUs, links, disks, CPU and the starvation verdict."""
    detector_config = _detector_config(detector_path)
    if scenario is not None:
        if scenario not in SCENARIOS:
            raise click.BadParameter(
                f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})", param_hint="--simulate"
            )
        try:
            source: Sampler | _SimulatedNode = _SimulatedNode(
                scenario, f"sim-{scenario}", gpus, detector_config.window_seconds, interval
            )
        except ScenarioError as err:
            raise click.BadParameter(str(err), param_hint="--simulate") from err
        node_id = f"sim-{scenario}"
    else:
        raise_open_file_limit()
        names = enabled_sources(source_switches)
        options = source_options(source_switches)
        node_id = platform.node()
        source = Sampler(
            names, node_id=node_id, roots=Roots(procfs=procfs, sysfs=sysfs), config=agent_config(config_path, ()),
            options=options,
        )  # fmt: skip
    app = _Top(source, NodeDetector(node_id, detector_config))
    app.state.interval_seconds = interval
    try:
        if isinstance(source, _SimulatedNode):
            for report in source.history(interval):
                app.feed(report)
        app.tick()
        if once:
            if isinstance(source, Sampler):
                time.sleep(interval)  # rates need two reports
                app.tick()
            console = Console()
            console.print(app.view(console.width))
            return
        _live(app, interval)
    finally:
        source.close()


def _detector_config(path: Path | None) -> DetectorConfig:
    if path is None:
        return DetectorConfig()
    raw = read_toml(path, lambda message: click.BadParameter(message, param_hint="--detector-config"))
    table = raw.get("detector", {})
    try:
        return DetectorConfig.from_mapping(table, source=f"{path} [detector]")
    except DetectorConfigError as err:
        raise click.BadParameter(str(err), param_hint="--detector-config") from err


def _live(app: _Top, interval: float) -> None:
    console = Console()
    with _keys() as read_key, Live(console=console, screen=True, auto_refresh=False) as live:
        app.draw(live, console.width)
        deadline = time.monotonic() + interval
        while True:
            key = read_key(max(0.0, deadline - time.monotonic()))
            if key is not None:
                if key == "q":
                    return
                if key == "s":
                    app.state.sort = SORTS[(SORTS.index(app.state.sort) + 1) % len(SORTS)]
                elif key in ("p", " "):
                    app.state.paused = not app.state.paused
                elif key == "h":
                    app.state.help = not app.state.help
                app.draw(live, console.width)
                continue
            deadline += interval
            # Behind by more than a refresh (a suspended terminal): skip ahead, do not catch up.
            deadline = max(deadline, time.monotonic())
            app.tick()
            if not app.state.paused:
                app.draw(live, console.width)


@contextlib.contextmanager
def _keys() -> Iterator[Any]:
    """Single key presses from the terminal (cbreak mode), restored on the way out."""
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None

    def read_key(timeout: float) -> str | None:
        if fd is None:
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return None
        return os.read(fd, 1).decode(errors="replace").lower()

    try:
        if fd is not None:
            tty.setcbreak(fd)
        yield read_key
    finally:
        if fd is not None and saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
