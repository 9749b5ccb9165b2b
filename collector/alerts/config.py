"""Thresholds of the hardware and health alerts: the ``[alerts]`` table of the collector's config.

Every field has a documented default; ``AlertConfig.from_mapping`` rejects unknown keys, wrong
types and impossible values with one line naming the source and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from nodeagent.core.settings.readers import link_rate
from nodeagent.core.settings.tables import check_table
from nodeagent.core.wire.clock_events import CLOCK_EVENT_REASONS

_REASON_BITS = {name: bit for bit, name in CLOCK_EVENT_REASONS}


# Settings whose 0 means off.
_MAY_BE_ZERO = frozenset({"node_stopped_down_seconds"})


class AlertConfigError(ValueError):
    """An ``[alerts]`` value that cannot be used; the message is one line."""


@dataclass(frozen=True, slots=True)
class AlertConfig:
    # GPU and NIC health is judged on one report per this many seconds (and on every report that
    # carries an Xid or ECC event); counters are cumulative, so a check sees all that happened since
    # the last one. Reports in between cost next to nothing.
    check_seconds: float = 5.0
    # NodeDown: a node that sent no report for this long is down (reports come every ~1 s); the
    # same threshold makes `nodes` and the fleet page say `down`.
    node_down_seconds: float = 60.0
    # NodeDown for a node whose agent stopped cleanly (a stopping goodbye) and has not come back
    # within this long; 0 (the default): never, such a node raises only the info NodeStopped.
    node_stopped_down_seconds: float = 0.0
    # NVLinkDown: links each GPU must have active, links 0..N-1 (an HGX A100 has 12, H100 18);
    # 0 expects the links that were active when the collector first saw the GPU.
    nvlink_expected_active_links: int = 0
    # NVLink state and error counters are judged on one report per this many seconds: reading
    # 8 GPUs x 18 links costs more than all the other rules together, and the error counters are
    # cumulative, so nothing is missed, only seen up to this much later.
    nvlink_check_seconds: float = 30.0
    # NVLinkErrors: fires when one link's replay + CRC errors grow by this many, or its recovery
    # errors (link retrains) by this many, without a quiet gap of nvlink_errors_quiet_seconds ...
    nvlink_errors_min_increase: int = 10
    nvlink_recovery_errors_min_increase: int = 1
    # ... and resolves once the link's counters have stood still that long.
    nvlink_errors_quiet_seconds: float = 600.0
    # NICDegraded: a link speed below this share of the reference speed (configured, else the speed
    # the node reported when first seen) is degraded; so is a link that went down.
    nic_speed_min_ratio: float = 0.99
    # Interface -> expected link speed in bytes per second; TOML: { eth0 = "50G" }.
    nic_expected_speeds: Mapping[str, float] = field(default_factory=dict)
    # NICDegraded (flapping): this many carrier changes (one drop and return is 2) without a quiet
    # gap of nic_flap_quiet_seconds; resolves after that long without a change.
    nic_carrier_changes_min: int = 2
    nic_flap_quiet_seconds: float = 600.0
    # XIDError: fires on an Xid event of the GPU, resolves after this long without one.
    xid_quiet_seconds: float = 900.0
    # ECCUncorrectable: fires when uncorrected (volatile) ECC errors grow or a double-bit event
    # arrives, resolves after this long without either.
    ecc_quiet_seconds: float = 3600.0
    # ThermalThrottling: clock-event reasons (nvidia-smi's clocks_event_reasons names) that count ...
    thermal_reasons: tuple[str, ...] = ("sw_thermal_slowdown", "hw_thermal_slowdown")
    # ... set continuously this long to fire, and clear this long to resolve.
    thermal_sustain_seconds: float = 30.0
    thermal_clear_seconds: float = 60.0

    @property
    def thermal_mask(self) -> int:
        mask = 0
        for name in self.thermal_reasons:
            mask |= _REASON_BITS[name]
        return mask

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], *, source: str = "<config>") -> AlertConfig:
        spec: dict[str, tuple[type, object]] = {}
        for f in fields(cls):
            default = f.default if f.default_factory is MISSING else f.default_factory()
            # Scalars are checked by type here; the table and the list below.
            spec[f.name] = ({"float": float, "int": int}.get(str(f.type), object), default)
        values = check_table(mapping, spec, source=source, table="alerts", error=AlertConfigError)
        where = f"{source}: alerts"
        for name, value in values.items():
            kind = spec[name][0]
            if kind is float and name in _MAY_BE_ZERO and value < 0:
                raise AlertConfigError(f"{where}.{name}: must be 0 (off) or more, got {value!r}")
            if kind is float and value <= 0 and name not in (*_MAY_BE_ZERO, "nic_speed_min_ratio"):
                raise AlertConfigError(f"{where}.{name}: must be positive, got {value!r}")
            if kind is int and value < 0:
                raise AlertConfigError(f"{where}.{name}: must be 0 or more, got {value!r}")
        ratio = values["nic_speed_min_ratio"]
        if not 0 < ratio <= 1:
            raise AlertConfigError(f"{where}.nic_speed_min_ratio: must be in (0, 1], got {ratio!r}")
        values["nic_expected_speeds"] = _speeds(values["nic_expected_speeds"], where)
        values["thermal_reasons"] = _reasons(values["thermal_reasons"], where)
        return cls(**values)


def _speeds(raw: object, where: str) -> dict[str, float]:
    if isinstance(raw, Mapping) and not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise AlertConfigError(f'{where}.nic_expected_speeds: expected a table of interface = "rate", got {raw!r}')
    out: dict[str, float] = {}
    for name, value in raw.items():
        out[str(name)] = link_rate(value, f"{where}.nic_expected_speeds.{name}", AlertConfigError)
    return out


def _reasons(raw: object, where: str) -> tuple[str, ...]:
    if isinstance(raw, tuple):
        return raw  # the default
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise AlertConfigError(f"{where}.thermal_reasons: expected a list of reason names, got {raw!r}")
    unknown = [r for r in raw if r not in _REASON_BITS]
    if unknown:
        raise AlertConfigError(
            f"{where}.thermal_reasons: unknown reason {unknown[0]!r} (known: {', '.join(_REASON_BITS)})"
        )
    return tuple(raw)
