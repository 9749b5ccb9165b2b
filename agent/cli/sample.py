"""``nodeagent sample``: snapshots of this node, counters and topology first, then rates."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from nodeagent.agent.cli.options import agent_config, enabled_sources, root_dir, source_flags, source_options
from nodeagent.agent.kernel.files import raise_open_file_limit
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots
from nodeagent.agent.views.plain_json import to_plain
from nodeagent.agent.views.sample_table import render
from nodeagent.agent.views.snapshots import snapshot


@click.command()
@click.option(
    "--json", "as_json", is_flag=True,
    help="One JSON object per snapshot (JSON Lines); only the first carries `info` (topology, which does not change).",
)  # fmt: skip
@click.option("--count", type=click.IntRange(min=1), default=2, show_default=True, help="Snapshots to take.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between snapshots (fractions allowed).",
)
@click.option("--procfs", default="/proc", show_default=True, callback=root_dir("--procfs"), help="procfs root.")
@click.option("--sysfs", default="/sys", show_default=True, callback=root_dir("--sysfs"), help="sysfs root.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Agent configuration (TOML).")
@click.option(
    "--link-speed",
    multiple=True,
    metavar="IFACE=RATE",
    help="Link speed of an interface, e.g. eth0=50G (virtual NICs, capped cloud links). Repeatable.",
)
@click.option("--all", "show_all", is_flag=True, help="Show virtual interfaces too (table output).")
@source_flags
def sample(
    as_json: bool,
    count: int,
    interval: float,
    procfs: str,
    sysfs: str,
    config_path: Path | None,
    link_speed: tuple[str, ...],
    show_all: bool,
    **source_switches: bool | str | None,
) -> None:
    """Snapshots of this node: counters and topology first, then rates."""
    config = agent_config(config_path, link_speed)
    names = enabled_sources(source_switches)
    options = source_options(source_switches)
    raise_open_file_limit()
    sampler = Sampler(names, roots=Roots(procfs=procfs, sysfs=sysfs), config=config, options=options)
    previous = None
    deadline = time.monotonic()
    try:
        for index in range(count):
            if index:
                deadline += interval
                time.sleep(max(0.0, deadline - time.monotonic()))
            report = sampler.tick()
            snap = snapshot(previous, report, sampler.info)
            if as_json:
                if index == 0:
                    snap["info"] = to_plain(sampler.info)
                sys.stdout.write(json.dumps(snap, separators=(",", ":")) + "\n")
            else:
                sys.stdout.write(("\n" if index else "") + render(snap, show_virtual=show_all))
            sys.stdout.flush()
            previous = report
    finally:
        sampler.close()
