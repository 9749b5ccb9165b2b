"""``[fleet]``: strict keys, the collector list checked, a token never sent in plaintext, files
checked at start-up, and a collector that finds itself in the list."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.collector.config import CollectorConfigError, config_from_mapping
from nodeagent.collector.fleet.config import FleetConfig, FleetConfigError, is_this_collector


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"collector": ["a:1"]}, "f.toml: fleet.collector: unknown key (known: collectors, insecure, timeout_seconds,"),
        ({"collectors": "a:1"}, "f.toml: fleet.collectors: expected a list of HOST:PORT strings, got 'a:1'"),
        ({"collectors": ["http://a:1"]}, "f.toml: fleet: 'http://a:1' is not HOST:PORT: give 'a:1', without http://"),
        ({"timeout_seconds": 0}, "f.toml: fleet.timeout_seconds: expected a number above 0, got 0.0"),
        ({"timeout_seconds": True}, "f.toml: fleet.timeout_seconds: expected a number, got True"),
        (
            {"collectors": ["10.0.0.2:50051"], "token_file": "/t"},
            "f.toml: fleet: refusing to send the bearer token in plaintext to 10.0.0.2:50051",
        ),
    ],
)
def test_a_bad_fleet_table_is_one_line(table: dict[str, object], message: str) -> None:
    with pytest.raises(CollectorConfigError) as err:
        config_from_mapping({"fleet": table}, "f.toml")
    assert str(err.value).startswith(message), err.value


def test_a_good_table_and_its_files_checked_at_start_up(tmp_path: Path) -> None:
    config = config_from_mapping(
        {"fleet": {"collectors": ["a:1", "b:2", "a:1"], "timeout_seconds": 3, "tls_ca": str(tmp_path / "ca.pem")}},
        "f.toml",
    )
    fleet = config.fleet
    assert fleet.collectors == ("a:1", "b:2") and fleet.timeout_seconds == 3.0
    assert fleet.security.tls and fleet.to_plain()["tls_ca"] == str(tmp_path / "ca.pem")
    with pytest.raises(FleetConfigError, match=r"^f\.toml: fleet: .*ca\.pem: no such file$"):
        fleet.check()
    (tmp_path / "ca.pem").write_text("x")
    fleet.check()
    FleetConfig().check()  # no collectors: nothing to reach


def test_a_collector_leaves_itself_out() -> None:
    fleet = FleetConfig(collectors=("127.0.0.1:7001", "localhost:7002", "192.0.2.1:7002", "127.0.0.1:7003"))
    # By its --listen as written; by its port on a host that resolves to what it listens on.
    assert fleet.others("127.0.0.1:7001", 7001) == ("localhost:7002", "192.0.2.1:7002", "127.0.0.1:7003")
    assert fleet.others("127.0.0.1:7002", 7002) == ("127.0.0.1:7001", "192.0.2.1:7002", "127.0.0.1:7003")
    # A wildcard listener is every local address; 192.0.2.1 (TEST-NET) is not this machine's.
    assert fleet.others("0.0.0.0:7002", 7002) == ("127.0.0.1:7001", "192.0.2.1:7002", "127.0.0.1:7003")
    assert not is_this_collector("nosuchhost.invalid:7001", "0.0.0.0:7001", 7001)
    assert is_this_collector("127.0.0.1:7001", "127.0.0.1:0", 7001)  # port 0: the port it was given
