"""Report-driven alert rules: each fires and resolves on crafted reports, and says nothing it
cannot know (a restarted collector must not resolve what it has not seen clear)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.collector.alerts.book import AlertBook
from nodeagent.collector.alerts.config import AlertConfig, AlertConfigError
from nodeagent.collector.alerts.node_down import NodeDownWatch
from nodeagent.collector.alerts.report_rules import NodeRules
from nodeagent.collector.store.alert_tables import AlertTables
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.v1 import nodeagent_pb2 as pb

T0 = 1_800_000_000.0
HW_THERMAL = 0x40
SW_POWER_CAP = 0x04
# Every report is checked: tests step time one second at a time.
EVERY_REPORT = AlertConfig(check_seconds=1.0, nvlink_check_seconds=1.0)


def gpu(
    index: int, *, lost: bool = False, ecc: int = 0, reasons: int = 0, links: Sequence[dict[str, Any]] = ()
) -> pb.GpuSample:
    sample = pb.GpuSample(index=index, uuid=f"GPU-{index}", lost=lost)
    if not lost:
        sample.ecc_uncorrected_volatile_total = ecc
        sample.clock_event_reasons = reasons
        sample.temperature_celsius = 91.0
        for number, fields in enumerate(links):
            sample.nvlinks.add(link=number, **fields)
    return sample


def nic(name: str, speed_gbit: float | None = 50, *, up: bool = True, carrier_changes: int = 2) -> pb.NicSample:
    sample = pb.NicSample(
        name=name, operstate="up" if up else "down", carrier=up, carrier_changes_total=carrier_changes
    )
    if speed_gbit is not None and up:
        sample.speed_bytes_per_second = speed_gbit * 1e9 / 8
    return sample


def report(t: float, gpus: Sequence[pb.GpuSample] = (), nics: Sequence[pb.NicSample] = (),
           events: Sequence[pb.Event] = (), info: pb.NodeInfo | None = None) -> pb.NodeReport:  # fmt: skip
    r = pb.NodeReport(node_id="node-a", time_unix_seconds=T0 + t, gpus=gpus, nics=nics, events=events)
    if info is not None:
        r.info.CopyFrom(info)
    return r


def xid(index: int, code: int, severity: str = "critical") -> pb.Event:
    return pb.Event(kind="xid", severity=severity, subject=f"gpu:{index}", attributes={"xid": str(code)})


def brief(signals: Sequence[AlertSignal]) -> list[tuple[str, str, bool, str]]:
    return [(s.name, s.key, s.firing, s.severity) for s in signals]


def firing(signals: Sequence[AlertSignal]) -> list[tuple[str, str, bool, str]]:
    return [b for b in brief(signals) if b[2]]


def of(name: str, signals: Sequence[AlertSignal]) -> list[tuple[str, str, bool, str]]:
    """One rule's signals (the first report of a GPU also says "not firing" for what it can tell)."""
    return [b for b in brief(signals) if b[0] == name]


def test_gpu_lost_and_back() -> None:
    rules = NodeRules("node-a", EVERY_REPORT)
    assert firing(rules.observe(report(0, [gpu(0), gpu(1)]))) == []
    signals = rules.observe(report(1, [gpu(0), gpu(1, lost=True)]))
    assert brief(signals) == [("GPULost", "gpu:1", True, "critical")]
    assert signals[0].labels == {"gpu": "1"}
    assert signals[0].node_id == "node-a"
    assert rules.observe(report(2, [gpu(0), gpu(1, lost=True)])) == [], "no repeat while it stays lost"
    assert brief(rules.observe(report(3, [gpu(0), gpu(1)]))) == [("GPULost", "gpu:1", False, "warning")]


def test_gpu_missing_from_the_report_is_lost() -> None:
    rules = NodeRules("node-a", EVERY_REPORT)
    rules.observe(report(0, [gpu(0), gpu(1), gpu(2)]))
    signals = rules.observe(report(1, [gpu(0), gpu(2)]))
    assert brief(signals) == [("GPULost", "gpu:1", True, "critical")]
    assert "no longer reported" in signals[0].annotations["summary"]
    assert rules.observe(report(2, [])) == [], "a report without GPUs at all says nothing about them"
    assert brief(rules.observe(report(3, [gpu(0), gpu(1), gpu(2)]))) == [("GPULost", "gpu:1", False, "warning")]


