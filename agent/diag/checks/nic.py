"""NICs: the expected interfaces present and up, their speed against what was rented (a 50 Gb/s
rental must not come up at 25), MTU, carrier flaps, and error and drop counters.

The NICs checked are the expected ones when the profile names them; otherwise the node's
physical NICs (and bonds) that are up. A physical NIC that is down and not expected is listed
as skipped: unused ports are common.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import NODE, CheckResult, failed, group, passed, skipped, summarize, warned
from nodeagent.core.quantities.rates import delta
from nodeagent.core.quantities.units import format_bits
from nodeagent.v1 import nodeagent_pb2 as pb

DROP_RATIO_LIMIT = 0.01  # dropped packets per packet since boot above which to warn
_WIRE_HINT = "check the cable, transceiver and switch port (`ethtool IFACE`, `ethtool -S IFACE`)"


def run(ctx: DiagContext) -> list[CheckResult]:
    expect = ctx.profile.nic
    observation = ctx.observation
    firsts = {n.name: n for n in observation.first.nics}
    lasts = {n.name: n for n in observation.last.nics}
    nics = {i.name: _Nic(i, lasts[i.name], firsts.get(i.name)) for i in observation.info.nics if i.name in lasts}
    results: list[CheckResult] = []
    if expect.names:
        checked = [nics[name] for name in expect.names if name in nics]
        results += _present(expect.names, nics)
        results += _state(checked)
    else:
        physical = [n for n in nics.values() if not n.info.virtual or n.info.kind == "bond"]
        checked = [n for n in physical if n.up]
        down = [n.name for n in physical if not n.up]
        if down:
            reason = "not expected to be up (a profile's [nic] names would require them)"
            results.append(skipped("nic.state", _group(down), reason, ", ".join(down) + " down"))
        if not checked:
            results.append(skipped("nic.state", NODE, "no physical NIC is up", "none up"))
    results += _speed(checked, expect.speed_bytes_per_second, bool(expect.names), ctx.profile.name)
    if checked:
        results += _mtu(checked, expect.min_mtu)
        results += _flaps(checked, expect.max_carrier_changes, observation.window_seconds)
        results += _errors(checked)
    return results


@dataclass(frozen=True, slots=True)
class _Nic:
    info: pb.NicInfo
    last: pb.NicSample
    first: pb.NicSample | None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def up(self) -> bool:
        return self.last.operstate == "up" and not (self.last.HasField("carrier") and not self.last.carrier)

    @property
    def speed(self) -> float | None:
        if self.last.HasField("speed_bytes_per_second"):
            return self.last.speed_bytes_per_second
        return self.info.speed_bytes_per_second if self.info.HasField("speed_bytes_per_second") else None


def _present(names: Sequence[str], nics: dict[str, _Nic]) -> list[CheckResult]:
    hint = "the interface does not exist: check the driver (`ip link`), the PCI device, the rental"
    problems = [failed("nic.present", f"nic:{n}", "missing", "present", hint) for n in names if n not in nics]
    return summarize("nic.present", _group(names), problems, "present")


def _state(nics: Sequence[_Nic]) -> list[CheckResult]:
    problems = []
    for nic in nics:
        if nic.up:
            continue
        state = nic.last.operstate or "unknown"
        if nic.last.HasField("carrier") and not nic.last.carrier:
            state += ", no carrier"
        hint = f"the link is down: {_WIRE_HINT}; `ip link set {nic.name} up`"
        problems.append(failed("nic.state", f"nic:{nic.name}", state, "up", hint))
    return summarize("nic.state", _group([n.name for n in nics]), problems, "up", "up") if nics else []


def _speed(nics: Sequence[_Nic], expected: float | None, named: bool, profile: str | None) -> list[CheckResult]:
    known = [(n, n.speed) for n in nics if n.up]
    if expected is None:
        shown = ", ".join(f"{n.name} {format_bits(s)}" for n, s in known) or "-"
        missing = f"profile {profile} sets no [nic] speed" if profile else "no profile with a [nic] speed"
        return [skipped("nic.speed", NODE, f"no expected speed: {missing} (or --expect-nic-speed)", shown)]
    want = f"≥ {format_bits(expected)}"
    slow_hint = f"the link came up slower than rented: {_WIRE_HINT}; the switch port's speed"
    unknown_hint = "the kernel reports no speed (a virtual NIC?): measure with iperf3 against a known peer"
    if named:
        problems: list[CheckResult] = []
        for nic, speed in known:
            if speed is None:
                problems.append(warned("nic.speed", f"nic:{nic.name}", "unknown", want, unknown_hint))
            elif speed < expected:
                problems.append(failed("nic.speed", f"nic:{nic.name}", format_bits(speed), want, slow_hint))
        shown = ", ".join(format_bits(s) for _, s in known)
        return summarize("nic.speed", _group([n.name for n, _ in known]), problems, shown, want) if known else []
    # No names: the rented speed must be there on some NIC (a node also has slow management ports).
    rated = [(n, s) for n, s in known if s is not None]
    if not rated:
        if not known:
            return [failed("nic.speed", NODE, "no NIC up", want, "no physical NIC is up: check `ip link`")]
        return [warned("nic.speed", _group([n.name for n, _ in known]), "unknown", want, unknown_hint)]
    fastest, speed = max(rated, key=lambda r: r[1])
    value = f"{fastest.name} {format_bits(speed)}"
    if speed < expected:
        return [failed("nic.speed", f"nic:{fastest.name}", format_bits(speed), want, slow_hint + " (the fastest NIC)")]
    return [passed("nic.speed", f"nic:{fastest.name}", value, want)]


def _mtu(nics: Sequence[_Nic], minimum: int | None) -> list[CheckResult]:
    mtus = {n.name: n.last.mtu for n in nics if n.last.HasField("mtu")}
    shown = ", ".join(f"{name} {mtu}" for name, mtu in mtus.items()) or "-"
    if minimum is None:
        return [
            skipped("nic.mtu", _group([n.name for n in nics]), "no expected MTU (a profile's [nic] min_mtu)", shown)
        ]
    hint = "a smaller MTU than the network's costs throughput: `ip link set IFACE mtu N` and check the switch"
    problems = [
        warned("nic.mtu", f"nic:{name}", str(mtu), f"≥ {minimum}", hint) for name, mtu in mtus.items() if mtu < minimum
    ]
    return summarize("nic.mtu", _group([n.name for n in nics]), problems, shown, f"≥ {minimum}")


def _flaps(nics: Sequence[_Nic], limit: int, window_seconds: float) -> list[CheckResult]:
    problems = []
    for nic in nics:
        if not nic.last.HasField("carrier_changes_total"):
            continue
        total = nic.last.carrier_changes_total
        before = nic.first.carrier_changes_total if nic.first and nic.first.HasField("carrier_changes_total") else total
        hint = f"the link goes down and up: {_WIRE_HINT}"
        if grown := delta(before, total):
            value = f"+{grown} carrier changes during the {window_seconds:.1f} s check"
            problems.append(warned("nic.flaps", f"nic:{nic.name}", value, "no change", hint))
        elif total > limit:
            problems.append(warned("nic.flaps", f"nic:{nic.name}", f"{total} since boot", f"≤ {limit}", hint))
    return summarize("nic.flaps", _group([n.name for n in nics]), problems, "stable", f"≤ {limit} carrier changes")


def _errors(nics: Sequence[_Nic]) -> list[CheckResult]:
    problems = []
    for nic in nics:
        s = nic.last
        errors = s.rx_errors_total + s.tx_errors_total
        dropped = s.rx_dropped_total + s.tx_dropped_total
        packets = s.rx_packets_total + s.tx_packets_total
        subject = f"nic:{nic.name}"
        if errors:
            value = f"rx_errors {s.rx_errors_total}, tx_errors {s.tx_errors_total}"
            problems.append(warned("nic.errors", subject, value, "0", f"errors on the wire: {_WIRE_HINT}"))
        elif packets and dropped / packets > DROP_RATIO_LIMIT:
            value = f"{dropped / packets:.1%} of packets dropped ({dropped})"
            hint = "drops: ring buffers too small or a host too busy to receive (`ethtool -g`, `ethtool -S`)"
            problems.append(warned("nic.errors", subject, value, f"≤ {DROP_RATIO_LIMIT:.0%}", hint))
    return summarize("nic.errors", _group([n.name for n in nics]), problems, "no errors", "0")


def _group(names: Sequence[str]) -> str:
    return group([f"nic:{name}" for name in names], "NIC")
