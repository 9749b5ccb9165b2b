"""Strict reading of one configuration table: known keys only, each of its type, one-line errors.

Shared by the ``[alerts]`` and ``[sinks]`` tables so both name a bad value the same way:
``collector.toml: alerts.node_down_seconds: expected a number, got 'soon'``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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
