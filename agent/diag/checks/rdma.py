"""RDMA ports (InfiniBand, RoCE): ACTIVE and LinkUp at the expected rate, and error counters that
grow while diag watches.

A port that is not up fails when the profile expects RDMA ports (by count or by device) and
warns otherwise: a node may have an unused port.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import NODE, CheckResult, failed, group, passed, skipped, summarize, warned
from nodeagent.agent.diag.profile import RdmaExpectations
from nodeagent.core.quantities.rates import delta
from nodeagent.core.quantities.units import format_bits
from nodeagent.v1 import nodeagent_pb2 as pb

STATE_ACTIVE = 4  # sysfs `state` "4: ACTIVE"
PHYS_LINK_UP = 5  # sysfs `phys_state` "5: LinkUp"
# Counters of counters/ whose growth during the check means a link in trouble now.
ERROR_COUNTERS = (
    "link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors",
)  # fmt: skip
_PHYS_HINTS = {
    "Polling": "the port is looking for a peer: the cable is unplugged or faulty, or the switch port is down",
    "Disabled": "the port is disabled: enable it (`ibportstate`, the switch, or the NIC firmware)",
    "Sleep": "the port is asleep: check the cable and the switch port",
    "LinkErrorRecovery": "the link keeps retraining: reseat or replace the cable",
}
_STATE_HINTS = {
    "DOWN": "the port is down: check the cable and the switch port",
    "INIT": "the link is up but no subnet manager has configured the port: check opensm/UFM",
    "ARMED": "the subnet manager has not finished bringing the port up: check opensm/UFM",
}


def run(ctx: DiagContext) -> list[CheckResult]:
    expect = ctx.profile.rdma
    observation = ctx.observation
    infos = {(p.device, p.port): p for p in observation.info.rdma_ports}
    firsts = {(p.device, p.port): p for p in observation.first.rdma_ports}
    ports = [p for p in observation.last.rdma_ports if (p.device, p.port) in infos]
    expected = bool(expect.ports or expect.devices or expect.rate_bytes_per_second or expect.link_layer)
    if not ports:
        if expected:
            hint = "no RDMA device: check the driver (`ibv_devices`, `ibstat`), the HCA, the rental"
            return [failed("rdma.ports", NODE, "no RDMA ports", _expected_text(expect), hint)]
        return [skipped("rdma.ports", NODE, "no RDMA ports on this node")]
    results = _present(ports, expect)
    results += _state(ports, expect, expected)
    results += _link_layer(ports, infos, expect.link_layer)
    results += _rate(ports, expect.rate_bytes_per_second)
    results += _errors(ports, firsts, observation.window_seconds)
    return results


def _present(ports: Sequence[pb.RdmaPortSample], expect: RdmaExpectations) -> list[CheckResult]:
    results: list[CheckResult] = []
    devices = {p.device for p in ports}
    hint = "the RDMA device is missing: check the driver (`ibv_devices`), the HCA, the rental"
    results += [
        failed("rdma.present", f"rdma:{d}", "missing", "present", hint) for d in expect.devices if d not in devices
    ]
    if expect.ports is not None:
        active = sum(1 for p in ports if _up(p))
        value = f"{active} of {len(ports)} ports up"
        if active < expect.ports:
            hint = "fewer RDMA ports up than rented: see the ports below"
            results.append(failed("rdma.count", NODE, value, f"{expect.ports} up", hint))
        else:
            results.append(passed("rdma.count", NODE, value, f"{expect.ports} up"))
    return results


def _state(ports: Sequence[pb.RdmaPortSample], expect: RdmaExpectations, expected: bool) -> list[CheckResult]:
    active = sum(1 for p in ports if _up(p))
    short = expect.ports is not None and active < expect.ports
    problems = []
    for port in ports:
        if _up(port):
            continue
        value = f"{port.state or '?'} / {port.phys_state or '?'}"
        hint = _PHYS_HINTS.get(port.phys_state) or _STATE_HINTS.get(port.state) or "the port is not up"
        must = port.device in expect.devices or short or (expected and not expect.devices and expect.ports is None)
        make = failed if must else warned
        problems.append(make("rdma.state", f"rdma:{port.device}/{port.port}", value, "ACTIVE / LinkUp", hint))
    return summarize("rdma.state", _group(ports), problems, "ACTIVE / LinkUp", "ACTIVE / LinkUp")


def _link_layer(
    ports: Sequence[pb.RdmaPortSample], infos: dict[tuple[str, int], pb.RdmaPortInfo], wanted: str | None
) -> list[CheckResult]:
    up = [p for p in ports if _up(p)]
    if wanted is None or not up:
        return []
    problems = []
    for port in up:
        layer = infos[(port.device, port.port)].link_layer or "unknown"
        if layer != wanted:
            hint = f"the port runs {layer}, not {wanted}: check the port type (`mlxconfig ... LINK_TYPE_P1`)"
            problems.append(failed("rdma.link_layer", f"rdma:{port.device}/{port.port}", layer, wanted, hint))
    return summarize("rdma.link_layer", _group(up), problems, wanted, wanted)


def _rate(ports: Sequence[pb.RdmaPortSample], wanted: float | None) -> list[CheckResult]:
    up = [p for p in ports if _up(p)]
    if not up:
        return []
    rates = {(p.device, p.port): p.rate_bytes_per_second for p in up if p.HasField("rate_bytes_per_second")}
    shown = ", ".join(sorted({format_bits(r) for r in rates.values()})) or "-"
    if wanted is None:
        return [skipped("rdma.rate", _group(up), "no expected rate (a profile's [rdma] rate)", shown)]
    want = f"≥ {format_bits(wanted)}"
    hint = "the port trained slower than rented: check the cable, transceiver and switch port (`ibstat`)"
    problems = [
        failed("rdma.rate", f"rdma:{device}/{port}", format_bits(rate), want, hint)
        for (device, port), rate in sorted(rates.items())
        if rate < wanted * 0.99
    ]
    return summarize("rdma.rate", _group(up), problems, shown, want)


def _errors(
    ports: Sequence[pb.RdmaPortSample], firsts: dict[tuple[str, int], pb.RdmaPortSample], window_seconds: float
) -> list[CheckResult]:
    problems = []
    for port in ports:
        before = firsts.get((port.device, port.port))
        if before is None:
            continue
        grown = {
            name: n
            for name in ERROR_COUNTERS
            if name in port.counters and name in before.counters
            and (n := delta(before.counters[name], port.counters[name]))
        }  # fmt: skip
        if grown:
            value = ", ".join(f"{name} +{n}" for name, n in grown.items())
            value += f" during the {window_seconds:.1f} s check"
            hint = "link errors happening now: reseat or replace the cable, check the switch port (`ibqueryerrors`)"
            problems.append(warned("rdma.errors", f"rdma:{port.device}/{port.port}", value, "no growth", hint))
    return summarize("rdma.errors", _group(ports), problems, "no growth", "no growth")


def _up(port: pb.RdmaPortSample) -> bool:
    return port.state_id == STATE_ACTIVE and port.phys_state_id == PHYS_LINK_UP


def _expected_text(expect: RdmaExpectations) -> str:
    if expect.ports is not None:
        return f"{expect.ports} ports up"
    if expect.devices:
        return ", ".join(expect.devices)
    return "RDMA ports"


def _group(ports: Sequence[pb.RdmaPortSample]) -> str:
    return group([f"rdma:{p.device}/{p.port}" for p in ports], "port")
