"""``nodeagent``: the agent's command line.

Errors are one line on stderr naming the bad value, exit status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from nodeagent import __version__
from nodeagent.agent.config import SECTIONS, effective_sections
from nodeagent.agent.sources import available
from nodeagent.core.program.command_line import run_cli
from nodeagent.core.program.log import configure_logging
from nodeagent.core.settings.framework import ConfiguredGroup, Layout

# agent.toml: `run`'s flags at the top level, other commands in [command.NAME], and the sections.
AGENT_LAYOUT = Layout(
    default_file=Path("/etc/nodeagent/agent.toml"),
    service="run",
    sections=SECTIONS,
    check_sections=effective_sections,
    file_forms={"link_speed": "link_speeds"},
)

# Each command's modules are imported when the command line names it: `run`, the daemon, then
# holds none of diag's checks or top's rich (their memory is the node's, all the time).
COMMANDS = {
    "config": "nodeagent.core.settings.show:config_command",
    "diag": "nodeagent.agent.cli.diag:diag_command",
    "record": "nodeagent.agent.cli.record:record",
    "run": "nodeagent.agent.cli.run:run",
    "sample": "nodeagent.agent.cli.sample:sample",
    "top": "nodeagent.agent.cli.top:top",
}


@click.group(cls=ConfiguredGroup, layout=AGENT_LAYOUT, lazy_commands=COMMANDS)
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


# The command and its help keep node_exporter's word for the sources, as the flags do.
@cli.command("collectors")
def list_sources() -> None:
    """The collectors and whether they run by default."""
    for name, cls in available().items():
        click.echo(f"{name:<12} {'on ' if cls.default_enabled else 'off'}  {cls.help}")


def main() -> NoReturn:
    sys.exit(run_cli(cli, "nodeagent"))
