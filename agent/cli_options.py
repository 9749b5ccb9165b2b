"""Command-line options shared by the agent's commands."""

from __future__ import annotations

import os
from collections.abc import Callable

import click


def readable_dir(option: str) -> Callable[[click.Context, click.Parameter, str], str]:
    """A click callback: the value must be a directory this process can list (``--procfs``)."""

    def check(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        if not os.path.isdir(value) or not os.access(value, os.R_OK | os.X_OK):
            raise click.BadParameter(f"{value}: not a readable directory", param_hint=option)
        return value

    return check
