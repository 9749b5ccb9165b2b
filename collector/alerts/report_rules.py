"""Hardware and health alerts read straight from each node's reports.

``NodeRules`` (one per node) looks at every report: GPULost, GPUUnresponsive, NVLinkDown, NVLinkErrors,
GPUFabricUnhealthy, NICDegraded, XIDError, ECCUncorrectable, ThermalThrottling. ``NodeDownWatch`` checks the whole
fleet's last-report times for NodeDown. Both send a signal only when the verdict for an alert
instance is known and differs from what they sent last, so the alert book sees a few signals a
day, not one per instance per report. A verdict that cannot be known yet stays unsent: right
after a collector restart, an alert the book loaded as firing is resolved only once the rule has
seen its condition clear (a quiet period for counter alerts, an active link for NVLinkDown),
never merely because the rule has no memory.

Time is the report's own (``time_unix_seconds``), so replays of recorded traces are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.alerts.rule_state import NOT_FIRING, Burst, Counter, Instance, Sustained
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.wire.fabric import describe, fabric_problems
from nodeagent.v1 import nodeagent_pb2 as pb

GPU_LOST = "GPULost"
GPU_UNRESPONSIVE = "GPUUnresponsive"
# What an Xid that comes with a lost GPU says (NVIDIA's Xid catalogue), for GPULost's summary.
LOSS_XIDS = {"79": "fallen off the bus", "48": "double-bit ECC", "119": "GSP timeout", "120": "GSP error"}
NVLINK_DOWN = "NVLinkDown"
NVLINK_ERRORS = "NVLinkErrors"
FABRIC_UNHEALTHY = "GPUFabricUnhealthy"
NIC_DEGRADED = "NICDegraded"
XID_ERROR = "XIDError"
ECC_UNCORRECTABLE = "ECCUncorrectable"
THERMAL_THROTTLING = "ThermalThrottling"

WARNING = "warning"
CRITICAL = "critical"


class NodeRules:
    """The report-driven alerts of one node. ``observe`` checks O(GPUs + physical NICs) on one
    report per ``check_seconds``, O(NVLinks) on one per ``nvlink_check_seconds``; a check in the
    steady state is a few field reads and a comparison with what was sent last per instance."""

    def __init__(self, node_id: str, config: AlertConfig) -> None:
        self.node_id = node_id
        self.config = config
        self._thermal_mask = config.thermal_mask
        self._gpus: dict[int, _GpuState] = {}
        self._nics: dict[str, _NicState] = {}
        # Interfaces the node described as physical (NicInfo): only they are judged.
        self._physical: frozenset[str] = frozenset()
        # Where they sat in the last report (reports list NICs in a stable order).
        self._nic_slots: list[int] = []
        self._checked_at = float("-inf")
        self._links_checked_at = float("-inf")
        self._out: list[AlertSignal] = []

    def observe_info(self, info: pb.NodeInfo) -> None:
        """Topology (from a report's ``info`` or a stream's first message): which NICs to judge.
        Virtual ones (veth, bridges, docker) come and go with containers and are left alone."""
        self._physical = frozenset(nic.name for nic in info.nics if not nic.virtual)
        self._nic_slots = []

    def observe(self, report: pb.NodeReport) -> list[AlertSignal]:
        """The signals this report changes (usually none)."""
        now = report.time_unix_seconds
        if report.HasField("info"):
            self.observe_info(report.info)
        xids, dbe = _gpu_events(report.events) if report.events else (None, None)
        since = now - self._checked_at
        if 0 <= since < self.config.check_seconds and xids is None and dbe is None:  # since < 0: time went back
            return []
        self._checked_at = now
        since = now - self._links_checked_at
        check_links = since >= self.config.nvlink_check_seconds or since < 0
        if check_links:
            self._links_checked_at = now
        out = self._out = []
        gpus = report.gpus
        for gpu in gpus:
            index = gpu.index
            state = self._gpus.get(index)
            if state is None:
                state = self._gpus[index] = _GpuState(index, now)
            state.seen_at = now
            events = xids.get(index) if xids else None
            if events or state.xid.sent is not NOT_FIRING:
                self._xid(index, state, events, now)  # a lost GPU's last Xid (79: off the bus) counts too
            if gpu.lost:
                self._lost(gpu, state)
                continue  # a lost GPU's other values mean nothing
            if gpu.unresponsive:
                self._unresponsive(gpu, state)
                continue  # it sent no readings: nothing else to judge
            self._gpu(gpu, state, now, dbe.get(index, 0) if dbe else 0)
            if check_links and gpu.nvlinks:
                self._links(gpu, state, now)
        if gpus and len(gpus) < len(self._gpus):
            self._missing_gpus(now)
        if self._physical:
            for nic in self._physical_nics(report.nics):
                self._nic(nic, now)
        self._out = []
        return out

    # -- GPUs --

    def _lost(self, gpu: pb.GpuSample, state: _GpuState) -> None:
        if state.unresponsive.sent is not NOT_FIRING and state.unresponsive.changed(False):
            self._emit(state.unresponsive, False)  # lost says more
        # The Xid that came with the loss (79: fallen off the bus) is named; one arriving after the
        # alert fired updates it.
        xid = state.xid_codes[-1] if state.xid_codes else ""
        if state.lost.changed(True, f"lost:{xid}"):
            summary = f"GPU {gpu.index} is lost (NVML: GPU is lost)"
            if xid:
                summary += f" after Xid {xid}" + (f" ({LOSS_XIDS[xid]})" if xid in LOSS_XIDS else "")
            notes = {"summary": summary, "uuid": gpu.uuid, **({"xid": xid} if xid else {})}
            self._emit(state.lost, True, CRITICAL, notes)

    def _unresponsive(self, gpu: pb.GpuSample, state: _GpuState) -> None:
        """GPUUnresponsive: the agent's deadlines passed on this GPU; the node itself reports on time."""
        if state.unresponsive.changed(True, gpu.unresponsive_call):
            notes = {
                "summary": f"GPU {gpu.index} does not answer NVML ({gpu.unresponsive_call} overran); "
                "the node reports on time without its readings",
                "uuid": gpu.uuid,
                "call": gpu.unresponsive_call,
            }
            self._emit(state.unresponsive, True, CRITICAL, notes)

    def _missing_gpus(self, now: float) -> None:
        """GPUs seen before and absent from a report that has others: fallen off the bus."""
        for index, state in self._gpus.items():
            if state.seen_at != now and state.lost.changed(True, "missing"):
                self._emit(state.lost, True, CRITICAL, {"summary": f"GPU {index} is no longer reported by the node"})

    def _xid(self, index: int, state: _GpuState, xids: list[pb.Event] | None, now: float) -> None:
        quiet = self.config.xid_quiet_seconds
        if xids:
            if now - state.xid_burst.last_increase_at >= quiet:
                state.xid_codes, state.xid_critical = [], False  # a new burst
            state.xid_burst.add(len(xids), now, quiet)
            state.xid_codes = [*state.xid_codes, *(e.attributes.get("xid", "?") for e in xids)][-8:]
            state.xid_critical = state.xid_critical or any(e.severity == CRITICAL for e in xids)
        verdict = state.xid_burst.verdict(now, 1, quiet)
        if verdict is False:
            state.xid_codes, state.xid_critical = [], False
        severity = CRITICAL if state.xid_critical else WARNING
        if state.xid.changed(verdict, severity):
            notes = {"summary": f"Xid errors on GPU {index}", "xids": ",".join(state.xid_codes)}
            self._emit(state.xid, verdict is True, severity, notes)

    def _gpu(self, gpu: pb.GpuSample, state: _GpuState, now: float, dbe: int) -> None:
        config = self.config
        if state.lost.sent is not NOT_FIRING and state.lost.changed(False):
            self._emit(state.lost, False)
        if state.unresponsive.sent is not NOT_FIRING and state.unresponsive.changed(False):
            self._emit(state.unresponsive, False)

        ecc = gpu.ecc_uncorrected_volatile_total if gpu.HasField("ecc_uncorrected_volatile_total") else None
        grew = state.ecc_counter.increase(ecc) + dbe
        if grew or state.ecc.sent is not NOT_FIRING:
            state.ecc_burst.add(grew, now, config.ecc_quiet_seconds)
            verdict = state.ecc_burst.verdict(now, 1, config.ecc_quiet_seconds)
            if state.ecc.changed(verdict):
                notes = {"summary": f"uncorrectable ECC errors on GPU {gpu.index}"}
                notes["errors_in_burst"] = str(state.ecc_burst.accumulated)
                self._emit(state.ecc, verdict is True, CRITICAL, notes)

        if gpu.HasField("fabric"):
            self._fabric(gpu, state)

        if gpu.HasField("clock_event_reasons"):
            throttled = bool(gpu.clock_event_reasons & self._thermal_mask)
            if throttled or state.thermal.sent is not NOT_FIRING:
                verdict = state.heat.verdict(
                    throttled, now, config.thermal_sustain_seconds, config.thermal_clear_seconds
                )
                if state.thermal.changed(verdict):
                    self._emit(state.thermal, verdict is True, WARNING, _thermal_notes(gpu))

    def _fabric(self, gpu: pb.GpuSample, state: _GpuState) -> None:
        """Fires while the GPU has left the NVLink fabric (not registered, registration failed) or
        the fabric says it is unhealthy or degraded; the reason is the worst problem, and a new
        reason is sent again. A GPU that reports no fabric (not fabric-attached) never gets here."""
        problems = fabric_problems(gpu.fabric)
        reason = problems[0] if problems else ""
        if state.fabric.changed(bool(problems), reason):
            notes = {
                "summary": f"GPU {gpu.index} NVLink fabric: {describe(gpu.fabric)}",
                "problems": ",".join(problems),
                "state": gpu.fabric.state,
                "cluster_uuid": gpu.fabric.cluster_uuid,
                "clique_id": str(gpu.fabric.clique_id),
            }
            self._emit(state.fabric, bool(problems), CRITICAL, notes)

    def _links(self, gpu: pb.GpuSample, state: _GpuState, now: float) -> None:
        """The hot loop: a handful of field reads per link, more only when something changed."""
        expected_by_config = self.config.nvlink_expected_active_links
        links = state.links
        for link in gpu.nvlinks:
            number = link.link
            ls = links.get(number)
            if ls is None:
                ls = links[number] = _LinkState(gpu.index, number, now)
            if link.HasField("active"):
                if link.active:
                    ls.expected = True
                    if ls.down.sent is not NOT_FIRING and ls.down.changed(False):
                        self._emit(ls.down, False)
                elif (ls.expected or number < expected_by_config) and ls.down.changed(True):
                    self._emit(
                        ls.down, True, CRITICAL, {"summary": f"NVLink {number} of GPU {gpu.index} is not active"}
                    )
            errors = link.replay_errors_total + link.crc_flit_errors_total + link.crc_data_errors_total
            grew = ls.error_counter.increase(errors)
            regrew = ls.recovery_counter.increase(link.recovery_errors_total)
            if grew or regrew or ls.errors.sent is not NOT_FIRING:
                self._link_errors(ls, grew, regrew, now)

    def _link_errors(self, ls: _LinkState, grew: int, regrew: int, now: float) -> None:
        config = self.config
        quiet = config.nvlink_errors_quiet_seconds
        ls.error_burst.add(grew, now, quiet)
        ls.recovery_burst.add(regrew, now, quiet)
        errors = ls.error_burst.verdict(now, config.nvlink_errors_min_increase, quiet)
        recovery = ls.recovery_burst.verdict(now, config.nvlink_recovery_errors_min_increase, quiet)
        verdict = True if (errors or recovery) else (None if errors is None or recovery is None else False)
        if ls.errors.changed(verdict):
            notes = {
                "summary": f"NVLink {ls.labels['link']} of GPU {ls.labels['gpu']} is counting errors",
                "errors_in_burst": str(ls.error_burst.accumulated),
                "recovery_errors_in_burst": str(ls.recovery_burst.accumulated),
            }
            self._emit(ls.errors, verdict is True, WARNING, notes)

    # -- NICs --

    def _physical_nics(self, nics: Sequence[pb.NicSample]) -> list[pb.NicSample]:
        """The report's physical NICs, found at last report's positions when they are still there."""
        count, physical = len(nics), self._physical
        found = [nics[i] for i in self._nic_slots if i < count]
        if len(found) == len(self._nic_slots) == len(physical) and all(nic.name in physical for nic in found):
            return found
        self._nic_slots = [i for i, nic in enumerate(nics) if nic.name in physical]
        return [nics[i] for i in self._nic_slots]

    def _nic(self, nic: pb.NicSample, now: float) -> None:
        name, config = nic.name, self.config
        state = self._nics.get(name)
        if state is None:
            state = self._nics[name] = _NicState(name, now)
        up = nic.operstate == "up" and (not nic.HasField("carrier") or nic.carrier)
        speed = nic.speed_bytes_per_second if nic.HasField("speed_bytes_per_second") else None
        if not (up and speed == state.last_speed and state.speed.sent is NOT_FIRING):
            state.last_speed = speed if up else None
            self._nic_speed(state, name, up, speed)
        if nic.HasField("carrier_changes_total"):
            quiet = config.nic_flap_quiet_seconds
            grew = state.carrier_counter.increase(nic.carrier_changes_total)
            if grew or state.flaps.sent is not NOT_FIRING:
                state.flap_burst.add(grew, now, quiet)
                verdict = state.flap_burst.verdict(now, config.nic_carrier_changes_min, quiet)
                if state.flaps.changed(verdict):
                    notes = {"summary": f"{name} keeps losing its carrier"}
                    notes["carrier_changes_in_burst"] = str(state.flap_burst.accumulated)
                    self._emit(state.flaps, verdict is True, WARNING, notes)

    def _nic_speed(self, state: _NicState, name: str, up: bool, speed: float | None) -> None:
        """Degraded: down, or slower than configured or than the fastest it was seen running."""
        reference = self.config.nic_expected_speeds.get(name)
        if reference is None:
            if up and speed is not None and (state.reference is None or speed > state.reference):
                state.reference = speed
            reference = state.reference
        if reference is None:
            return  # never seen up, nothing configured: an unused port
        reason = "speed" if up else "down"
        verdict = (None if speed is None else speed < reference * self.config.nic_speed_min_ratio) if up else True
        if state.speed.changed(verdict, reason):
            state.speed.labels = {"nic": name, "reason": reason}
            notes = {
                "summary": f"{name} runs below its link speed" if up else f"{name} is down",
                "speed_bytes_per_second": "" if speed is None else f"{speed:.0f}",
                "expected_bytes_per_second": f"{reference:.0f}",
            }
            self._emit(state.speed, verdict is True, WARNING, notes)

    def _emit(
        self, alert: Instance, firing: bool, severity: str = WARNING, annotations: Mapping[str, str] | None = None
    ) -> None:
        if not firing:  # a resolve carries only the identity
            self._out.append(AlertSignal(alert.name, self.node_id, alert.key, False))
            return
        labels = dict(alert.labels)
        self._out.append(AlertSignal(alert.name, self.node_id, alert.key, True, severity, labels, annotations or {}))