def test_nvlink_down_against_first_sight() -> None:
    rules = NodeRules("node-a", EVERY_REPORT)
    healthy = [{"active": True}] * 3
    # Link 2 is inactive from the start (a bridge not fitted): not expected, not alerted.
    first = [{"active": True}, {"active": True}, {"active": False}]
    assert firing(rules.observe(report(0, [gpu(0, links=first)]))) == []
    signals = rules.observe(report(1, [gpu(0, links=[{"active": True}, {"active": False}, {"active": False}])]))
    assert brief(signals) == [("NVLinkDown", "nvlink:gpu0:link1", True, "critical")]
    assert signals[0].labels == {"gpu": "0", "link": "1"}
    assert brief(rules.observe(report(2, [gpu(0, links=healthy)]))) == [
        ("NVLinkDown", "nvlink:gpu0:link1", False, "warning"),
        ("NVLinkDown", "nvlink:gpu0:link2", False, "warning"),  # first seen active: now known healthy
    ]
    assert firing(rules.observe(report(3, [gpu(0, links=first)]))) == [
        ("NVLinkDown", "nvlink:gpu0:link2", True, "critical")
    ], "seen active once, expected from then on"


def test_nvlink_down_against_configured_expectation() -> None:
    rules = NodeRules("node-a", AlertConfig(check_seconds=1, nvlink_check_seconds=1, nvlink_expected_active_links=2))
    signals = rules.observe(report(0, [gpu(0, links=[{"active": True}, {"active": False}, {"active": False}])]))
    assert firing(signals) == [("NVLinkDown", "nvlink:gpu0:link1", True, "critical")]


def test_nvlink_errors_fire_on_growth_and_resolve_after_quiet() -> None:
    config = AlertConfig(check_seconds=1, nvlink_check_seconds=1, nvlink_errors_min_increase=10)
    rules = NodeRules("node-a", config)

    def at(t: float, replay: int, recovery: int = 0, crc: int = 0) -> list[AlertSignal]:
        link = {"active": True, "replay_errors_total": replay, "recovery_errors_total": recovery,
                "crc_flit_errors_total": crc}  # fmt: skip
        return rules.observe(report(t, [gpu(0, links=[link])]))

    assert firing(at(0, 100)) == []
    assert firing(at(1, 104)) == [], "4 errors: below the minimum"
    signals = at(2, 106, crc=4)
    assert firing(signals) == [("NVLinkErrors", "nvlink:gpu0:link0", True, "warning")]
    assert signals[-1].annotations["errors_in_burst"] == "10"
    assert of("NVLinkErrors", at(100, 106, crc=4)) == []
    assert of("NVLinkErrors", at(2 + 600, 106, crc=4)) == [("NVLinkErrors", "nvlink:gpu0:link0", False, "warning")]
    assert firing(at(2000, 106, recovery=1, crc=4)) == [("NVLinkErrors", "nvlink:gpu0:link0", True, "warning")]
    assert firing(at(2001, 0)) == [], "counters that go down were reset: no growth"


def test_nic_speed_down_and_flaps_on_physical_nics_only() -> None:
    info = pb.NodeInfo(nics=[pb.NicInfo(name="eth0"), pb.NicInfo(name="veth0", virtual=True, kind="veth")])
    rules = NodeRules("node-a", EVERY_REPORT)
    assert firing(rules.observe(report(0, nics=[nic("eth0"), nic("veth0", 10)], info=info))) == []
    signals = rules.observe(report(1, nics=[nic("eth0", 25), nic("veth0", 1)]))
    assert brief(signals) == [("NICDegraded", "nic:eth0:speed", True, "warning")]
    assert signals[0].labels == {"nic": "eth0", "reason": "speed"}
    assert signals[0].annotations["expected_bytes_per_second"] == f"{50e9 / 8:.0f}"
    signals = rules.observe(report(2, nics=[nic("eth0", up=False), nic("veth0")]))
    assert brief(signals) == [("NICDegraded", "nic:eth0:speed", True, "warning")]
    assert signals[0].labels["reason"] == "down", "same alert, new reason: sent again"
    assert brief(rules.observe(report(3, nics=[nic("eth0"), nic("veth0")]))) == [
        ("NICDegraded", "nic:eth0:speed", False, "warning")
    ]
    # Carrier flaps: a drop and return is two changes; a container's veth flapping is no alert.
    signals = rules.observe(report(4, nics=[nic("eth0", carrier_changes=4), nic("veth0", carrier_changes=40)]))
    assert brief(signals) == [("NICDegraded", "nic:eth0:carrier", True, "warning")]
    assert signals[0].labels == {"nic": "eth0", "reason": "flapping"}
    assert rules.observe(report(300, nics=[nic("eth0", carrier_changes=4), nic("veth0")])) == []
    assert brief(rules.observe(report(4 + 600, nics=[nic("eth0", carrier_changes=4), nic("veth0")]))) == [
        ("NICDegraded", "nic:eth0:carrier", False, "warning")
    ]


