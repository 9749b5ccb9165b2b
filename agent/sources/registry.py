"""The sources by name, node_exporter style: each has a default on/off state that
``--collector.NAME`` / ``--no-collector.NAME`` override."""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.agent.sources.base import Source

_SOURCES: dict[str, type[Source]] = {}


class UnknownSourceError(ValueError):
    pass


def register(cls: type[Source]) -> type[Source]:
    if cls.name in _SOURCES:
        raise ValueError(f"source {cls.name!r} registered twice")
    _SOURCES[cls.name] = cls
    return cls


def available() -> Mapping[str, type[Source]]:
    return dict(sorted(_SOURCES.items()))


def enabled_names(overrides: Mapping[str, bool]) -> list[str]:
    """The sources to run: the defaults, changed by ``overrides`` (name -> on/off)."""
    for name in overrides:
        if name not in _SOURCES:
            # node_exporter's word, as in the flag the name came from.
            raise UnknownSourceError(f"unknown collector {name!r} (known: {', '.join(sorted(_SOURCES))})")
    return [name for name, cls in sorted(_SOURCES.items()) if overrides.get(name, cls.default_enabled)]
