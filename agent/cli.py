"""``nodeagent``: the agent's command line.

Errors are one line on stderr naming the bad value, exit status 2.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import NoReturn

import click

from nodeagent import __version__
from nodeagent.agent.cli_options import agent_config, collector_flags, enabled_collectors, root_dir
from nodeagent.agent.collectors import Roots, available
from nodeagent.agent.config import SECTIONS, effective_sections
from nodeagent.agent.derive import snapshot
from nodeagent.agent.diag.command import diag_command
from nodeagent.agent.kernel_files import raise_open_file_limit
from nodeagent.agent.plain import to_plain
from nodeagent.agent.record_cli import record
from nodeagent.agent.render import render
from nodeagent.agent.run_command import run as run_command
from nodeagent.agent.sampler import Sampler
from nodeagent.agent.top_command import top
from nodeagent.core.command_line import run_cli
from nodeagent.core.log import configure_logging
from nodeagent.core.settings.framework import ConfiguredGroup, Layout
from nodeagent.core.settings.show import config_command

# agent.toml: `run`'s flags at the top level, other commands in [command.NAME], and the sections.
AGENT_LAYOUT = Layout(
    default_file=Path("/etc/nodeagent/agent.toml"),
    service="run",
    sections=SECTIONS,
    check_sections=effective_sections,
    file_forms={"link_speed": "link_speeds"},
)


@click.group(cls=ConfiguredGroup, layout=AGENT_LAYOUT, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeagent")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=None,
    help="Least severe log level on stderr [default: info for run, warning for the one-shot commands].",
)
@click.pass_context
def cli(ctx: click.Context, log_level: str | None) -> None:
    """Node health and telemetry for GPU servers."""
    # The daemon says at info that it connected and how delivery goes; one-shot commands
    # (sample, diag) keep stderr for what went wrong.
    configure_logging(log_level or ("info" if ctx.invoked_subcommand == "run" else "warning"))


cli.add_command(record)
cli.add_command(config_command)


@cli.command()
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
@collector_flags
def sample(
    as_json: bool,
    count: int,
    interval: float,
    procfs: str,
    sysfs: str,
    config_path: Path | None,
    link_speed: tuple[str, ...],
    show_all: bool,
    **collector_flags: bool | None,
) -> None:
    """Snapshots of this node: counters and topology first, then rates."""
    config = agent_config(config_path, link_speed)
    names = enabled_collectors(collector_flags)
    raise_open_file_limit()
    sampler = Sampler(names, roots=Roots(procfs=procfs, sysfs=sysfs), config=config)
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


cli.add_command(run_command)


@cli.command("collectors")
def list_collectors() -> None:
    """The collectors and whether they run by default."""
    for name, cls in available().items():
        click.echo(f"{name:<12} {'on ' if cls.default_enabled else 'off'}  {cls.help}")


cli.add_command(diag_command)
cli.add_command(top)


def main() -> NoReturn:
    sys.exit(run_cli(cli, "nodeagent"))