# -- per-instance state --


class _GpuState:
    __slots__ = (
        "ecc", "ecc_burst", "ecc_counter", "fabric", "heat", "links", "lost", "seen_at", "thermal", "unresponsive",
        "xid", "xid_burst", "xid_codes", "xid_critical",
    )  # fmt: skip

    def __init__(self, index: int, now: float) -> None:
        key, labels = f"gpu:{index}", {"gpu": str(index)}
        self.seen_at = now
        self.lost = Instance(GPU_LOST, key, labels)
        self.unresponsive = Instance(GPU_UNRESPONSIVE, key, labels)
        self.xid = Instance(XID_ERROR, key, labels)
        self.xid_burst = Burst(now)
        self.xid_codes: list[str] = []
        self.xid_critical = False
        self.ecc = Instance(ECC_UNCORRECTABLE, key, labels)
        self.ecc_burst = Burst(now)
        self.ecc_counter = Counter()
        self.thermal = Instance(THERMAL_THROTTLING, key, labels)
        self.heat = Sustained()
        self.fabric = Instance(FABRIC_UNHEALTHY, key, labels)
        self.links: dict[int, _LinkState] = {}


class _LinkState:
    __slots__ = (
        "down", "error_burst", "error_counter", "errors", "expected", "labels", "recovery_burst", "recovery_counter",
    )  # fmt: skip

    def __init__(self, gpu: int, link: int, now: float) -> None:
        key = f"nvlink:gpu{gpu}:link{link}"
        self.labels = {"gpu": str(gpu), "link": str(link)}
        # Seen active once: from then on it must stay active.
        self.expected = False
        self.down = Instance(NVLINK_DOWN, key, self.labels)
        self.errors = Instance(NVLINK_ERRORS, key, self.labels)
        self.error_counter = Counter()
        self.recovery_counter = Counter()
        self.error_burst = Burst(now)
        self.recovery_burst = Burst(now)


