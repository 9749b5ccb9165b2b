"""Expectations: what the node was rented as, from a profile file (TOML) and flags.

A profile is a built-in name (``8xA800-nvlink-50g``; ``builtin_profiles()`` lists them, the
files are in ``agent/diag/profiles/``) or the path of a TOML file with the same tables:

    description = "8x A800-SXM4 80GB, NVLink, 50 Gb/s data network"
    [gpu]
    count = 8
    nvlinks_per_gpu = 8
    [nic]
    speed = "50G"

Every key is optional; a check without its expectation says so and skips the comparison. An
unknown key, a wrong type or an impossible value is a ``ProfileError`` whose one-line message
names the file and the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from nodeagent.core.settings.readers import link_rate, read_toml

GIB: Final = 1024**3
MIB: Final = 1024**2


class ProfileError(ValueError):
    """A profile that cannot be used; the message is one line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class GpuExpectations:
    count: int | None = None
    model: str | None = None  # a part of every GPU's NVML name, e.g. "A800"
    nvlinks_per_gpu: int | None = None  # active links per GPU
    nvlink_min_speed_bytes_per_second: float | None = None  # per link, one direction
    max_temperature_celsius: float = 85.0
    max_pcie_replays: int = 100  # since boot; any growth during the check warns as well


@dataclass(frozen=True, slots=True)
class FabricExpectations:
    """The NVLink fabric (NVSwitch systems, GB200/GB300 NVL72 racks)."""

    required: bool = False  # every GPU must be fabric-attached and registered
    clique_gpus: int | None = None  # this many of the node's GPUs in one clique
    cluster_uuid: str | None = None  # the NVLink domain rented


@dataclass(frozen=True, slots=True)
class NicExpectations:
    names: tuple[str, ...] = ()  # empty: the node's physical NICs that are up
    speed_bytes_per_second: float | None = None
    min_mtu: int | None = None
    max_carrier_changes: int = 10  # since boot; any change during the check warns as well


@dataclass(frozen=True, slots=True)
class RdmaExpectations:
    ports: int | None = None  # ports that must be ACTIVE and LinkUp
    devices: tuple[str, ...] = ()  # devices whose every port must be
    rate_bytes_per_second: float | None = None  # per port
    link_layer: str | None = None  # "InfiniBand" or "Ethernet" (RoCE)


@dataclass(frozen=True, slots=True)
class StorageExpectations:
    mounts: tuple[str, ...] = ()
    transport: str | None = None  # of every expected mount: "rdma", "tcp", "pcie", "nfs", ...
    min_free_bytes: float | None = None  # on every expected mount
    dataset: str | None = None  # where --probe reads by default


@dataclass(frozen=True, slots=True)
class HostExpectations:
    # Data pre-processing (decoding, augmentation) runs on these cores, several per GPU.
    min_cpu_cores_per_gpu: float = 4.0
    min_memory_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class ProbeExpectations:
    min_read_bytes_per_second: float | None = None
    min_read_iops: float | None = None


@dataclass(frozen=True, slots=True)
class CollectorExpectations:
    address: str | None = None  # HOST:PORT of the collector this node reports to


@dataclass(frozen=True, slots=True)
class Profile:
    name: str | None = None  # the built-in name or the file's path; None without a profile
    description: str = ""
    gpu: GpuExpectations = field(default_factory=GpuExpectations)
    fabric: FabricExpectations = field(default_factory=FabricExpectations)
    nic: NicExpectations = field(default_factory=NicExpectations)
    rdma: RdmaExpectations = field(default_factory=RdmaExpectations)
    storage: StorageExpectations = field(default_factory=StorageExpectations)
    host: HostExpectations = field(default_factory=HostExpectations)
    probe: ProbeExpectations = field(default_factory=ProbeExpectations)
    collector: CollectorExpectations = field(default_factory=CollectorExpectations)


