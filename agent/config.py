"""The agent's own sections of its configuration file: what the kernel cannot tell and the operator can.

``[link_speeds]``, ``[gpu_deadlines]``, ``[dcgm_exporter]``, ``rescan_seconds`` and
``gpu_power_sample_seconds``. The file's other keys are command settings (flags), checked by
``nodeagent.core.settings.framework``. An unknown key, a wrong type or an impossible value is a
``ConfigError`` whose message names the file, the key and what was expected, in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nodeagent.core.settings.readers import link_rate, read_toml

# Top-level keys of agent.toml that belong here rather than to a command's flags.
SECTIONS = frozenset({"link_speeds", "rescan_seconds", "gpu_deadlines", "gpu_power_sample_seconds", "dcgm_exporter"})


@dataclass(frozen=True, slots=True)
class GpuDeadlines:
    """How long the tick waits for one GPU (``[gpu_deadlines]``; docs/agent.md, "A GPU that stops
    answering"). A GPU past either bound is reported ``unresponsive`` and read again with backoff."""

    call_seconds: float = 0.5  # one NVML call on one GPU
    tick_seconds: float = 1.0  # all of one GPU's calls in one tick
    scan_seconds: float = 5.0  # one GPU's calls at a topology scan (first calls on a GPU are slower)
    backoff_max_seconds: float = 60.0  # the longest wait between two tries of an unresponsive GPU


@dataclass(frozen=True, slots=True)
class DcgmExporterConfig:
    """``[dcgm_exporter]``: a dcgm-exporter on this node whose SM activity is a GPU's computing share
    (agent/gpu/dcgm_exporter.py; docs/agent.md, "DCGM's profiling"). Off while ``url`` is empty."""

    url: str = ""  # http://HOST:PORT/PATH of its page
    timeout_seconds: float = 0.5  # one scrape's deadline, connect to last byte


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message is one line."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    # Interface name -> link speed in bytes per second; overrides the kernel's `speed`
    # (virtual NICs report none, capped cloud links report the physical port's speed).
    link_speeds: Mapping[str, float] = field(default_factory=dict)
    # Seconds between topology rescans (new NICs, disks, ports); reads stay every tick.
    rescan_seconds: float = 30.0
    gpu_deadlines: GpuDeadlines = field(default_factory=GpuDeadlines)
    # Seconds between readings of a GPU's instantaneous draw between ticks, on GPUs without GPM
    # (agent/gpu/power_samples.py); 0 reads none.
    gpu_power_sample_seconds: float = 0.1
    # A local dcgm-exporter's page, for DCGM's SM activity (agent/gpu/dcgm_exporter.py); off without a url.
    dcgm_exporter: DcgmExporterConfig = field(default_factory=DcgmExporterConfig)


def load_config(path: Path) -> AgentConfig:
    """The sections of an agent configuration file (its other keys are the commands')."""
    raw = read_toml(path, ConfigError)
    return config_from_mapping({k: v for k, v in raw.items() if k in SECTIONS}, source=str(path))


def config_from_mapping(raw: Mapping[str, Any], source: str = "<config>") -> AgentConfig:
    for key in raw:
        if key not in SECTIONS:
            raise ConfigError(f"{source}: {key}: unknown key (known: {', '.join(sorted(SECTIONS))})")
    speeds: dict[str, float] = {}
    table = raw.get("link_speeds", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f'{source}: link_speeds: expected a table of interface = "rate", got {table!r}')
    for name, value in table.items():
        speeds[name] = _rate(value, f"{source}: link_speeds.{name}")
    rescan = raw.get("rescan_seconds", 30.0)
    if isinstance(rescan, bool) or not isinstance(rescan, int | float) or rescan <= 0:
        raise ConfigError(f"{source}: rescan_seconds: expected a number of seconds above 0, got {rescan!r}")
    deadlines = _gpu_deadlines(raw.get("gpu_deadlines", {}), source)
    power = raw.get("gpu_power_sample_seconds", 0.1)
    if isinstance(power, bool) or not isinstance(power, int | float) or not (power == 0 or 0.02 <= power <= 1.0):
        raise ConfigError(f"{source}: gpu_power_sample_seconds: expected 0 (off) or 0.02 to 1 seconds, got {power!r}")
    return AgentConfig(
        link_speeds=speeds, rescan_seconds=float(rescan), gpu_deadlines=deadlines,
        gpu_power_sample_seconds=float(power), dcgm_exporter=_dcgm_exporter(raw.get("dcgm_exporter", {}), source),
    )  # fmt: skip


def effective_sections(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The sections checked, with their defaults: ``nodeagent.core.settings.framework.Layout.check_sections``."""
    config = config_from_mapping(raw, source=source)
    deadlines = config.gpu_deadlines
    return {
        "link_speeds": dict(config.link_speeds),
        "rescan_seconds": config.rescan_seconds,
        "gpu_deadlines": {name: getattr(deadlines, name) for name in GpuDeadlines.__dataclass_fields__},
        "gpu_power_sample_seconds": config.gpu_power_sample_seconds,
        "dcgm_exporter": {"url": config.dcgm_exporter.url, "timeout_seconds": config.dcgm_exporter.timeout_seconds},
    }


def parse_link_speed_flag(text: str) -> tuple[str, float]:
    """``IFACE=RATE`` from the command line."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ConfigError(f"--link-speed {text!r}: expected IFACE=RATE, e.g. eth0=50G")
    return name, _rate(value, f"--link-speed {name}")


def _gpu_deadlines(table: object, source: str) -> GpuDeadlines:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: gpu_deadlines: expected a table of seconds, got {table!r}")
    known = GpuDeadlines.__dataclass_fields__
    values: dict[str, float] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{source}: gpu_deadlines.{key}: unknown key (known: {', '.join(sorted(known))})")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"{source}: gpu_deadlines.{key}: expected a number of seconds above 0, got {value!r}")
        values[key] = float(value)
    deadlines = GpuDeadlines(**values)
    if deadlines.call_seconds > deadlines.tick_seconds:
        raise ConfigError(f"{source}: gpu_deadlines.call_seconds: above tick_seconds ({deadlines.tick_seconds})")
    return deadlines


def _dcgm_exporter(table: object, source: str) -> DcgmExporterConfig:
    where = f"{source}: dcgm_exporter"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table (url, timeout_seconds), got {table!r}")
    for key in table:
        if key not in DcgmExporterConfig.__dataclass_fields__:
            raise ConfigError(f"{where}.{key}: unknown key (known: timeout_seconds, url)")
    url = table.get("url", "")
    if not isinstance(url, str):
        raise ConfigError(f'{where}.url: expected a string such as "http://127.0.0.1:9400/metrics", got {url!r}')
    if url:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as err:
            raise ConfigError(f"{where}.url: {url!r} is not a URL ({err})") from err
        if parts.scheme != "http" or not parts.hostname or port == 0:
            raise ConfigError(
                f"{where}.url: expected http://HOST:PORT/PATH, e.g. http://127.0.0.1:9400/metrics, got {url!r}"
            )
    timeout = table.get("timeout_seconds", 0.5)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0.01 <= timeout <= 10.0:
        raise ConfigError(f"{where}.timeout_seconds: expected 0.01 to 10 seconds, got {timeout!r}")
    return DcgmExporterConfig(url=url, timeout_seconds=float(timeout))


def _rate(value: object, where: str) -> float:
    return link_rate(value, where, ConfigError)