def test_nic_below_configured_speed_from_the_first_report() -> None:
    config = AlertConfig.from_mapping({"check_seconds": 1, "nic_expected_speeds": {"eth0": "100G"}}, source="t")
    rules = NodeRules("node-a", config)
    signals = rules.observe(report(0, nics=[nic("eth0", 50)], info=pb.NodeInfo(nics=[pb.NicInfo(name="eth0")])))
    assert firing(signals) == [("NICDegraded", "nic:eth0:speed", True, "warning")]


def test_nics_are_not_judged_before_the_topology_is_known() -> None:
    rules = NodeRules("node-a", EVERY_REPORT)
    rules.observe(report(0, nics=[nic("eth0")]))
    assert rules.observe(report(1, nics=[nic("eth0", up=False)])) == []


def test_xid_fires_escalates_and_resolves_after_quiet() -> None:
    rules = NodeRules("node-a", AlertConfig(check_seconds=1, xid_quiet_seconds=900))
    rules.observe(report(0, [gpu(0)]))
    signals = rules.observe(report(1, [gpu(0)], events=[xid(0, 13, "warning")]))
    assert brief(signals) == [("XIDError", "gpu:0", True, "warning")]
    assert signals[0].annotations["xids"] == "13"
    signals = rules.observe(report(2, [gpu(0)], events=[xid(0, 79)]))
    assert brief(signals) == [("XIDError", "gpu:0", True, "critical")]
    assert signals[0].annotations["xids"] == "13,79"
    assert of("XIDError", rules.observe(report(800, [gpu(0)]))) == []
    assert of("XIDError", rules.observe(report(902, [gpu(0)]))) == [("XIDError", "gpu:0", False, "warning")]
    # A GPU that falls off the bus: its last Xid is reported with it.
    signals = rules.observe(report(1000, [gpu(0, lost=True)], events=[xid(0, 79)]))
    assert brief(signals) == [("XIDError", "gpu:0", True, "critical"), ("GPULost", "gpu:0", True, "critical")]
    assert signals[0].annotations["xids"] == "79"


def test_ecc_fires_on_counter_growth_or_double_bit_event() -> None:
    rules = NodeRules("node-a", AlertConfig(check_seconds=1, ecc_quiet_seconds=3600))
    rules.observe(report(0, [gpu(0, ecc=5), gpu(1)]))
    assert brief(rules.observe(report(1, [gpu(0, ecc=6), gpu(1)]))) == [("ECCUncorrectable", "gpu:0", True, "critical")]
    dbe = pb.Event(kind="ecc_double_bit", severity="critical", subject="gpu:1")
    assert brief(rules.observe(report(2, [gpu(0, ecc=6), gpu(1)], events=[dbe]))) == [
        ("ECCUncorrectable", "gpu:1", True, "critical")
    ]
    assert firing(rules.observe(report(3, [gpu(0, ecc=0), gpu(1)]))) == [], "volatile counter reset by a driver reload"
    assert of("ECCUncorrectable", rules.observe(report(3602, [gpu(0), gpu(1)]))) == [
        ("ECCUncorrectable", "gpu:0", False, "warning"),
        ("ECCUncorrectable", "gpu:1", False, "warning"),
    ]


