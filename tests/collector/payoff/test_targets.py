"""``[payoff]`` targets: the highways as operators write them, and one clear line for a bad one."""

from __future__ import annotations

import pytest

from nodeagent.collector.config import CollectorConfigError, config_from_mapping
from nodeagent.collector.payoff.targets import NVLINK_BYTES_PER_SECOND, PayoffConfig, parse_target


@pytest.mark.parametrize(
    ("text", "network", "storage", "interconnect"),
    [
        ("50G", 50e9 / 8, None, None),
        ("25Gb/s", 25e9 / 8, None, None),
        ("network 100G", 100e9 / 8, None, None),
        ("rdma 8GB/s", None, 8e9, None),
        ("storage 64G", None, 8e9, None),
        ("nvlink", None, None, NVLINK_BYTES_PER_SECOND),
        ("nvlink 300GB/s", None, None, 300e9),
        ("pcie5", None, None, 16 * 3.938e9),
        ("50G + nvlink", 50e9 / 8, None, NVLINK_BYTES_PER_SECOND),
    ],
)
def test_a_target_sets_each_highway_it_names(
    text: str, network: float | None, storage: float | None, interconnect: float | None
) -> None:
    target = parse_target(text)
    assert target.name == text
    assert target.network_bytes_per_second == (pytest.approx(network) if network else None)
    assert target.storage_bytes_per_second == (pytest.approx(storage) if storage else None)
    assert target.interconnect_bytes_per_second == (pytest.approx(interconnect) if interconnect else None)


@pytest.mark.parametrize(
    ("targets", "says"),
    [
        (["fast"], "payoff.targets[0]: 'fast': not a highway"),
        (["50G", "rdma"], "payoff.targets[1]: 'rdma': rdma needs a rate"),
        (["50G + 100G"], "names the network twice"),
        (["0G"], "payoff.targets[0]"),
        ([3], "expected a highway"),
        ("50G", "payoff.targets: expected a list"),
    ],
)
def test_a_bad_target_stops_start_up_with_one_line_naming_it(targets: object, says: str) -> None:
    with pytest.raises(CollectorConfigError) as err:
        config_from_mapping({"payoff": {"targets": targets}}, "collector.toml")
    assert says in str(err.value) and str(err.value).startswith("collector.toml: ")
    assert "\n" not in str(err.value)


def test_payoff_keys_are_checked_and_the_defaults_hold() -> None:
    assert config_from_mapping({}, "c.toml").payoff == PayoffConfig()
    with pytest.raises(CollectorConfigError, match=r"payoff\.speed: unknown key"):
        config_from_mapping({"payoff": {"speed": 1}}, "c.toml")
    with pytest.raises(CollectorConfigError, match="link_near_rating_ratio"):
        config_from_mapping({"payoff": {"link_near_rating_ratio": 1.5}}, "c.toml")
    config = config_from_mapping({"payoff": {"targets": ["50G", "nvlink"]}}, "c.toml").payoff
    assert [t.name for t in config.targets] == ["50G", "nvlink"]
