"""``nodeagent-collector``: the collector's command line (ingest and detection land with
their issues; this entry point exists so packaging and tooling can rely on it)."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from agent import __version__
from agent.cli import run_cli
from collector.replay_cli import replay


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeagent-collector")
def cli() -> None:
    """Fleet collector for nodeagent reports."""


cli.add_command(replay)


def main() -> NoReturn:
    sys.exit(run_cli(cli, "nodeagent-collector"))
