"""Node-wide evidence for a cause (step 3 of the rule chain: network, storage, cpu), from the
counters of two window steps.

Each time the detector's window advances, the node's counters at that report are compared with
those at the previous step (rates through ``nodeagent.core.quantities.rates``: a counter that went down gives no
rate). The result says which node-wide data causes hold (network, storage, cpu) and keeps the
values that decided them. Host-to-device is per GPU and decided in ``causes``.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.quantities.rates import delta, disk_busy_ratio, rate, share_of_increase
from nodeagent.v1 import nodeagent_pb2 as pb

_MIN_READS_PER_SECOND_FOR_BASELINE = 10.0


@dataclass(frozen=True, slots=True)
class NodeEvidence:
    network: bool = False
    storage: bool = False
    cpu: bool = False
    # Bytes per second coming in over NICs and RDMA ports, and read from disks.
    network_rx_bytes_per_second: float | None = None
    disk_read_bytes_per_second: float | None = None
    # The values behind the flags, by name (``network_*``, ``storage_*``, ``cpu_*``).
    values: dict[str, float | str] = field(default_factory=dict)
    # The network flag came from a flat receive plateau (no link at its capacity), and the cpu
    # flag from busy or saturated cores (not from CPU pressure alone): ``causes`` orders them.
    network_plateau: bool = False
    cpu_saturated: bool = False

    # cause -> its values, made once per step and shared by the GPUs' verdicts (read-only there).
    _by_cause: dict[str, dict[str, float | str]] = field(default_factory=dict, compare=False, repr=False)

    def for_cause(self, cause: str) -> dict[str, float | str]:
        """The values that name ``cause`` (all of them for ``unknown``: nothing saturated)."""
        found = self._by_cause.get(cause)
        if found is None:
            prefix = cause + "_"
            found = (
                dict(self.values)
                if cause == "unknown"
                else {k: v for k, v in self.values.items() if k.startswith(prefix)}
            )
            self._by_cause[cause] = found
        return found


EMPTY = NodeEvidence()


@dataclass(slots=True)
class _Counters:
    time: float
    nics: dict[str, tuple[int, int]]
    rdma: dict[str, tuple[int, int]]
    disks: dict[str, tuple[int, int, int, int]]  # reads, read bytes, read ms, io ms
    cpu: tuple[float, float] | None  # busy seconds, all seconds
    cpu_some_us: int | None
    io_some_us: int | None


class NodeEvidenceTracker:
    def __init__(self, config: DetectorConfig) -> None:
        self.config = config
        self._info = pb.NodeInfo()
        self._virtual: set[str] = set()
        self._nominal: set[str] = set()
        self._previous: _Counters | None = None
        self._await_baseline: dict[str, float] = {}
        # Per-core CPU: the last snapshot (time, {core: (busy, all)}) and what it showed.
        self._cores: tuple[float, dict[str, tuple[float, float]]] | None = None
        self._saturated_cores: int | None = None
        self._max_core_busy: float | None = None
        self._cores_time = -math.inf
        # Per link, the (receive, transmit) bytes per second of the window's last steps.
        self._link_rates: dict[str, deque[tuple[float, float]]] = {}

    def learn(self, info: pb.NodeInfo) -> None:
        self._info = info
        # A virtual NIC (veth, bond, VLAN, a cloud's virtio without speed) counts where its rate is
        # known, from the configuration or the agent (--link-speed); loopback never leaves the node.
        virtual = {n.name for n in info.nics if n.virtual or n.kind not in ("", "physical")}
        self._virtual = {
            n.name
            for n in info.nics
            if n.name in virtual and (n.kind == "loopback" or self._capacity(n.name, "nic") is None)
        }
        # The links a receive plateau can name: virtual NICs that count. Their speed is nominal
        # (a veth says 10 Gb/s, a virtio NIC what the hypervisor likes; nothing enforces it), so a
        # cap lies elsewhere — a shaper, the cloud's limit, the store. A physical port's rate is
        # what it negotiated, and a flat rate far below it is as likely a loader's own pace (a
        # software-bound pipeline reading steadily) as a store's cap: there the operator gives
        # the cap (link_capacity_bytes_per_second) and the share rule decides.
        self._nominal = virtual - self._virtual

    def observe_cores(self, report: pb.NodeReport) -> None:
        """Per-core CPU, at most once per window step (it is a large part of a report)."""
        t = report.time_unix_seconds
        if not report.host.cpus or (self._cores is not None and t - self._cores[0] < self.config.evaluate_seconds):
            return
        now = {c.cpu: (_busy(c), _all(c)) for c in report.host.cpus}
        if self._cores is not None:
            before = self._cores[1]
            shares = []
            for cpu, (busy, total) in now.items():
                old = before.get(cpu)
                share = share_of_increase((old[0], busy), (old[1], total)) if old is not None else None
                if share is not None:
                    shares.append(share)
            if shares:
                self._saturated_cores = sum(1 for s in shares if s >= self.config.core_saturated_ratio)
                self._max_core_busy = max(shares)
                self._cores_time = t
        self._cores = (t, now)

    def step(self, report: pb.NodeReport, assigned_gpus: int) -> NodeEvidence:
        """Evidence over the interval since the previous step (EMPTY on the first)."""
        now = self._counters(report)
        before, self._previous = self._previous, now
        if before is None or now.time <= before.time:
            return EMPTY
        seconds = now.time - before.time
        values: dict[str, float | str] = {}
        network, rx_total = self._network(before, now, seconds, values)
        plateau = not network and self._plateau(values)
        storage, read_total = self._storage(before, now, seconds, values)
        cpu, cpu_saturated = self._cpu(before, now, seconds, assigned_gpus, values)
        return NodeEvidence(
            network or plateau,
            storage,
            cpu,
            rx_total,
            read_total,
            values,
            network_plateau=plateau,
            cpu_saturated=cpu_saturated,
        )

    # ---- counters ------------------------------------------------------------------------

    def _counters(self, r: pb.NodeReport) -> _Counters:
        host = r.host
        cpu = (_busy(host.cpu_total), _all(host.cpu_total)) if host.HasField("cpu_total") else None
        return _Counters(
            time=r.time_unix_seconds,
            nics={n.name: (n.rx_bytes_total, n.tx_bytes_total) for n in r.nics if n.name not in self._virtual},
            rdma={
                f"{p.device}/{p.port}": (p.rx_bytes_total, p.tx_bytes_total)
                for p in r.rdma_ports
                if p.HasField("rx_bytes_total") and p.HasField("tx_bytes_total") and not _data_saturated(p)
            },
            disks={
                d.name: (
                    d.reads_completed_total,
                    d.read_bytes_total,
                    d.read_time_milliseconds_total,
                    d.io_time_milliseconds_total,
                )
                for d in r.disks
            },
            cpu=cpu,
            cpu_some_us=host.pressure_cpu.some_total_microseconds if host.HasField("pressure_cpu") else None,
            io_some_us=host.pressure_io.some_total_microseconds if host.HasField("pressure_io") else None,
        )

    # ---- network ---------------------------------------------------------------------------

    def _network(
        self, before: _Counters, now: _Counters, seconds: float, values: dict[str, float | str]
    ) -> tuple[bool, float | None]:
        config = self.config
        best: tuple[float, str, float, float] | None = None
        total: float | None = None
        flagged = False
        links = [(name, "nic", v) for name, v in now.nics.items()] + [(n, "rdma", v) for n, v in now.rdma.items()]
        rated: dict[str, deque[tuple[float, float]]] = {}
        steps = max(config.window_steps, config.network_plateau_steps)
        for name, kind, (rx_now, tx_now) in links:
            old = (before.nics if kind == "nic" else before.rdma).get(name)
            if old is None:
                continue
            rx, tx = rate(old[0], rx_now, seconds), rate(old[1], tx_now, seconds)
            if rx is None or tx is None:
                continue  # a reset counter: the link's plateau starts over
            capacity = self._capacity(name, kind)
            if capacity is not None and max(rx, tx) > capacity * config.link_overrun_factor:
                values["network_bad_reading"] = name  # faster than the link can carry: no rate
                continue
            if name in self._nominal:
                history = self._link_rates.get(name) or deque(maxlen=steps)
                history.append((rx, tx))
                rated[name] = history
            total = rx if total is None else total + rx
            if capacity is None:
                continue
            share = rx / capacity
            if best is None or share > best[0]:
                best = (share, name, rx, tx)
            if share >= config.network_link_ratio and rx >= config.network_rx_tx_factor * tx:
                flagged = True
        if best is not None:
            values["network_rx_link_ratio"] = round(best[0], 4)
            values["network_link"] = best[1]
            values["network_rx_bytes_per_second"] = round(best[2])
            values["network_tx_bytes_per_second"] = round(best[3])
        self._link_rates = rated
        return flagged, total

    def _plateau(self, values: dict[str, float | str]) -> bool:
        """A link receiving at a flat rate over the window's last steps, far above its noise and its
        transmit: the cap of a remote store or of a link whose rate nobody gave (a loader that could
        take more would take more as soon as it could; a capped one takes the cap, step after step).
        """
        config = self.config
        best: tuple[float, str, float, float] | None = None
        for name, history in self._link_rates.items():
            if len(history) < config.network_plateau_steps:
                continue
            rx = [r for r, _ in history]
            median = statistics.median(rx)
            if median < config.network_plateau_floor_bytes_per_second:
                continue
            spread = (max(rx) - min(rx)) / median
            tx = statistics.median(t for _, t in history)
            flat = spread <= config.network_plateau_spread_ratio
            if flat and median >= config.network_plateau_rx_tx_factor * tx and (best is None or median > best[0]):
                best = (median, name, spread, tx)
        if best is None:
            return False
        values["network_pattern"] = "plateau"
        values["network_plateau_link"] = best[1]
        values["network_plateau_rx_bytes_per_second"] = round(best[0])
        values["network_plateau_tx_bytes_per_second"] = round(best[3])
        values["network_plateau_spread_ratio"] = round(best[2], 4)
        return True

    def _capacity(self, name: str, kind: str) -> float | None:
        configured = self.config.link_capacity_bytes_per_second.get(name)
        if configured is not None:
            return configured
        if kind == "nic":
            for nic in self._info.nics:
                if nic.name == name and nic.HasField("speed_bytes_per_second") and nic.speed_bytes_per_second > 0:
                    return nic.speed_bytes_per_second
            return None
        for port in self._info.rdma_ports:
            if f"{port.device}/{port.port}" == name and port.rate_bytes_per_second > 0:
                return port.rate_bytes_per_second
        return None

    # ---- storage ---------------------------------------------------------------------------

    def _storage(
        self, before: _Counters, now: _Counters, seconds: float, values: dict[str, float | str]
    ) -> tuple[bool, float | None]:
        config = self.config
        pressure = _share(before.io_some_us, now.io_some_us, seconds)
        if pressure is not None:
            values["storage_io_pressure_ratio"] = round(pressure, 4)
        total: float | None = None
        worst: tuple[float, str, dict[str, float]] | None = None
        for name, (reads, read_bytes, read_ms, io_ms) in now.disks.items():
            old = before.disks.get(name)
            if old is None:
                continue
            iops, throughput = rate(old[0], reads, seconds), rate(old[1], read_bytes, seconds)
            busy, ops, wait_ms = disk_busy_ratio(old[3], io_ms, seconds), delta(old[0], reads), delta(old[2], read_ms)
            if iops is None or throughput is None or busy is None:
                continue
            total = throughput if total is None else total + throughput
            figures = {
                "busy_ratio": busy,
                "iops": iops,
                "read_bytes_per_second": throughput,
            }
            if ops and wait_ms is not None:
                figures["await_seconds"] = wait_ms / ops / 1000
                figures["await_factor"] = figures["await_seconds"] / self._baseline(
                    name, iops, figures["await_seconds"]
                )
            limits = config.volumes.get(name)
            if limits is not None:
                shares = [iops / limits.iops if limits.iops else 0.0]
                if limits.throughput_bytes_per_second:
                    shares.append(throughput / limits.throughput_bytes_per_second)
                figures["provisioned_ratio"] = max(shares)
            score = max(
                figures["busy_ratio"] / config.storage_busy_ratio,
                figures.get("provisioned_ratio", 0.0) / config.storage_provisioned_ratio,
                figures.get("await_factor", 0.0) / config.storage_await_factor,
            )
            if worst is None or score > worst[0]:
                worst = (score, name, figures)
        if worst is None:
            return False, total
        score, name, figures = worst
        values["storage_disk"] = name
        values.update({f"storage_{k}": round(v, 6) for k, v in figures.items()})
        saturated = score >= 1.0
        return saturated and (pressure is None or pressure >= config.io_pressure_ratio), total

    def _baseline(self, disk: str, iops: float, await_seconds: float) -> float:
        """The lowest read latency seen on the disk under load: what "far above baseline" means."""
        floor = self.config.storage_await_floor_seconds
        known = self._await_baseline.get(disk)
        if iops >= _MIN_READS_PER_SECOND_FOR_BASELINE and (known is None or await_seconds < known):
            self._await_baseline[disk] = known = await_seconds
        return max(floor, known if known is not None else await_seconds)

    # ---- cpu -------------------------------------------------------------------------------

    def _cpu(
        self, before: _Counters, now: _Counters, seconds: float, assigned_gpus: int, values: dict[str, float | str]
    ) -> tuple[bool, bool]:
        """Whether the CPU is short, and whether cores are busy or saturated (not pressure alone)."""
        config = self.config
        busy: float | None = None
        if before.cpu is not None and now.cpu is not None:
            busy = share_of_increase((before.cpu[0], now.cpu[0]), (before.cpu[1], now.cpu[1]))
        if busy is not None:
            values["cpu_busy_ratio"] = round(busy, 4)
        pressure = _share(before.cpu_some_us, now.cpu_some_us, seconds)
        if pressure is not None:
            values["cpu_pressure_ratio"] = round(pressure, 4)
        fresh = now.time - self._cores_time <= config.window_seconds
        saturated = self._saturated_cores if fresh else None
        if saturated is not None and self._max_core_busy is not None:
            values["cpu_saturated_cores"] = saturated
            values["cpu_max_core_busy_ratio"] = round(self._max_core_busy, 4)
        pressed = (
            pressure is not None
            and pressure >= config.cpu_pressure_ratio
            and (busy is None or busy >= config.cpu_pressure_busy_ratio)
        )
        busy_cores = busy is not None and busy >= config.cpu_busy_ratio
        if busy_cores or pressed:
            values["cpu_pattern"] = "node-saturated"
            return True, busy_cores or bool(saturated)
        if saturated:
            single = saturated <= max(1, assigned_gpus) and (busy is None or busy < config.single_thread_cpu_ratio)
            values["cpu_pattern"] = "single-threaded-loader" if single else "loader-cores-saturated"
            return True, True
        return False, False


def _busy(c: pb.CpuTimes) -> float:
    return (
        c.user_seconds_total + c.nice_seconds_total + c.system_seconds_total + c.irq_seconds_total
        + c.softirq_seconds_total + c.steal_seconds_total
    )  # fmt: skip


def _all(c: pb.CpuTimes) -> float:
    return _busy(c) + c.idle_seconds_total + c.iowait_seconds_total


def _share(before: int | None, now: int | None, seconds: float) -> float | None:
    """A PSI total (microseconds stalled) over an interval as a share of it."""
    value = rate(before, now, seconds)
    return None if value is None else min(1.0, value / 1e6)


def _data_saturated(port: pb.RdmaPortSample) -> bool:
    """The data counters come from a 32-bit counter pinned at its maximum: no rate."""
    saturated = set(port.saturated_counters)
    return bool(saturated) and (
        ("port_rcv_data" in saturated and "port_rcv_data_64" not in port.counters)
        or ("port_xmit_data" in saturated and "port_xmit_data_64" not in port.counters)
    )
