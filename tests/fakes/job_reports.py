"""Hand-made report streams of the nodes of multi-node jobs, for the job roll-up's tests and its
bench: each node's GPUs (utilization, GPM SM activity, clocks and throttle reasons, PCIe link,
NVLink errors), a data NIC (``eth0``: what the loader receives) and a fabric NIC (``fab0``: the
collective, the same both ways), and the jobs on it (``NodeReport.jobs`` and each process's
``JobRef``), counters integrated from report to report. Change a node's attributes mid-stream to
start a bottleneck."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from nodeagent.v1 import nodeagent_pb2 as pb

START = 1_800_000_000.0
GIB = 1 << 30
# Clock-event reason bit of a HW thermal slowdown (core/wire/clock_events.py).
HW_THERMAL_SLOWDOWN = 0x40


@dataclass
class JobPart:
    """A job's part on one node."""

    job: str
    gpus: tuple[int, ...]
    ranks: tuple[int, ...]
    world_size: int
    source: str = "slurm"
    # Whom the job is billed to: its Slurm account, its pod's Kubernetes namespace.
    account: str = ""
    namespace: str = ""


@dataclass
class FakeNode:
    node_id: str
    jobs: list[JobPart]
    gpus: int = 4
    # NVML utilization of every GPU (a GPU waiting in a collective reads ~1), or per GPU.
    util: float = 0.98
    gpu_util: dict[int, float] = field(default_factory=dict)
    # GPM SM activity (the GPUs are Hopper-like when set).
    sm_active: float | None = None
    gpu_sm_active: dict[int, float] = field(default_factory=dict)
    # The data link: receive rate and speed (a loader receives; it sends 1% of it).
    data_rx_bytes_per_second: float = 2e8
    data_speed_bytes_per_second: float = 1.25e9
    # The fabric link: the collective's rate, both ways, and its speed.
    fabric_bytes_per_second: float = 4e8
    fabric_speed_bytes_per_second: float = 1.25e9
    throttled_gpus: tuple[int, ...] = ()
    sm_clock_mhz: int = 1980
    pcie_generation: int = 5
    pcie_width: int = 16
    nvlink_errors_per_report: int = 0
    # The host's TCP segments sent per second and the share of them sent again (/proc/net/snmp).
    tcp_segments_per_second: float = 20_000.0
    tcp_retransmit_ratio: float = 0.0005
    # An RDMA port (mlx5_0 port 1) with its link error counters, rising by this much a report;
    # None: no RDMA port.
    rdma_errors_per_report: int | None = None
    # Power (set compute_watts to report it; None: no power readings): the GPUs draw
    # compute_watts computing and wait_watts waiting in the collective (reading busy on NVML all
    # the same), in lockstep cycles of cycle_seconds of which they compute duty; a throttled GPU
    # computes at 70% of the draw. energy: the energy counter too (else power_watts alone).
    compute_watts: float | None = None
    wait_watts: float = 90.0
    duty: float = 1.0
    cycle_seconds: int = 5
    energy: bool = True
    # Sub-second phases (a real step): every report holds whole cycles, so its mean draw is the
    # duty's average and never swings; subsamples > 0 adds that many instantaneous readings
    # between reports (power_samples_watts, as the agent reads on GPUs without GPM).
    sub_second: bool = False
    subsamples: int = 0
    # mean_power: the readings between reports are a 1-s moving mean (each the report's mean
    # draw: sub-second phases average out in it); computing_source: what the agent says the
    # GPUs' computing-share source is ("": an agent that has not decided).
    mean_power: bool = False
    computing_source: str = ""
    # Counters, integrated.
    _time: float | None = None
    _eth: list[float] = field(default_factory=lambda: [0.0, 0.0])
    _fab: list[float] = field(default_factory=lambda: [0.0, 0.0])
    _nvlink_errors: int = 0
    _tcp: list[float] = field(default_factory=lambda: [0.0, 0.0])
    _rdma_errors: int = 0
    _seq: int = 0
    _energy_mj: dict[int, float] = field(default_factory=dict)

    def info(self) -> pb.NodeInfo:
        gpm = self.sm_active is not None or bool(self.gpu_sm_active)
        return pb.NodeInfo(
            node_id=self.node_id,
            hostname=self.node_id,
            nics=[
                pb.NicInfo(name="eth0", speed_bytes_per_second=self.data_speed_bytes_per_second, kind="physical"),
                pb.NicInfo(name="fab0", speed_bytes_per_second=self.fabric_speed_bytes_per_second, kind="physical"),
            ],
            gpu=pb.GpuTopology(
                gpus=[
                    pb.GpuInfo(
                        index=i,
                        uuid=f"GPU-{self.node_id}-{i}",
                        pcie_max_generation=5,
                        pcie_max_width=16,
                        gpm_supported=gpm,
                        nvlink_count=4,
                    )
                    for i in range(self.gpus)
                ]
            ),
        )

    def report(self, t: float) -> pb.NodeReport:
        dt = 0.0 if self._time is None else t - self._time
        first = self._time is None
        self._time = t
        self._seq += 1
        self._eth[0] += self.data_rx_bytes_per_second * dt
        self._eth[1] += self.data_rx_bytes_per_second * 0.01 * dt
        self._fab[0] += self.fabric_bytes_per_second * dt
        self._fab[1] += self.fabric_bytes_per_second * dt
        self._nvlink_errors += self.nvlink_errors_per_report
        r = pb.NodeReport(node_id=self.node_id, epoch=1, seq=self._seq, time_unix_seconds=t)
        if first:
            r.info.CopyFrom(self.info())
        r.nics.add(name="eth0", rx_bytes_total=int(self._eth[0]), tx_bytes_total=int(self._eth[1]),
                   speed_bytes_per_second=self.data_speed_bytes_per_second)  # fmt: skip
        r.nics.add(name="fab0", rx_bytes_total=int(self._fab[0]), tx_bytes_total=int(self._fab[1]),
                   speed_bytes_per_second=self.fabric_speed_bytes_per_second)  # fmt: skip
        self._tcp[0] += self.tcp_segments_per_second * dt
        self._tcp[1] += self.tcp_segments_per_second * self.tcp_retransmit_ratio * dt
        r.host.tcp_out_segments_total, r.host.tcp_retransmitted_segments_total = int(self._tcp[0]), int(self._tcp[1])
        if self.rdma_errors_per_report is not None:
            self._rdma_errors += self.rdma_errors_per_report
            port = r.rdma_ports.add(device="mlx5_0", port=1)
            port.counters["symbol_error"] = self._rdma_errors
            port.counters["link_error_recovery"] = self._rdma_errors // 2
            port.counters["port_rcv_data"] = int(self._fab[0] / 4)
        owner = {i: part for part in self.jobs for i in part.gpus}
        for i in range(self.gpus):
            g = r.gpus.add(index=i, uuid=f"GPU-{self.node_id}-{i}", memory_used_bytes=8 * GIB)
            g.utilization_gpu_ratio = self.gpu_util.get(i, self.util)
            sm = self.gpu_sm_active.get(i, self.sm_active)
            if sm is not None:
                g.sm_active_ratio = sm
            throttled = i in self.throttled_gpus
            g.computing_source = self.computing_source
            if self.compute_watts is not None:
                self._power(g, t, dt, throttled)
            g.clock_event_reasons = HW_THERMAL_SLOWDOWN if throttled else 0
            g.sm_clock_mhz = int(self.sm_clock_mhz * (0.7 if throttled else 1.0))
            g.pcie_link_generation, g.pcie_link_width = self.pcie_generation, self.pcie_width
            g.pcie_max_link_generation, g.pcie_max_link_width = 5, 16
            g.nvlinks.add(link=0, active=True, replay_errors_total=self._nvlink_errors)
            part = owner.get(i)
            if part is not None:
                rank = part.ranks[part.gpus.index(i)] if part.gpus.index(i) < len(part.ranks) else 0
                job = pb.JobRef(job_key=part.job, slurm_job_id=part.job if part.source == "slurm" else "")
                job.account, job.k8s_namespace = part.account, part.namespace
                job.world_size, job.rank = part.world_size, rank
                g.processes.add(pid=1000 + i, name="python", job=job)
        for part in self.jobs:
            r.jobs.add(job=part.job, source=part.source, world_size=part.world_size, ranks=part.ranks, gpus=part.gpus)
        return r

    def _power(self, g: pb.GpuSample, t: float, dt: float, throttled: bool) -> None:
        """The GPU's draw over the report's interval: computing for the first ``duty`` of each cycle."""
        assert self.compute_watts is not None
        high = self.compute_watts * (0.7 if throttled else 1.0)
        if self.sub_second:
            watts = self.duty * high + (1 - self.duty) * self.wait_watts
            n = self.subsamples
            if self.mean_power:
                g.power_samples_watts.extend([watts] * n)
            else:
                g.power_samples_watts.extend(high if (k + 0.5) / n < self.duty else self.wait_watts for k in range(n))
        else:
            computing = (t - START) % self.cycle_seconds < self.duty * self.cycle_seconds - 1e-9
            watts = high if computing else self.wait_watts
        g.power_watts = watts
        if self.energy:
            total = self._energy_mj[g.index] = self._energy_mj.get(g.index, 1e9) + watts * dt * 1000.0
            g.energy_millijoules_total = int(total)


def job_nodes(
    job: str, nodes: int, gpus: int = 4, *, prefix: str = "node", world_size: int | None = None
) -> list[FakeNode]:
    """The nodes of one job, all its GPUs on each, ranks in node order."""
    size = nodes * gpus if world_size is None else world_size
    return [
        FakeNode(
            f"{prefix}-{n}",
            [JobPart(job, tuple(range(gpus)), tuple(range(n * gpus, (n + 1) * gpus)), size)],
            gpus=gpus,
        )
        for n in range(nodes)
    ]


def stream(
    nodes: Iterable[FakeNode], seconds: float, *, start: float = START, every: float = 1.0
) -> Iterator[pb.NodeReport]:
    """Each node's report at each second in turn, for ``seconds``."""
    nodes = list(nodes)
    steps = round(seconds / every)
    for k in range(steps):
        t = start + k * every
        for node in nodes:
            yield node.report(t)
