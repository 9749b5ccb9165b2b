"""``[prices]``: a node's price from its node pattern, else its GPU model, else the default; a bad
value is one line naming the key."""

from __future__ import annotations

import pytest

from nodeagent.collector.config import CollectorConfigError, config_from_mapping


def test_a_node_is_priced_by_its_pattern_then_its_model_then_the_default() -> None:
    prices = config_from_mapping(
        {
            "prices": {
                "currency": "EUR", "default_per_gpu_hour": 2,
                "nodes": {"rental-10g-*": 1.1, "rental-*": 1.5},
                "gpu_models": {"NVIDIA H100*": 3.5},
            }
        },
        "f.toml",
    ).prices  # fmt: skip
    assert prices.currency == "EUR"
    assert prices.per_gpu_hour("rental-10g-pcie-0", "NVIDIA H100 80GB HBM3") == 1.1  # the first pattern that matches
    assert prices.per_gpu_hour("rental-ib-0", "NVIDIA A100") == 1.5
    assert prices.per_gpu_hour("dgx-3", "NVIDIA H100 80GB HBM3") == 3.5
    assert prices.per_gpu_hour("dgx-3", "NVIDIA A100") == 2.0
    assert prices.per_gpu_hour("dgx-3", "") == 2.0
    assert config_from_mapping({}, "f.toml").prices.per_gpu_hour("any", "any") == 0.0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"price": 1}, "f.toml: prices.price: unknown key (known: currency, default_per_gpu_hour, gpu_models, nodes)"),
        ({"default_per_gpu_hour": -1}, "f.toml: prices.default_per_gpu_hour: expected a price per GPU-hour, a number"),
        ({"default_per_gpu_hour": "2"}, "f.toml: prices.default_per_gpu_hour: expected a number, got '2'"),
        ({"currency": ""}, "f.toml: prices.currency: expected a currency code such as USD, got ''"),
        ({"nodes": ["rental-*"]}, 'f.toml: prices.nodes: expected a table of "pattern" = price per GPU-hour'),
        ({"gpu_models": {"H100": "cheap"}}, "f.toml: prices.gpu_models.'H100': expected a price per GPU-hour"),
        ({"nodes": {"a*": float("inf")}}, "f.toml: prices.nodes.'a*': expected a price per GPU-hour"),
    ],
)
def test_a_bad_prices_table_is_one_line(table: dict[str, object], message: str) -> None:
    with pytest.raises(CollectorConfigError) as err:
        config_from_mapping({"prices": table}, "f.toml")
    assert str(err.value).startswith(message), err.value
    assert "\n" not in str(err.value)