def test_thermal_throttling_must_be_sustained_and_clear_for_a_while() -> None:
    rules = NodeRules("node-a", AlertConfig(check_seconds=1, thermal_sustain_seconds=30, thermal_clear_seconds=60))
    assert firing(rules.observe(report(0, [gpu(0, reasons=SW_POWER_CAP)]))) == [], "power capping is not heat"
    for t in range(1, 30):
        assert of("ThermalThrottling", rules.observe(report(t, [gpu(0, reasons=HW_THERMAL)]))) == [], t
    signals = rules.observe(report(31, [gpu(0, reasons=HW_THERMAL)]))
    assert brief(signals) == [("ThermalThrottling", "gpu:0", True, "warning")]
    assert signals[0].annotations["temperature_celsius"] == "91"
    assert rules.observe(report(40, [gpu(0)])) == []
    assert rules.observe(report(41, [gpu(0, reasons=HW_THERMAL)])) == [], "a short clear gap resets the clear timer"
    assert rules.observe(report(60, [gpu(0)])) == []
    assert brief(rules.observe(report(120, [gpu(0)]))) == [("ThermalThrottling", "gpu:0", False, "warning")]


def test_a_restarted_collector_does_not_resolve_what_it_has_not_seen_clear() -> None:
    """The book loaded these as firing; fresh rules must wait for the evidence."""
    rules = NodeRules("node-a", EVERY_REPORT)
    first = rules.observe(report(0, [gpu(0, links=[{"active": False}])]))
    assert [b for b in brief(first) if b[0] in ("XIDError", "ECCUncorrectable", "NVLinkDown", "NVLinkErrors")] == []
    later = rules.observe(report(3600, [gpu(0, links=[{"active": False}])]))
    assert {(s.name, s.firing) for s in later} == {
        ("XIDError", False), ("ECCUncorrectable", False), ("NVLinkErrors", False), ("ThermalThrottling", False),
    }, "each after its quiet or clear period; the link never seen active stays unjudged"  # fmt: skip


def test_default_cadence_skips_reports_but_misses_no_growth() -> None:
    rules = NodeRules("node-a", AlertConfig())  # checks every 5 s, NVLink every 30 s
    rules.observe(report(0, [gpu(0, ecc=1, links=[{"active": True}])]))
    assert rules.observe(report(1, [gpu(0, ecc=2, links=[{"active": False}])])) == []
    assert rules.observe(report(2, [gpu(0, ecc=2, links=[{"active": False}])])) == []
    assert brief(rules.observe(report(5, [gpu(0, ecc=2, links=[{"active": False}])]))) == [
        ("ECCUncorrectable", "gpu:0", True, "critical")
    ]
    assert firing(rules.observe(report(30, [gpu(0, ecc=2, links=[{"active": False}])]))) == [
        ("NVLinkDown", "nvlink:gpu0:link0", True, "critical")
    ]
    # An Xid event is handled in the report that carries it (events are not repeated).
    assert firing(rules.observe(report(31, [gpu(0, ecc=2)], events=[xid(0, 31)]))) == [
        ("XIDError", "gpu:0", True, "critical")
    ]


def test_node_down_and_back() -> None:
    watch = NodeDownWatch(AlertConfig(node_down_seconds=60))
    last_seen = {"a": T0, "b": T0}
    assert brief(watch.check(last_seen, T0 + 10)) == [("NodeDown", "", False, "critical")] * 2
    assert watch.check(last_seen, T0 + 20) == []
    last_seen["a"] = T0 + 50
    signals = watch.check(last_seen, T0 + 70)
    # Down: NodeDown fires, and its verdict's GPUDataStarved resolves (no report will resolve it).
    assert [(s.name, s.node_id, s.firing) for s in signals] == [("NodeDown", "b", True), ("GPUDataStarved", "b", False)]
    assert "70 s" in signals[0].annotations["summary"]
    last_seen["b"] = T0 + 80
    assert [(s.node_id, s.firing) for s in watch.check(last_seen, T0 + 81)] == [("b", False)]


