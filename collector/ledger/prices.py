"""``[prices]`` of ``collector.toml``: what a GPU-hour costs, by node and by GPU model.

    [prices]
    currency = "USD"
    default_per_gpu_hour = 2.0
    [prices.nodes]            # node-id patterns (globs), the first that matches wins
    "rental-10g-*" = 1.10
    [prices.gpu_models]       # GPU model names as NVML gives them (globs), the first that matches wins
    "NVIDIA H100*" = 3.50

A node's price is its node pattern's, else its GPU model's, else the default: a rented node is
priced by its class (its name), an owned one by what its GPUs cost. Every value is checked at
start; a bad one stops it with one line naming the key.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.core.settings.tables import check_table

DEFAULT_CURRENCY = "USD"

PRICE_KEYS: dict[str, tuple[type, object]] = {
    "currency": (str, DEFAULT_CURRENCY),
    "default_per_gpu_hour": (float, 0.0),
    "nodes": (object, {}),
    "gpu_models": (object, {}),
}


class PricesConfigError(ValueError):
    """One line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class Prices:
    currency: str = DEFAULT_CURRENCY
    default_per_gpu_hour: float = 0.0
    # (glob, price per GPU-hour), in the file's order.
    nodes: tuple[tuple[str, float], ...] = ()
    gpu_models: tuple[tuple[str, float], ...] = ()
    _cache: dict[tuple[str, str], float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, source: str) -> Prices:
        values = check_table(raw, PRICE_KEYS, source=source, table="prices", error=PricesConfigError)
        currency = values["currency"].strip()
        if not currency or len(currency) > 16:
            raise PricesConfigError(
                f"{source}: prices.currency: expected a currency code such as USD, got {currency!r}"
            )
        default = _price(values["default_per_gpu_hour"], f"{source}: prices.default_per_gpu_hour")
        return cls(
            currency, default, _patterns(values["nodes"], source, "nodes"),
            _patterns(values["gpu_models"], source, "gpu_models"),
        )  # fmt: skip

    @property
    def configured(self) -> bool:
        """Some price is set: without one every cost would read 0.00, which is no price at all."""
        return bool(self.default_per_gpu_hour or self.nodes or self.gpu_models)

    def to_plain(self) -> dict[str, Any]:
        return {
            "currency": self.currency, "default_per_gpu_hour": self.default_per_gpu_hour,
            "nodes": dict(self.nodes), "gpu_models": dict(self.gpu_models),
        }  # fmt: skip

    def per_gpu_hour(self, node_id: str, gpu_model: str) -> float:
        """The price of one GPU-hour of this node: its node pattern's, its model's, the default."""
        key = (node_id, gpu_model)
        price = self._cache.get(key)
        if price is None:
            price = next((p for glob, p in self.nodes if fnmatch.fnmatchcase(node_id, glob)), None)
            if price is None and gpu_model:
                price = next((p for glob, p in self.gpu_models if fnmatch.fnmatchcase(gpu_model, glob)), None)
            price = self.default_per_gpu_hour if price is None else price
            if len(self._cache) < 100_000:
                self._cache[key] = price
        return price


# What the ledger says in place of its money columns when no collector priced a row.
NO_PRICES_LINE = (
    "no prices: the money columns are left out; to price the GPU-hours, set [prices] in collector.toml "
    "(docs/ledger.md#prices)"
)


def priced(currencies: Iterable[str]) -> bool:
    """Rows of the ledger carry money: some row's currency is set (a collector without
    ``[prices]`` leaves it empty)."""
    return any(currencies)


def _patterns(raw: object, source: str, table: str) -> tuple[tuple[str, float], ...]:
    where = f"{source}: prices.{table}"
    if not isinstance(raw, Mapping):
        raise PricesConfigError(f'{where}: expected a table of "pattern" = price per GPU-hour, got {raw!r}')
    out = []
    for glob, price in raw.items():
        if not glob:
            raise PricesConfigError(f"{where}: an empty pattern")
        out.append((str(glob), _price(price, f"{where}.{glob!r}")))
    return tuple(out)


def _price(raw: object, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
        raise PricesConfigError(f"{where}: expected a price per GPU-hour, a number of 0 or more, got {raw!r}")
    return float(raw)