class _NicState:
    __slots__ = ("carrier_counter", "flap_burst", "flaps", "last_speed", "reference", "speed")

    def __init__(self, name: str, now: float) -> None:
        self.speed = Instance(NIC_DEGRADED, f"nic:{name}:speed", {"nic": name, "reason": "speed"})
        self.flaps = Instance(NIC_DEGRADED, f"nic:{name}:carrier", {"nic": name, "reason": "flapping"})
        # The fastest speed seen while up: what the node was rented with, unless configured.
        self.reference: float | None = None
        self.last_speed: float | None = None
        self.carrier_counter = Counter()
        self.flap_burst = Burst(now)


def _gpu_events(events: Sequence[pb.Event]) -> tuple[dict[int, list[pb.Event]] | None, dict[int, int] | None]:
    """Xid events and double-bit ECC counts per GPU index (subject ``gpu:N``)."""
    xids: dict[int, list[pb.Event]] | None = None
    dbe: dict[int, int] | None = None
    for event in events:
        kind = event.kind
        if kind not in {"xid", "ecc_double_bit"} or not event.subject.startswith("gpu:"):
            continue
        try:
            index = int(event.subject[4:])
        except ValueError:
            continue
        if kind == "xid":
            xids = xids if xids is not None else {}
            xids.setdefault(index, []).append(event)
        else:
            dbe = dbe if dbe is not None else {}
            dbe[index] = dbe.get(index, 0) + 1
    return xids, dbe


def _thermal_notes(gpu: pb.GpuSample) -> dict[str, str]:
    notes = {"summary": f"GPU {gpu.index} clocks held down by heat", "reasons": ",".join(gpu.clock_event_reason_names)}
    if gpu.HasField("temperature_celsius"):
        notes["temperature_celsius"] = f"{gpu.temperature_celsius:.0f}"
    return notes