def test_a_clean_stop_is_an_info_event_not_node_down() -> None:
    watch = NodeDownWatch(AlertConfig(node_down_seconds=60))
    watch.check({"a": T0}, T0 + 1)
    # Its agent said a stopping goodbye at T0 + 2: NodeStopped (info), GPUDataStarved resolved.
    signals = watch.check({}, T0 + 3, stopped={"a": T0 + 2})
    assert [(s.name, s.firing, s.severity) for s in signals] == [
        ("NodeStopped", True, "info"),
        ("GPUDataStarved", False, "warning"),
    ]
    # Hours later, still no NodeDown: it was stopped, not lost.
    assert watch.check({}, T0 + 86_400, stopped={"a": T0 + 2}) == []
    # It comes back: NodeStopped resolves; NodeDown counts again from its return.
    back = watch.check({"a": T0 + 86_401}, T0 + 86_402)
    assert [(s.name, s.firing) for s in back] == [("NodeStopped", False)]
    assert [(s.name, s.firing) for s in watch.check({"a": T0 + 86_401}, T0 + 86_500)] == [
        ("NodeDown", True),
        ("GPUDataStarved", False),
    ]


def test_a_stopped_node_is_down_after_node_stopped_down_seconds_when_asked() -> None:
    watch = NodeDownWatch(AlertConfig(node_down_seconds=60, node_stopped_down_seconds=600))
    watch.check({"a": T0}, T0 + 1)
    assert "NodeDown" not in {s.name for s in watch.check({}, T0 + 300, stopped={"a": T0 + 2}) if s.firing}
    late = [s for s in watch.check({}, T0 + 603, stopped={"a": T0 + 2}) if s.firing]
    assert [(s.name, s.severity) for s in late] == [("NodeDown", "critical")]
    assert "stopped 601 s ago and has not come back" in late[0].annotations["summary"]


def test_rules_through_the_book() -> None:
    book = AlertBook(AlertTables(sqlite3.connect(":memory:")))
    rules = NodeRules("node-a", EVERY_REPORT)
    book.observe(rules.observe(report(0, [gpu(0), gpu(1)])), T0)
    transitions = book.observe(rules.observe(report(1, [gpu(0), gpu(1, lost=True)])), T0 + 1)
    assert [(t.kind, t.alert.labels) for t in transitions] == [
        ("firing", {"gpu": "1", "alertname": "GPULost", "node": "node-a", "severity": "critical", "subject": "gpu:1"})
    ]
    transitions = book.observe(rules.observe(report(2, [gpu(0), gpu(1)])), T0 + 2)
    assert [(t.kind, t.alert.ends_at) for t in transitions] == [("resolved", T0 + 2)]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"node_down_second": 5}, "alerts.toml: alerts.node_down_second: unknown key (known: check_seconds, "),
        ({"node_down_seconds": "soon"}, "alerts.toml: alerts.node_down_seconds: expected a number, got 'soon'"),
        ({"node_down_seconds": -1}, "alerts.toml: alerts.node_down_seconds: must be positive"),
        ({"nic_carrier_changes_min": 2.5}, "alerts.toml: alerts.nic_carrier_changes_min: expected an integer"),
        ({"nic_speed_min_ratio": 1.5}, "alerts.toml: alerts.nic_speed_min_ratio: must be in (0, 1]"),
        ({"nic_expected_speeds": {"eth0": "fast"}}, "alerts.toml: alerts.nic_expected_speeds.eth0: not a link rate"),
        ({"nic_expected_speeds": "50G"}, "alerts.toml: alerts.nic_expected_speeds: expected a table"),
        ({"thermal_reasons": ["hot"]}, "alerts.toml: alerts.thermal_reasons: unknown reason 'hot'"),
        ({"thermal_reasons": "hw_slowdown"}, "alerts.toml: alerts.thermal_reasons: expected a list"),
    ],
)
def test_alert_config_rejects_bad_values_in_one_line(table: dict[str, object], message: str) -> None:
    with pytest.raises(AlertConfigError) as caught:
        AlertConfig.from_mapping(table, source="alerts.toml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_alert_config_defaults_and_values() -> None:
    assert AlertConfig.from_mapping({}) == AlertConfig()
    config = AlertConfig.from_mapping(
        {"node_down_seconds": 30, "thermal_reasons": ["hw_slowdown"], "nvlink_expected_active_links": 18}, source="t"
    )
    assert config.node_down_seconds == 30.0
    assert config.thermal_mask == 0x08
    assert config.nvlink_expected_active_links == 18


def test_rules_benchmark_runs() -> None:
    """bench/alert_rules.py keeps working (its figures are read by people, not asserted)."""
    import json
    import subprocess
    import sys

    from tests.fakes.trees import REPO

    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "alert_rules.py"), "--reports", "40", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["observe_steady_seconds"] > 0
    assert result["parse_seconds"] > 0


