"""The one TOML reader of every configuration file and the one parser of a link-rate setting.

Both take the caller's error type, so each file's errors keep their own class while every one
reads the same way: ``agent.toml: no such file``, ``agent.toml: not valid TOML: ...``,
``link_speeds.eth0: expected a rate string such as "50G", got 5``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodeagent.core.quantities.units import RateError, parse_link_rate

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def read_toml(path: Traversable, error: Callable[[str], Exception]) -> dict[str, Any]:
    """The file's tables, or ``error`` with one line saying why it cannot be used. ``path`` is a
    ``Path``, or a package's data file (``importlib.resources``: diag's built-in profiles)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise error(f"{path}: no such file") from err
    except IsADirectoryError as err:
        raise error(f"{path}: is a directory, expected a TOML file") from err
    except OSError as err:
        raise error(f"{path}: cannot read: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text (byte {err.start})") from err
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{path}: not valid TOML: {err}") from err


def link_rate(value: object, where: str, error: Callable[[str], Exception]) -> float:
    """A link-rate setting (``"50G"``, ``"25Gb/s"``) in bytes per second; ``where`` names the key."""
    if not isinstance(value, str):
        raise error(f'{where}: expected a rate string such as "50G", got {value!r}')
    try:
        return parse_link_rate(value)
    except RateError as err:
        raise error(f"{where}: {err}") from err