def builtin_profiles() -> dict[str, str]:
    """Built-in profile names and their descriptions."""
    out: dict[str, str] = {}
    for entry in sorted(_profiles_dir().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            name = entry.name.removesuffix(".toml")
            out[name] = str(read_toml(entry, ProfileError).get("description", ""))
    return out


def load_profile(spec: str) -> Profile:
    """A built-in profile by name, or a profile file by path; read as every configuration file is
    (``read_toml``: ``rental.toml: no such file``, ``rental.toml: not valid TOML: ...``)."""
    builtin = _profiles_dir() / f"{spec}.toml"
    if "/" not in spec and not spec.endswith(".toml"):
        if not builtin.is_file():
            known = ", ".join(builtin_profiles())
            raise ProfileError(f"{spec}: no such built-in profile (built-in: {known}; or give a .toml path)")
        return parse_profile(read_toml(builtin, ProfileError), source=f"{spec} ({builtin})", name=spec)
    path = Path(spec)
    return parse_profile(read_toml(path, ProfileError), source=str(path), name=str(path))


def parse_profile(raw: Mapping[str, Any], source: str, name: str | None = None) -> Profile:
    """A profile's tables (a TOML file's, as read) checked key by key; ``source`` names it in errors."""
    sections: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "description":
            sections[key] = _text(value, f"{source}: description")
        elif key in _SCHEMA:
            sections[key] = _section(key, value, source)
        else:
            known = ", ".join(["description", *_SCHEMA])
            raise ProfileError(f"{source}: unknown key {key!r} (known: {known})")
    return Profile(name=name, **sections)


def with_overrides(
    profile: Profile,
    *,
    gpus: int | None = None,
    nvlinks_per_gpu: int | None = None,
    nic_speed_bytes_per_second: float | None = None,
    mounts: tuple[str, ...] = (),
    collector: str | None = None,
) -> Profile:
    """The profile with the command line's expectations put over it."""
    gpu, nic, storage, coll = profile.gpu, profile.nic, profile.storage, profile.collector
    if gpus is not None:
        gpu = dataclasses.replace(gpu, count=gpus)
    if nvlinks_per_gpu is not None:
        gpu = dataclasses.replace(gpu, nvlinks_per_gpu=nvlinks_per_gpu)
    if nic_speed_bytes_per_second is not None:
        nic = dataclasses.replace(nic, speed_bytes_per_second=nic_speed_bytes_per_second)
    if mounts:
        storage = dataclasses.replace(storage, mounts=mounts)
    if collector is not None:
        coll = dataclasses.replace(coll, address=collector)
    return dataclasses.replace(profile, gpu=gpu, nic=nic, storage=storage, collector=coll)


def parse_address(text: str, where: str) -> str:
    """``HOST:PORT`` (``[v6]:PORT`` too), returned as given."""
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", text)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ProfileError(f"{where}: expected HOST:PORT, got {text!r}")
    return text


# ---- the schema: TOML key -> (dataclass field, converter) per table -----------------------------

Converter = Callable[[object, str], Any]


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProfileError(f"{where}: expected a whole number >= 0, got {value!r}")
    return value


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProfileError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def _scaled(scale: int) -> Converter:
    return lambda value, where: _number(value, where) * scale


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(f"{where}: expected true or false, got {value!r}")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ProfileError(f"{where}: expected a string, got {value!r}")
    return value


def _texts(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ProfileError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _rate(value: object, where: str) -> float:
    return link_rate(value, where, ProfileError)


def _link_layer(value: object, where: str) -> str:
    text = _text(value, where)
    if text not in ("InfiniBand", "Ethernet"):
        raise ProfileError(f'{where}: expected "InfiniBand" or "Ethernet", got {text!r}')
    return text


_SCHEMA: Final[dict[str, tuple[type[Any], dict[str, tuple[str, Converter]]]]] = {
    "gpu": (
        GpuExpectations,
        {
            "count": ("count", _count),
            "model": ("model", _text),
            "nvlinks_per_gpu": ("nvlinks_per_gpu", _count),
            "nvlink_min_speed": ("nvlink_min_speed_bytes_per_second", _rate),
            "max_temperature_celsius": ("max_temperature_celsius", _number),
            "max_pcie_replays": ("max_pcie_replays", _count),
        },
    ),
    "fabric": (
        FabricExpectations,
        {
            "required": ("required", _flag),
            "clique_gpus": ("clique_gpus", _count),
            "cluster_uuid": ("cluster_uuid", _text),
        },
    ),
    "nic": (
        NicExpectations,
        {
            "names": ("names", _texts),
            "speed": ("speed_bytes_per_second", _rate),
            "min_mtu": ("min_mtu", _count),
            "max_carrier_changes": ("max_carrier_changes", _count),
        },
    ),
    "rdma": (
        RdmaExpectations,
        {
            "ports": ("ports", _count),
            "devices": ("devices", _texts),
            "rate": ("rate_bytes_per_second", _rate),
            "link_layer": ("link_layer", _link_layer),
        },
    ),
    "storage": (
        StorageExpectations,
        {
            "mounts": ("mounts", _texts),
            "transport": ("transport", _text),
            "min_free_gib": ("min_free_bytes", _scaled(GIB)),
            "dataset": ("dataset", _text),
        },
    ),
    "host": (
        HostExpectations,
        {
            "min_cpu_cores_per_gpu": ("min_cpu_cores_per_gpu", _number),
            "min_memory_gib": ("min_memory_bytes", _scaled(GIB)),
        },
    ),
    "probe": (
        ProbeExpectations,
        {
            "min_read_mib_per_second": ("min_read_bytes_per_second", _scaled(MIB)),
            "min_read_iops": ("min_read_iops", _number),
        },
    ),
    "collector": (
        CollectorExpectations,
        {"address": ("address", lambda value, where: parse_address(_text(value, where), where))},
    ),
}


def _section(name: str, table: object, source: str) -> Any:
    cls, keys = _SCHEMA[name]
    if not isinstance(table, Mapping):
        raise ProfileError(f"{source}: {name}: expected a table ([{name}]), got {table!r}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in keys:
            raise ProfileError(f"{source}: unknown key '{name}.{key}' (known in [{name}]: {', '.join(keys)})")
        attribute, convert = keys[key]
        values[attribute] = convert(value, f"{source}: {name}.{key}")
    return cls(**values)


def _profiles_dir() -> Any:
    return resources.files("nodeagent.agent.diag") / "profiles"