def test_rules_on_reports_of_the_real_gpu_source(fake_nvml: Any, make_gpu_source: Any) -> None:
    """The fields and events as the agent fills them (through the fake NVML), not as this file
    crafts them: each hardware fault of an 8xA100 node raises its alert."""
    import time as wall

    from nodeagent.agent.sources.gpu import GpuSource
    from tests.fakes.nvml.state import a100_sxm4

    state = fake_nvml.load(a100_sxm4())
    gpu_source: GpuSource = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    config = AlertConfig(check_seconds=1, nvlink_check_seconds=1, thermal_sustain_seconds=1)
    rules = NodeRules("node-a", config)
    t = 0.0

    def tick() -> list[AlertSignal]:
        nonlocal t
        t += 1
        r = pb.NodeReport(node_id="node-a", time_unix_seconds=T0 + t)
        gpu_source.collect(r)
        return rules.observe(r)

    assert firing(tick()) == []
    state.gpus[2].links[5].state = 0
    state.gpus[0].links[1].replay += 50
    state.gpus[6].clock_reasons = HW_THERMAL
    state.inject_xid(4, 79)
    state.inject_double_bit_ecc(1)
    fake_nvml.write()
    raised: set[tuple[str, str, bool, str]] = set()
    deadline = wall.monotonic() + 5
    while len(raised) < 5 and wall.monotonic() < deadline:  # events come from NVML's event thread
        wall.sleep(0.05)
        raised.update(firing(tick()))
    assert raised == {
        ("NVLinkDown", "nvlink:gpu2:link5", True, "critical"),
        ("NVLinkErrors", "nvlink:gpu0:link1", True, "warning"),
        ("ThermalThrottling", "gpu:6", True, "warning"),
        ("XIDError", "gpu:4", True, "critical"),
        ("ECCUncorrectable", "gpu:1", True, "critical"),
    }
    state.gpus[3].lost = 1
    fake_nvml.write()
    assert firing(tick()) == [("GPULost", "gpu:3", True, "critical")]


def unresponsive(index: int, call: str = "nvmlDeviceGetUtilizationRates") -> pb.GpuSample:
    return pb.GpuSample(index=index, uuid=f"GPU-{index}", unresponsive=True, unresponsive_call=call)


def test_an_unresponsive_gpu_is_the_fault_not_the_node() -> None:
    rules = NodeRules("node-a", EVERY_REPORT)
    watch = NodeDownWatch(EVERY_REPORT)
    rules.observe(report(0, [gpu(0), gpu(3)]))
    signals = rules.observe(report(1, [gpu(0), unresponsive(3)]))
    assert firing(signals) == [("GPUUnresponsive", "gpu:3", True, "critical")]
    assert signals[0].annotations["call"] == "nvmlDeviceGetUtilizationRates"
    assert "nvmlDeviceGetUtilizationRates" in signals[0].annotations["summary"]
    # The node keeps reporting on time: no NodeDown, however long the GPU stays unresponsive.
    for t in range(2, 300, 10):
        assert firing(rules.observe(report(t, [gpu(0), unresponsive(3)]))) == []
        assert firing(watch.check({"node-a": T0 + t}, T0 + t)) == []
    assert of("GPUUnresponsive", rules.observe(report(301, [gpu(0), gpu(3)]))) == [
        ("GPUUnresponsive", "gpu:3", False, "warning")
    ]


def test_an_unresponsive_gpu_then_lost_with_xid_79_is_lost_naming_the_xid() -> None:
    rules = NodeRules("node-a", EVERY_REPORT)
    rules.observe(report(0, [gpu(0), gpu(3)]))
    rules.observe(report(1, [gpu(0), unresponsive(3)]))
    signals = rules.observe(report(2, [gpu(0), gpu(3, lost=True)], events=[xid(3, 79)]))
    assert brief(signals) == [
        ("XIDError", "gpu:3", True, "critical"),
        ("GPUUnresponsive", "gpu:3", False, "warning"),
        ("GPULost", "gpu:3", True, "critical"),
    ]
    lost = signals[-1]
    assert lost.annotations["xid"] == "79"
    assert "Xid 79 (fallen off the bus)" in lost.annotations["summary"]
