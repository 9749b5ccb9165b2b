"""The simulated node's hardware: cumulative counters advanced by what the job did over a tick,
and the ``NodeReport`` / ``NodeInfo`` an agent on such a node would send.

Counters start at seeded offsets (a node that has been up for days) and only go up, so every
rate the collector derives is the activity put in here. Per-core CPU times are kept per core
group (rank main threads, loader cores, the rest) with a fixed per-core skew: O(1) per tick
whatever the core count.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from nodeagent.tools.simulator.profiles import GpuProfile
from nodeagent.tools.simulator.scenarios import Params
from nodeagent.v1 import nodeagent_pb2 as pb

AGENT_VERSION = "simulator"
_MIB = 1 << 20
_IDLE_MEMORY_BYTES = 512 * _MIB
_THERMAL_SLOWDOWN = 0x020 | 0x040  # sw_thermal_slowdown | hw_thermal_slowdown
_GPU_IDLE = 0x001
_POWER_READINGS = 10  # the agent's gpu_power_sample_seconds of 0.1 s, one report a second
# The agent's sources the simulation stands in for (the report's `collectors` says which ran).
_SOURCES = ("netdev", "infiniband", "diskstats", "cpu", "meminfo", "pressure", "gpu")


@dataclass(slots=True)
class Activity:
    """What the node did over one tick, as per-second rates (per GPU where it says so)."""

    assigned: bool = False
    util: list[float] = field(default_factory=list)  # per GPU, as NVML would read it
    gpu_memory_bytes: float = _IDLE_MEMORY_BYTES
    nic_rx_bytes_per_second: float = 0.0
    nic_tx_bytes_per_second: float = 0.0
    volume_read_bytes_per_second: float = 0.0
    volume_write_bytes_per_second: float = 0.0
    h2d_bytes_per_second: float = 0.0  # per GPU
    d2h_bytes_per_second: float = 0.0  # per GPU
    collective_bytes_per_second: float = 0.0  # per GPU, each direction
    main_core_busy_ratio: float = 0.01
    loader_core_busy_ratio: float = 0.0
    io_stall_ratio: float = 0.0  # share of time loader threads wait for the volume (PSI io some)


class NodeHardware:
    def __init__(self, params: Params, profile: GpuProfile, gpus: int, rng: random.Random) -> None:
        self.p, self.profile, self.gpus, self._rng = params, profile, gpus, rng
        uptime = rng.uniform(2, 30) * 86400.0
        self.nic = [rng.uniform(1e12, 5e13), rng.uniform(1e11, 1e12), 0.0, 0.0]  # rx, tx bytes; rx, tx packets
        self.nic[2], self.nic[3] = self.nic[0] / 1400, self.nic[1] / 900
        self.rdma = [rng.uniform(1e13, 1e14), rng.uniform(1e11, 1e12)]
        # reads, read bytes, read ms, writes, written bytes, write ms, io ms, weighted ms
        self.disks = {name: [rng.uniform(1e6, 1e8) * k for k in (1, 1e5, 0.2, 1, 1e5, 0.3, 0.15, 0.5)]
                      for name in ("nvme0n1", "nvme1n1")}  # fmt: skip
        self.pcie = [[rng.uniform(1e12, 1e14), rng.uniform(1e11, 1e13)] for _ in range(gpus)]
        self.nvlink = [[v, v * rng.uniform(0.999, 1.001)] for v in (rng.uniform(1e13, 1e15) for _ in range(gpus))]
        # Core groups: rank main threads, loader workers, the rest.
        loaders = params.loader_cores if params.loader_cores else 0
        mains = min(gpus, params.cpu_count - loaders)
        self.groups = [mains, loaders, params.cpu_count - mains - loaders]
        self.busy = [0.0, 0.0, 0.0]
        self.iowait = [0.0, 0.0, 0.0]
        self.cores = [self._core_base(i, uptime) for i in range(params.cpu_count)]
        self.skew_sum = [0.0, 0.0, 0.0]
        for core in self.cores:
            self.skew_sum[core[0]] += core[1]
        self.base_busy_seconds = sum(core[2] for core in self.cores)
        self.base_idle_seconds = sum(core[3] for core in self.cores)
        self.elapsed = 0.0
        self.ctxt = rng.uniform(1e9, 1e11)
        self.cpu_some_us = rng.uniform(1e9, 1e10)
        self.io_some_us = rng.uniform(1e8, 1e9)
        self.io_full_us = self.io_some_us * 0.5
        self.mem_some_us = rng.uniform(1e6, 1e7)
        self.avg = {"cpu": [0.0, 0.0, 0.0], "io": [0.0, 0.0, 0.0]}
        self.load = [0.0, 0.0, 0.0]
        self.dirty_bytes = 50.0 * _MIB

    def _core_base(self, index: int, uptime: float) -> tuple[int, float, float, float]:
        group = 0 if index < self.groups[0] else 1 if index < self.groups[0] + self.groups[1] else 2
        skew = self._rng.uniform(0.975, 1.0)
        busy = uptime * self._rng.uniform(0.05, 0.4)
        return group, skew, busy, uptime - busy

    def advance(self, a: Activity, dt: float) -> None:
        if dt <= 0:
            return
        self.elapsed += dt
        nic = self.nic
        nic[0] += a.nic_rx_bytes_per_second * dt
        nic[1] += a.nic_tx_bytes_per_second * dt
        nic[2] += a.nic_rx_bytes_per_second * dt / 1400
        nic[3] += a.nic_tx_bytes_per_second * dt / 900
        reads = a.volume_read_bytes_per_second / self.p.volume_io_bytes
        writes = a.volume_write_bytes_per_second / _MIB
        if self.p.volume_transport == "rdma":
            self.rdma[0] += a.volume_read_bytes_per_second * dt
            self.rdma[1] += (a.volume_write_bytes_per_second + reads * 64) * dt
        self._disk(self.disks["nvme1n1"], reads, a.volume_read_bytes_per_second, writes, dt, volume=True)
        self._disk(self.disks["nvme0n1"], 0.5, 2048.0, 40.0, dt, volume=False)
        for index in range(self.gpus):
            pcie = self.pcie[index]
            collective_pcie = a.collective_bytes_per_second if self.p.interconnect == "pcie" else 0.0
            pcie[0] += (a.h2d_bytes_per_second + collective_pcie) * dt
            pcie[1] += (a.d2h_bytes_per_second + collective_pcie) * dt
            if self.p.interconnect == "nvlink":
                self.nvlink[index][0] += a.collective_bytes_per_second * dt
                self.nvlink[index][1] += a.collective_bytes_per_second * dt
        shares = [a.main_core_busy_ratio, a.loader_core_busy_ratio, 0.01]
        for group in range(3):
            self.busy[group] += shares[group] * dt
            self.iowait[group] += (1.0 - shares[group]) * a.io_stall_ratio * 0.5 * dt if group == 1 else 0.0
        cpu_busy = self.cpu_busy_ratio(a)
        cpu_stall = 0.6 * min(1.0, max(0.0, (cpu_busy - 0.85) / 0.15))
        self.cpu_some_us += cpu_stall * dt * 1e6
        self.io_some_us += a.io_stall_ratio * dt * 1e6
        self.io_full_us += a.io_stall_ratio * 0.6 * dt * 1e6
        self._decay(self.avg["cpu"], cpu_stall, dt, (10.0, 60.0, 300.0))
        self._decay(self.avg["io"], a.io_stall_ratio, dt, (10.0, 60.0, 300.0))
        running = cpu_busy * self.p.cpu_count * (1.0 + cpu_stall)
        self._decay(self.load, running, dt, (60.0, 300.0, 900.0))
        self.ctxt += (20_000 + 400_000 * cpu_busy) * dt
        self.dirty_bytes = 50 * _MIB + a.volume_write_bytes_per_second * 5.0

    def cpu_busy_ratio(self, a: Activity) -> float:
        shares = (a.main_core_busy_ratio, a.loader_core_busy_ratio, 0.01)
        return sum(n * s for n, s in zip(self.groups, shares, strict=True)) / self.p.cpu_count

    def _disk(self, d: list[float], reads: float, read_bytes: float, writes: float, dt: float, *, volume: bool) -> None:
        p = self.p
        if volume:
            load = max(read_bytes / p.volume_bytes_per_second_cap, (reads + writes) / p.volume_iops_cap)
            latency = p.volume_latency_seconds / (1.0 - min(load, 0.95))
        else:
            latency = 0.0001
        queue = (reads + writes) * latency
        d[0] += reads * dt
        d[1] += read_bytes * dt
        d[2] += reads * latency * 1000 * dt
        d[3] += writes * dt
        d[4] += writes * _MIB * dt
        d[5] += writes * latency * 4 * 1000 * dt
        d[6] += (1.0 - math.exp(-queue)) * 1000 * dt
        d[7] += queue * 1000 * dt

    @staticmethod
    def _decay(avgs: list[float], value: float, dt: float, periods: tuple[float, float, float]) -> None:
        for i, period in enumerate(periods):
            k = math.exp(-dt / period)
            avgs[i] = avgs[i] * k + value * (1.0 - k)

    # ---- the report -------------------------------------------------------------------------

    def fill(self, report: pb.NodeReport, a: Activity, *, with_cores: bool) -> None:
        """Add every source's sample of this tick to ``report``."""
        for name in _SOURCES:
            report.collectors.add(name=name, success=True)
        nic = report.nics.add(name="eth0", operstate="up", carrier=True)
        nic.rx_bytes_total, nic.tx_bytes_total = int(self.nic[0]), int(self.nic[1])
        nic.rx_packets_total, nic.tx_packets_total = int(self.nic[2]), int(self.nic[3])
        if self.p.nic_speed_reported:
            nic.speed_bytes_per_second = self.p.nic_speed_bytes_per_second
        if self._has_rdma():
            port = report.rdma_ports.add(device="mlx5_0", port=1, state="ACTIVE", state_id=4)
            port.rx_bytes_total, port.tx_bytes_total = int(self.rdma[0]), int(self.rdma[1])
            port.rate_bytes_per_second = self.p.rdma_rate_bytes_per_second
        for name, d in self.disks.items():
            reads, read_bytes, read_ms, writes, written_bytes, write_ms, io_ms, weighted_ms = (int(v) for v in d)
            report.disks.add(
                name=name, reads_completed_total=reads, read_bytes_total=read_bytes,
                read_time_milliseconds_total=read_ms, writes_completed_total=writes,
                written_bytes_total=written_bytes, write_time_milliseconds_total=write_ms,
                io_time_milliseconds_total=io_ms, io_weighted_time_milliseconds_total=weighted_ms,
            )  # fmt: skip
        self._fill_host(report.host, with_cores=with_cores)
        for index in range(self.gpus):
            self._fill_gpu(report.gpus.add(index=index), index, a)
        if a.assigned and self.p.job_key:
            self._fill_job(report)

    def _fill_host(self, host: pb.HostSample, *, with_cores: bool) -> None:
        total = host.cpu_total
        user = system = idle = iowait = 0.0
        for group in range(3):
            busy = self.busy[group] * self.skew_sum[group]
            user, system = user + busy * 0.85, system + busy * 0.15
            iowait += self.iowait[group] * self.skew_sum[group]
        base_busy, base_idle = self.base_busy_seconds, self.base_idle_seconds
        total.user_seconds_total = round(base_busy * 0.85 + user, 2)
        total.system_seconds_total = round(base_busy * 0.15 + system, 2)
        total.iowait_seconds_total = round(iowait, 2)
        idle = base_idle + self.elapsed * self.p.cpu_count - user - system - iowait
        total.idle_seconds_total = round(idle, 2)
        if with_cores:
            for index, (group, skew, base_b, base_i) in enumerate(self.cores):
                busy, wait = self.busy[group] * skew, self.iowait[group] * skew
                core = host.cpus.add(cpu=str(index))
                core.user_seconds_total = round(base_b * 0.85 + busy * 0.85, 2)
                core.system_seconds_total = round(base_b * 0.15 + busy * 0.15, 2)
                core.idle_seconds_total = round(base_i + self.elapsed - busy - wait, 2)
                if wait:
                    core.iowait_seconds_total = round(wait, 2)
        host.context_switches_total = int(self.ctxt)
        host.load1, host.load5, host.load15 = (round(v, 2) for v in self.load)
        host.memory_total_bytes = self.p.memory_total_bytes
        host.memory_available_bytes = int(self.p.memory_total_bytes * 0.8)
        host.memory_cached_bytes = int(self.p.memory_total_bytes * 0.6)
        host.memory_dirty_bytes = int(self.dirty_bytes)
        cpu, io = host.pressure_cpu, host.pressure_io
        cpu.some_avg10_ratio, cpu.some_avg60_ratio, cpu.some_avg300_ratio = (round(v, 4) for v in self.avg["cpu"])
        cpu.some_total_microseconds = int(self.cpu_some_us)
        io.some_avg10_ratio, io.some_avg60_ratio, io.some_avg300_ratio = (round(v, 4) for v in self.avg["io"])
        io.some_total_microseconds = int(self.io_some_us)
        io.full_total_microseconds = int(self.io_full_us)
        host.pressure_memory.some_total_microseconds = int(self.mem_some_us)

    def _fill_gpu(self, g: pb.GpuSample, index: int, a: Activity) -> None:
        profile = self.profile
        util = a.util[index] if a.util else 0.0
        g.utilization_gpu_ratio = round(util, 3)
        if a.assigned:
            g.memory_used_bytes = int(a.gpu_memory_bytes) + index * 3 * _MIB
            proc = g.processes.add(pid=41_000 + index, used_memory_bytes=int(a.gpu_memory_bytes), name="python")
            proc.job.slurm_job_id = self.p.job_id
            proc.job.account = self.p.job_account
            if self.p.job_key:
                ref, node_rank = proc.job, self.p.job_node_rank
                ref.job_key, ref.world_size = self.p.job_key, self.p.job_nodes * self.gpus
                ref.rank, ref.local_rank, ref.node_rank = node_rank * self.gpus + index, index, node_rank
        else:
            g.memory_used_bytes = _IDLE_MEMORY_BYTES
        if profile.gpm_supported:
            g.sm_active_ratio = round(util * 0.8, 3)
        g.pcie_rx_bytes_total, g.pcie_tx_bytes_total = int(self.pcie[index][0]), int(self.pcie[index][1])
        if profile.nvlink_count:
            g.nvlink_rx_bytes_total, g.nvlink_tx_bytes_total = int(self.nvlink[index][0]), int(self.nvlink[index][1])
        throttled = self.p.clock_ratio < 1.0 and a.assigned
        g.clock_event_reasons = _THERMAL_SLOWDOWN if throttled else (_GPU_IDLE if util < 0.01 else 0)
        g.temperature_celsius = float(round(88.0 + index % 3 if throttled else 31.0 + 45.0 * util + index % 4))
        g.power_watts = float(round(60.0 + (profile.power_limit_watts - 60.0) * util))
        if not profile.gpm_supported:
            self._fill_power_readings(g, util, a.assigned)
        clock = profile.max_sm_clock_mhz * self.p.clock_ratio if util >= 0.01 else 210
        g.sm_clock_mhz = int(clock)

    def _fill_power_readings(self, g: pb.GpuSample, util: float, assigned: bool) -> None:
        """A GPU without GPM, as the agent reads an A100-class (GA100) one: its instantaneous draw
        every 0.1 s between reports while a process runs (``power_samples_watts``), computing at
        near its limit for the simulated computing share of the second and spinning in the
        collective or idle near its resting draw for the rest; its computing share told by them
        (``computing_source`` ``power_instant``, agent/gpu/power_regime.py)."""
        g.computing_source = "power_instant"  # the evidence in words is the agent's to give: none here
        if not assigned:
            return
        limit = self.profile.power_limit_watts
        computing = round(util * _POWER_READINGS)
        g.power_samples_watts.extend(
            (limit * 0.9 if k < computing else 60.0 + 0.15 * (limit - 60.0)) for k in range(_POWER_READINGS)
        )

    def _fill_job(self, report: pb.NodeReport) -> None:
        """The node's one ``JobSample``, as ``agent/gpu/job_samples.py`` builds it from the processes."""
        p, gpus = self.p, self.gpus
        key = p.job_key
        source = "torch" if key.startswith("torch/") else "mpi" if key.startswith("mpi/") else "slurm"
        first = p.job_node_rank * gpus
        report.jobs.add(
            job=key, source=source, world_size=p.job_nodes * gpus, ranks=range(first, first + gpus),
            node_rank=p.job_node_rank, gpus=range(gpus),
        )  # fmt: skip

    def _has_rdma(self) -> bool:
        return self.p.volume_transport == "rdma" and self.p.rdma_rate_bytes_per_second > 0

    def info(self, node_id: str, rng: random.Random) -> pb.NodeInfo:
        p, profile = self.p, self.profile
        info = pb.NodeInfo(node_id=node_id, hostname=node_id, agent_version=AGENT_VERSION)
        info.kernel_release = "6.1.0-sim"
        info.cpu_count = p.cpu_count
        info.memory_total_bytes = p.memory_total_bytes
        nic = info.nics.add(name="eth0", kind="physical", mtu=9000)
        if p.nic_speed_reported:
            nic.speed_bytes_per_second, nic.speed_source = p.nic_speed_bytes_per_second, "kernel"
        if self._has_rdma():
            info.rdma_ports.add(device="mlx5_0", port=1, rate_bytes_per_second=p.rdma_rate_bytes_per_second,
                                rate_text=f"{p.rdma_rate_bytes_per_second * 8 / 1e9:.0f} Gb/sec (4X HDR)",
                                link_layer="InfiniBand", hca_type="MT4123")  # fmt: skip
        info.disks.add(name="nvme0n1", rotational=False, size_bytes=3_840_000_000_000, transport="pcie",
                       model="SAMSUNG MZQL23T8HCLS", mountpoints=["/"])  # fmt: skip
        info.disks.add(name="nvme1n1", rotational=False, size_bytes=32_000_000_000_000, transport=p.volume_transport,
                       model="Cloud Volume", mountpoints=["/data"])  # fmt: skip
        topo = info.gpu
        topo.driver_version, topo.nvml_version, topo.cuda_driver_version = "550.90.07", "12.550.90.07", 12040
        for index in range(self.gpus):
            gpu = topo.gpus.add(index=index, name=profile.name, architecture=profile.architecture)
            gpu.uuid = "GPU-" + "-".join(f"{rng.getrandbits(bits):0{bits // 4}x}" for bits in (32, 16, 16, 16, 48))
            gpu.pci_bus_id = f"00000000:{0x18 + index * 0x10:02X}:00.0"
            gpu.memory_total_bytes = profile.memory_total_bytes
            gpu.nvlink_count = profile.nvlink_count
            if profile.nvlink_count:
                gpu.nvlink_speed_bytes_per_second = profile.nvlink_speed_bytes_per_second
            gpu.pcie_max_generation, gpu.pcie_max_width = profile.pcie_generation, profile.pcie_width
            gpu.gpm_supported = profile.gpm_supported
            gpu.serial = f"{1_650_000_000_000 + rng.getrandbits(32)}"
        return info
