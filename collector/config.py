"""The collector's configuration file (TOML): ``[detector]``, ``[alerts]``, ``[sinks]``.

Every table is checked strictly by its owner; an unknown table, key, a wrong type or an
impossible value stops start-up with one line naming the file and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.alert_config import AlertConfig, AlertConfigError
from collector.detector_config import DetectorConfig, DetectorConfigError
from collector.sinks.base import Sink
from collector.sinks.config import SinkConfigError, build_sinks

TABLES = ("alerts", "detector", "sinks")


class CollectorConfigError(ValueError):
    """One line naming the file, the key and what was expected."""


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    alerts: AlertConfig = field(default_factory=AlertConfig)
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    sinks: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<defaults>"

    def build_sinks(self) -> list[Sink]:
        return build_sinks(self.sinks, source=self.source)


def load_collector_config(path: Path | None, *, sink_overrides: Mapping[str, Any] | None = None) -> CollectorConfig:
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError as err:
            raise CollectorConfigError(f"{path}: no such file") from err
        except (OSError, UnicodeDecodeError) as err:
            raise CollectorConfigError(f"{path}: cannot read: {err}") from err
        except tomllib.TOMLDecodeError as err:
            raise CollectorConfigError(f"{path}: not valid TOML: {err}") from err
    for key in raw:
        if key not in TABLES:
            raise CollectorConfigError(f"{source}: {key}: unknown table (known: {', '.join(TABLES)})")
    sinks = dict(raw.get("sinks", {})) if isinstance(raw.get("sinks", {}), Mapping) else raw["sinks"]
    if sink_overrides and isinstance(sinks, dict):
        sinks.update(sink_overrides)
    try:
        config = CollectorConfig(
            alerts=AlertConfig.from_mapping(raw.get("alerts", {}), source=source),
            detector=DetectorConfig.from_mapping(raw.get("detector", {}), source=f"{source} [detector]"),
            sinks=sinks,
            source=source,
        )
        config.build_sinks()  # check now, so a bad URL stops start-up
    except (AlertConfigError, DetectorConfigError, SinkConfigError) as err:
        raise CollectorConfigError(str(err)) from err
    return config
