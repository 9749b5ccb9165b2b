"""The collector's own sections of its configuration file (TOML): ``[detector]``, ``[alerts]``, ``[sinks]``,
``[fleet]``, ``[metrics]``, ``[prices]``, ``[tenants]``.

Every table is checked strictly by its owner; an unknown key, a wrong type or an impossible value
stops start-up with one line naming the file and the key. The file's other keys are command
settings (``serve``'s flags at the top level), checked by ``nodeagent.core.settings.framework``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from nodeagent.collector.alerts.config import AlertConfig, AlertConfigError
from nodeagent.collector.alerts.sinks.base import Sink
from nodeagent.collector.alerts.sinks.config import SINK_KEYS, SinkConfigError, build_sinks
from nodeagent.collector.fleet.config import FleetConfig, FleetConfigError
from nodeagent.collector.ledger.prices import Prices, PricesConfigError
from nodeagent.collector.payoff.targets import PayoffConfig, PayoffConfigError
from nodeagent.collector.tenants import Tenants, TenantsConfigError
from nodeagent.collector.views.metrics_config import MetricsConfig, MetricsConfigError
from nodeagent.core.detector.config import DetectorConfig, DetectorConfigError
from nodeagent.core.settings.readers import read_toml
from nodeagent.core.settings.tables import check_table

TABLES = ("alerts", "detector", "fleet", "metrics", "payoff", "prices", "sinks", "tenants")


class CollectorConfigError(ValueError):
    """One line naming the file, the key and what was expected."""


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    alerts: AlertConfig = field(default_factory=AlertConfig)
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    sinks: Mapping[str, Any] = field(default_factory=dict)
    # The other collectors the fleet page merges with, and the query commands' list.
    fleet: FleetConfig = field(default_factory=FleetConfig)
    # What a GPU-hour costs, for the ledger.
    prices: Prices = field(default_factory=Prices)
    # The highways a fix's worth is also predicted at.
    payoff: PayoffConfig = field(default_factory=PayoffConfig)
    # Which fleet families /metrics carries (per node, per GPU).
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # Which node credentials belong to which tenant (job names scoped by it).
    tenants: Tenants = field(default_factory=Tenants)
    source: str = "<defaults>"

    def build_sinks(self) -> list[Sink]:
        return build_sinks(self.sinks, source=self.source)


def load_collector_config(path: Path | None, *, sink_overrides: Mapping[str, Any] | None = None) -> CollectorConfig:
    """The sections of a collector configuration file (defaults without one)."""
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        raw = read_toml(path, CollectorConfigError)
    return config_from_mapping({k: v for k, v in raw.items() if k in TABLES}, source, sink_overrides=sink_overrides)


def config_from_mapping(
    raw: Mapping[str, Any], source: str, *, sink_overrides: Mapping[str, Any] | None = None
) -> CollectorConfig:
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
            fleet=FleetConfig.from_mapping(raw.get("fleet", {}), source=source),
            prices=Prices.from_mapping(raw.get("prices", {}), source=source),
            payoff=PayoffConfig.from_mapping(raw.get("payoff", {}), source=source),
            metrics=MetricsConfig.from_mapping(raw.get("metrics", {}), source=source),
            tenants=Tenants.from_mapping(raw.get("tenants", {}), source=source),
            source=source,
        )
        config.build_sinks()  # check now, so a bad URL stops start-up
    except (
        AlertConfigError,
        DetectorConfigError,
        FleetConfigError,
        MetricsConfigError,
        PayoffConfigError,
        PricesConfigError,
        SinkConfigError,
        TenantsConfigError,
    ) as err:
        raise CollectorConfigError(str(err)) from err
    return config


def effective_sections(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The tables checked, each with every key and its default.

    See ``nodeagent.core.settings.framework.Layout.check_sections``.
    """
    config = config_from_mapping(raw, source)
    return {
        "alerts": _fields(config.alerts),
        "detector": _fields(config.detector),
        "fleet": config.fleet.to_plain(),
        "metrics": config.metrics.to_plain(),
        "payoff": config.payoff.to_plain(),
        "prices": config.prices.to_plain(),
        "tenants": config.tenants.to_plain(),
        "sinks": check_table(config.sinks, SINK_KEYS, source=source, table="sinks", error=CollectorConfigError),
    }


def _fields(config: AlertConfig | DetectorConfig) -> dict[str, Any]:
    return {f.name: _plain(getattr(config, f.name)) for f in fields(config)}


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value) if getattr(value, f.name) is not None}
    return value
