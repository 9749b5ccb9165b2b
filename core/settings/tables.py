"""Strict reading of configuration files and their tables: one-line errors naming file and key.

The one TOML reader of every configuration file (``read_toml``), the one check of a table's keys
and types (``check_table``, shared by ``[alerts]`` and ``[sinks]``, so both name a bad value the
same way: ``collector.toml: alerts.node_down_seconds: expected a number, got 'soon'``) and the one
reader of a link-rate setting (``link_rate``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodeagent.core.units import RateError, parse_link_rate

_KINDS: dict[type, str] = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def check_table(
    mapping: Mapping[str, Any],
    spec: Mapping[str, tuple[type, object]],
    *,
    source: str,
    table: str,
    error: Callable[[str], Exception],
) -> dict[str, Any]:
    """Every key of ``spec`` -> the table's value (converted: an integer where a float is wanted) or
    the default. Keys whose spec type is ``object`` are passed through for the caller to check."""
    if not isinstance(mapping, Mapping):
        raise error(f"{source}: {table}: expected a table, got {mapping!r}")
    values: dict[str, Any] = {}
    for key, raw in mapping.items():
        kind_default = spec.get(key)
        if kind_default is None:
            raise error(f"{source}: {table}.{key}: unknown key (known: {', '.join(sorted(spec))})")
        values[key] = _convert(raw, kind_default[0], f"{source}: {table}.{key}", error)
    return {key: values.get(key, default) for key, (_kind, default) in spec.items()}


def _convert(raw: object, kind: type, where: str, error: Callable[[str], Exception]) -> object:
    if kind is object:
        return raw
    # TOML booleans are ints to Python; they are never numbers here.
    if isinstance(raw, bool) and kind is not bool:
        raise error(f"{where}: expected {_KINDS.get(kind, kind.__name__)}, got {raw!r}")
    if kind is float and isinstance(raw, int):
        return float(raw)
    if not isinstance(raw, kind):
        raise error(f"{where}: expected {_KINDS.get(kind, kind.__name__)}, got {raw!r}")
    return raw


def read_toml(path: Path, error: Callable[[str], Exception]) -> dict[str, Any]:
    """The file's tables, or ``error`` with one line saying why it cannot be used."""
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
