"""The multi-node lab: one synchronous job over real shaped links, a real agent per node, one
collector, and the job's verdict checked against the ranks' own timers.

Each node is a network namespace with its own agent (``nodeagent run --node-id node-N``), its own
emulated GPU (the fake NVML, an H100 with GPM, or with ``--gpu a100_sxm4`` an A100 without: only
its power tells waiting from computing; driven by its rank), its own data link (a veth to
the data server's namespace, shaped with tc) and its own fabric link (a veth to a switch
namespace's bridge, shaped with tc). One rank per node (``bench/lab_rank.py``, started with the
job's torch.distributed environment) reads its batch over its data link, computes, and
all-reduces its gradient with the other ranks over the fabric (a real ring all-reduce over TCP).
The collector runs once for the whole lab in a namespace of its own, joined to every node by a
management link, with short detector windows. Every address is in 127.0.0.0/8.

  clean      nothing slow: the job computes
  network    one node's data link capped (tc): that node waits for data, the others for it
  storage    one node reads its batches from its own block device (a loop device) capped by
             the block throttle; each agent sees only its own device where the agent has
             --collector.diskstats.device-include
  throttled  one node's GPU throttled: clock-event reasons, a lower SM clock, a slower step
  fabric     one node's fabric link degraded (tc, and its agent told the lower speed)
  job-wide   every node's data link capped: the job waits on all of them, no node to name
  two-jobs   two jobs side by side on disjoint nodes, one node's data link capped in one of them

The truth is each rank's own timers (its data wait, compute and collective shares, per second
and over the run); the job's wait share is the mean over its ranks of data wait + collective.
Per run the lab prints the truth, the collector's job verdict (``nodeagent-collector jobs
--json`` at the end, and polled every 2 s for the time from the job's start, the straggler's
onset, to the first verdict naming the straggler with its cause), the waiting nodes' own
verdicts (``nodes --json``: state ``waiting``, ``waiting_on``), what was expected, and whether
it was met. A collector without the job roll-up gives no job verdict: the lab says so and checks
the truth alone.

The emulation's axes (docs/lab.md, "Emulation axes"); without them the lab is as it always was:
  --gpu        the computing-share source: h100_sxm5 (GPM) or a100_sxm4 (power alone)
  --power      how the board reads power: ideal (the draw now), sampled (a 25 ms window every
               100 ms), mean1s (the last second's mean; no field 186), energy (the counter only)
  --read-lag-ms  readings trail the draw by this much (50-100 ms on real boards)
  --collective bandwidth (a long bandwidth-bound all-reduce) or bursts (gradient buckets, short
               bursts; the degraded fabric link a shallow-buffered one that drops a burst's tail)
  --step       the healthy step's length in seconds (0.22 by default; every phase scales with it)

Needs root (namespaces, tc, loop devices, cgroups). Everything it starts is removed when it ends,
also on Ctrl-C and SIGTERM.

    sudo .venv/bin/python bench/lab_cluster.py [--scenarios clean,network] [--seconds 60] [--runs 10]
                                               [--nodes 4] [--record DIR] [--gpu a100_sxm4]
                                               [--power mean1s] [--read-lag-ms 75]
                                               [--collective bursts] [--step 2]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.lab import DETECTOR  # noqa: E402
from bench.lab_rig import LabError, install_interrupts, loop_device, popen, sh, stop, toml, wait_until  # noqa: E402

# The job's step: a batch over the data link, compute, an all-reduce over the fabric.
COMPUTE_SECONDS = 0.2
BATCH_BYTES = 512 << 10
GRADIENT_BYTES = 2 << 20
OBJECT_BYTES = 32 << 20
# Links (tc's words; the agents are told each link's rate with --link-speed, in Mb/s).
DATA_RATE, DATA_CAP = 100, 10  # Mb/s: a batch in 42 ms healthy, in 0.42 s capped (about 2 steps)
FABRIC_RATE, FABRIC_DEGRADED = 1000, 100  # Mb/s: the degraded ring takes about 0.25 s a step
# storage: 8 reads of 64 KiB a batch, the device capped at 20 reads a second (0.4 s a batch).
READ_BYTES, READS_PER_BATCH, STRAGGLER_IOPS = 64 << 10, 8, 20
# throttled: the GPU's clocks held down by heat to half, so its (compute-bound) step takes twice as long.
THROTTLE = {"factor": 2.0, "clock_reasons": 0x20 | 0x40, "temp": 89}
PROFILE = "h100_sxm5"
# --gpu: the emulated GPU class. An H100 has GPM; an A100 has none, so only its power tells a
# rank waiting in the collective (NVML utilization ~100%) from one computing.
GPU_CLASSES = ("h100_sxm5", "a100_sxm4")
EXPECTED_CAUSE = {"network": "network", "storage": "storage", "throttled": "throttled", "fabric": "link"}
# The emulation's axes (see the docstring); the defaults are the lab as it always was.
POWER_MODES = ("ideal", "sampled", "mean1s", "energy")
COLLECTIVES = ("bandwidth", "bursts")
STEP_SECONDS = 0.22  # the healthy step at COMPUTE_SECONDS: compute, the all-reduce, the batch prefetched
STEP_RANGE = (0.1, 4.0)
LAG_RANGE_MS = (0, 1000)
# bursts: the gradient all-reduced in buckets of 32 KiB, one each 0.22 s of step (9 at 2 s), 8 KiB
# a transfer between two ranks of 4: bursts far under any link's rating.
BUCKETS, BUCKET_BYTES = 1, 32 << 10
# bursts, fabric: the degraded link shapes to its rate with a bucket and a queue of two packets,
# so a burst's tail is dropped and resent (TCP retransmits, about 10 ms each here).
SHALLOW_BYTES = 3028
NAMED_WITHIN_SECONDS = 60.0
RATIO_TOLERANCE = 0.05
POLL_SECONDS = 2.0
# Addresses: data links 127.241.N.0/30, management 127.242.0.0/24, fabric 127.243.0.0/24.
COLLECTOR_ADDR, COLLECTOR_PORT = "127.242.0.1", 50051
SERVER_PORT, RING_PORT = 8015, 29500
DEVICE_FLAG = "--collector.diskstats.device-include"


@dataclass(frozen=True)
class Scenario:
    name: str
    # What is slow: "network", "storage", "throttled", "fabric" on the straggler; "job-wide": every
    # node's data link; None: nothing.
    kind: str | None
    jobs: int = 1  # two-jobs: two jobs of --nodes each (or half of them, see --nodes)


@dataclass(frozen=True)
class Emulation:
    """How the lab's GPUs and job behave beyond the scenario (docs/lab.md, "Emulation axes")."""

    power: str = "ideal"
    lag_ms: int = 0
    collective: str = "bandwidth"
    step: float = STEP_SECONDS
    # "dcgm": an emulated dcgm-exporter beside each agent, its SM activity the GPU's own ("": none).
    source: str = ""

    @property
    def scale(self) -> float:
        """Every phase's length (compute, a batch's bytes, the gradient's, a batch's reads) by this."""
        return self.step / STEP_SECONDS

    @property
    def buckets(self) -> int:
        return max(1, round(BUCKETS * self.scale)) if self.collective == "bursts" else 1

    @property
    def gradient_bytes(self) -> int:
        if self.collective == "bursts":
            return self.buckets * BUCKET_BYTES
        return round(GRADIENT_BYTES * self.scale)

    def power_fields(self, index: int) -> dict[str, Any] | None:
        """The GPU's power sensor (the fake NVML's state), or None: the ideal one, no lag, as always.
        Each node's windows start at a moment of its own, as unsynchronized boards' do."""
        if self.power == "ideal" and not self.lag_ms:
            return None
        offset = {"sampled": (37 * index) % 100, "mean1s": (271 * index) % 1000}.get(self.power, 0)
        return {"power_mode": self.power, "power_lag_ms": self.lag_ms, "power_offset_ms": offset}

    def words(self) -> dict[str, Any]:
        words: dict[str, Any] = {"power": self.power, "lag_ms": self.lag_ms, "collective": self.collective}
        words["step"] = self.step
        if self.source:
            words["source"] = self.source
        return words


DCGM_PORT = 9402  # the emulated dcgm-exporter's, on the node's own loopback (the agent's /metrics: 9400)


def source_setup(
    emulation: Emulation, node: Node, gpu_uuid: str, state_dir: Path, tmp: Path, stack: contextlib.ExitStack
) -> list[str]:
    """What a computing-share source adds to a node's agent (its arguments). GPM (h100_sxm5) and
    power (a100_sxm4) come from the fake NVML alone: nothing. DCGM (``--dcgm``): a fake
    dcgm-exporter in the node's namespace, refreshed every second as `dcgm-exporter -c 1000` is,
    its DCGM_FI_PROF_SM_ACTIVE the GPU's computing share of the last second as its rank writes it
    into the fake NVML state (the activity the H100's GPM reads), and the agent told its address
    (``[dcgm_exporter]`` of agent.toml)."""
    if emulation.source != "dcgm":
        return []
    exporter = popen(node.exec(sys.executable, "-m", "tests.fakes.dcgm_exporter", "--gpu", gpu_uuid,
                               "--refresh-seconds", "1", "--port", str(DCGM_PORT),
                               "--from-nvml-state", str(state_dir / f"nvml-{node.index}")),
                     tmp / f"dcgm-{node.index}.log")  # fmt: skip
    stack.callback(stop, exporter)
    assert exporter.stdout is not None
    if not exporter.stdout.readline().startswith("http://"):
        raise LabError(f"{node.node_id}: the emulated dcgm-exporter did not start: {(tmp / f'dcgm-{node.index}.log')}")
    config = tmp / f"agent-{node.index}.toml"
    config.write_text(f'[dcgm_exporter]\nurl = "http://127.0.0.1:{DCGM_PORT}/metrics"\n')
    return ["--config", str(config)]


FINAL_MARGIN = 3.0  # seconds before the job's end that its final verdict is taken
SCENARIOS = {
    s.name: s
    for s in (
        Scenario("clean", None),
        Scenario("network", "network"),
        Scenario("storage", "storage"),
        Scenario("throttled", "throttled"),
        Scenario("fabric", "fabric"),
        Scenario("job-wide", "job-wide"),
        Scenario("two-jobs", "network", jobs=2),
    )
}


@dataclass
class Node:
    index: int
    ns: str
    job: int  # which job's rank runs here
    rank: int
    data_rate: int = DATA_RATE
    fabric_rate: int = FABRIC_RATE
    device: str | None = None  # its own block device (storage)
    throttled: bool = False

    @property
    def node_id(self) -> str:
        return f"node-{self.index}"

    @property
    def data_addr(self) -> str:
        return f"127.241.{self.index}.2"

    @property
    def server_addr(self) -> str:
        return f"127.241.{self.index}.1"

    @property
    def fabric_addr(self) -> str:
        return f"127.243.0.{10 + self.index}"

    @property
    def mgmt_addr(self) -> str:
        return f"127.242.0.{10 + self.index}"

    def exec(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *args]


@dataclass
class Job:
    index: int
    run_id: str
    nodes: list[Node]
    straggler: Node | None
    kind: str | None  # what slows it (see Scenario.kind)

    @property
    def key(self) -> str:
        """The job key the agents derive from the ranks' environment (torch rendezvous)."""
        return f"torch/{self.run_id}"

    @property
    def node_ids(self) -> list[str]:
        return [n.node_id for n in self.nodes]

    @property
    def expected_state(self) -> str:
        return "busy" if self.kind is None else "slowed"

    @property
    def expected_cause(self) -> str | None:
        if self.kind == "job-wide":
            return "network"
        return EXPECTED_CAUSE.get(self.kind or "")

    @property
    def expected(self) -> str:
        if self.kind is None:
            return "busy"
        if self.straggler is None:
            return f"slowed, job-wide ({self.expected_cause})"
        return f"slowed, {self.straggler.node_id} ({self.expected_cause})"


# ---- the rig ------------------------------------------------------------------------------------


class Rig:
    """The namespaces, links and processes of one run; ``close`` (or the ExitStack) removes all."""

    def __init__(self, stack: contextlib.ExitStack, tag: str, nodes: list[Node], shallow: bool = False) -> None:
        self.stack, self.tag, self.nodes = stack, tag, nodes
        self.shallow = shallow  # a degraded fabric link drops a burst's tail (--collective bursts)
        self.data_ns, self.fabric_ns, self.mgmt_ns = f"na-c{tag}-d", f"na-c{tag}-f", f"na-c{tag}-m"

    def _netns(self, name: str) -> None:
        sh("ip", "netns", "add", name)
        self.stack.callback(subprocess.run, ["ip", "netns", "del", name], check=False, capture_output=True,
                            timeout=30)  # fmt: skip
        # 127.0.0.0/8 on a device other than lo needs route_localnet. The whole /8 is local to every
        # namespace (lo): ARP answers only for the asking device's own address (arp_ignore), else a
        # bridge or a node answers for another node's. No IPv6 chatter on the links.
        sysctls = ["net.ipv4.conf.all.route_localnet=1", "net.ipv4.conf.default.route_localnet=1",
                   "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.default.arp_ignore=1",
                   "net.ipv4.conf.all.arp_announce=2", "net.ipv4.conf.default.arp_announce=2",
                   "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]  # fmt: skip
        sh("ip", "netns", "exec", name, "sysctl", "-qw", *sysctls)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def _veth(self, ns_a: str, dev_a: str, ns_b: str, dev_b: str) -> None:
        sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
        for ns, dev in ((ns_a, dev_a), (ns_b, dev_b)):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{dev}.route_localnet=1")

    @staticmethod
    def _shape(ns: str, dev: str, mbit: int, *, change: bool = False, shallow: bool = False) -> None:
        # A token bucket at the link's rate; a burst of 10 ms of it (at least 32 KiB). Shallow: a
        # bucket and a queue of two packets, so the tail of a burst is dropped (and resent).
        burst = max(32 << 10, mbit * 125_000 // 100)
        size = (
            ["burst", str(SHALLOW_BYTES), "limit", str(SHALLOW_BYTES)]
            if shallow
            else ["burst", str(burst), "latency", "100ms"]
        )
        sh("tc", "-n", ns, "qdisc", "change" if change else "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
           *size)  # fmt: skip

    def build(self) -> None:
        for ns in (self.data_ns, self.fabric_ns, self.mgmt_ns, *(n.ns for n in self.nodes)):
            self._netns(ns)
        for ns in (self.fabric_ns, self.mgmt_ns):
            sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", ns, "link", "set", "br0", "up")
        sh("ip", "netns", "exec", self.mgmt_ns, "sysctl", "-qw", "net.ipv4.conf.br0.route_localnet=1")
        sh("ip", "-n", self.mgmt_ns, "addr", "add", f"{COLLECTOR_ADDR}/24", "dev", "br0")
        for n in self.nodes:
            i = n.index
            self._veth(n.ns, "data0", self.data_ns, f"d{i}")
            self._veth(n.ns, "fab0", self.fabric_ns, f"p{i}")
            self._veth(n.ns, "mgmt0", self.mgmt_ns, f"m{i}")
            batch = [f"addr add {n.data_addr}/30 dev data0", f"addr add {n.fabric_addr}/24 dev fab0",
                     f"addr add {n.mgmt_addr}/24 dev mgmt0", "link set data0 up", "link set fab0 up",
                     "link set mgmt0 up"]  # fmt: skip
            sh("ip", "-n", n.ns, "-batch", "-", stdin="\n".join(batch) + "\n")
            sh("ip", "-n", self.data_ns, "addr", "add", f"{n.server_addr}/30", "dev", f"d{i}")
            sh("ip", "-n", self.data_ns, "link", "set", f"d{i}", "up")
            for ns, dev in ((self.fabric_ns, f"p{i}"), (self.mgmt_ns, f"m{i}")):
                sh("ip", "-n", ns, "link", "set", dev, "master", "br0", "up")
            # What the node receives from the data server; what it sends and receives on the fabric.
            self._shape(self.data_ns, f"d{i}", n.data_rate)
            shallow = self.shallow and n.fabric_rate < FABRIC_RATE
            self._shape(n.ns, "fab0", n.fabric_rate, shallow=shallow)
            self._shape(self.fabric_ns, f"p{i}", n.fabric_rate, shallow=shallow)


def _cpu_times() -> tuple[float, float]:
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields), idle


def device_filter_supported() -> bool:
    """Whether this agent has the per-device disk filter (node_exporter's flag name)."""
    done = subprocess.run([sys.executable, "-m", "nodeagent.agent", "run", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    return DEVICE_FLAG in done.stdout


# ---- one run --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: str
    run: int
    jobs: list[Job]
    onset: float  # the ranks' first step (the straggler is slow from it on)
    truths: dict[str, dict[str, Any]]  # node id -> its rank's truth
    polls: list[dict[str, Any]]  # lab_poll.py's lines
    final_jobs: list[dict[str, Any]]  # nodeagent-collector jobs --json at the end
    final_nodes: list[dict[str, Any]]  # nodeagent-collector nodes --json at the end
    config: dict[str, Any]
    cpu_busy: float  # the machine's CPU busy share over the run
    device_filter: bool
    trace: Path | None = None
    link_speeds: dict[str, dict[str, str]] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)  # node id -> its own block device (storage)
    emulation: Emulation = field(default_factory=Emulation)


def plan(scenario: Scenario, nodes_per_job: int, run: int, tag: str) -> list[Job]:
    """The jobs of a run, their nodes and ranks, and the straggler (a different node each run)."""
    jobs: list[Job] = []
    index = 0
    for j in range(scenario.jobs):
        members = []
        for rank in range(nodes_per_job):
            members.append(Node(index, f"na-c{tag}-n{index}", j, rank))
            index += 1
        kind = scenario.kind if j == 0 else None  # two-jobs: the second job is clean
        straggler = members[(run + 1) % nodes_per_job] if kind not in (None, "job-wide") else None
        job = Job(j, f"{scenario.name}-{tag}-j{j}", members, straggler, kind)
        if kind == "job-wide":
            for n in members:
                n.data_rate = DATA_CAP
        elif straggler is not None:
            if kind == "network":
                straggler.data_rate = DATA_CAP
            elif kind == "fabric":
                straggler.fabric_rate = FABRIC_DEGRADED
            elif kind == "throttled":
                straggler.throttled = True
        jobs.append(job)
    return jobs


def run_scenario(scenario: Scenario, nodes_per_job: int, seconds: int, run: int, tmp: Path, nvml_dir: Path,
                 device_filter: bool, workers: int | None = None, profile: str = PROFILE,
                 emulation: Emulation = Emulation()) -> Outcome:  # fmt: skip
    from bench.lab_rank import POWER_MW
    from tests.fakes.fleet import Collector, cli
    from tests.fakes.iops_cap import IopsCapUnavailable, iops_cap
    from tests.fakes.nvml.plugin import POWER_ENV, STATE_ENV
    from tests.fakes.nvml.state import PROFILES, PowerTimeline

    tag = f"{os.getpid() % 100000}-{run}"
    jobs = plan(scenario, nodes_per_job, run, tag)
    nodes = [n for job in jobs for n in job.nodes]
    shm = Path("/dev/shm")
    with contextlib.ExitStack() as stack:
        state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None)))
        rig = Rig(stack, tag, nodes, shallow=emulation.collective == "bursts")
        rig.build()
        config: dict[str, Any] = dict(DETECTOR)
        wraps: dict[int, Any] = {}
        if scenario.kind == "storage":
            # Every node its own disk; the straggler's is read by its rank and capped.
            for n in nodes:
                size = (256 << 20) if n is jobs[0].straggler else (16 << 20)
                n.device = stack.enter_context(loop_device(tmp / f"disk{n.index}.img", size, direct_io=True))
            straggler = jobs[0].straggler
            assert straggler is not None
            assert straggler.device is not None
            try:
                wraps[straggler.index] = stack.enter_context(iops_cap(straggler.device, STRAGGLER_IOPS))
            except IopsCapUnavailable as err:
                raise LabError(f"no block throttle here: {err}") from err
            config["volumes"] = {Path(straggler.device).name: {"iops": STRAGGLER_IOPS}}
        (tmp / "collector.toml").write_text(toml({"detector": config}))

        server = popen(["ip", "netns", "exec", rig.data_ns, sys.executable, str(REPO / "bench" / "lab_server.py"),
                        "0.0.0.0", str(SERVER_PORT), str(OBJECT_BYTES)], tmp / "server.log")  # fmt: skip
        stack.callback(stop, server)
        assert server.stdout is not None
        if server.stdout.readline().strip() != "serving":
            raise LabError(f"the data server did not start: {(tmp / 'server.log').read_text()[-300:]}")
        prefix = ["ip", "netns", "exec", rig.mgmt_ns]
        # The default serve, as users run it: a front and a worker per core, each node on the
        # worker its node id owns, each job judged by the worker its key owns (docs/fleet-scale.md).
        collector = Collector(tmp / "c.db", COLLECTOR_PORT, host=COLLECTOR_ADDR, prefix=prefix, workers=workers,
                              args=["--config", str(tmp / "collector.toml")])  # fmt: skip
        # Its cleanup before its start: a SIGTERM while it starts (a busy machine takes seconds) kills it too.
        stack.callback(collector.kill)
        try:
            collector.start()
        except AssertionError as err:
            raise LabError(f"the collector did not start: {err}") from None
        polls_path = tmp / "polls.jsonl"
        poller = popen([*prefix, sys.executable, str(REPO / "bench" / "lab_poll.py"), collector.address,
                        str(polls_path), str(POLL_SECONDS)], tmp / "poll.log")  # fmt: skip
        stack.callback(stop, poller)

        # The agents first, on idle GPUs (no process yet), as on a node before its job starts.
        link_speeds: dict[str, dict[str, str]] = {}
        gpus: dict[int, dict[str, str]] = {}
        for n in nodes:
            state = PROFILES[profile](count=1)
            state.clock = None
            gpu = state.gpus[0]
            power = emulation.power_fields(n.index)
            if power is not None:
                # The sensor from the agent's start: the draw's timeline, idle until the rank drives it.
                for key, value in power.items():
                    setattr(gpu, key, value)
                PowerTimeline(state_dir / f"power-{n.index}").set(POWER_MW[profile][0])
            gpu.uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'lab-cluster/{tag}/{n.node_id}')}"
            gpu.serial = f"1652{n.index:04d}{run % 10000:04d}0"
            gpus[n.index] = {"uuid": gpu.uuid, "serial": gpu.serial}
            state.write(state_dir / f"nvml-{n.index}")
            speeds = {"data0": f"{n.data_rate}M", "fab0": f"{n.fabric_rate}M"}
            link_speeds[n.node_id] = speeds
            extra = [a for dev, rate in speeds.items() for a in ("--link-speed", f"{dev}={rate}")]
            if n.device is not None and device_filter:
                extra += [DEVICE_FLAG, f"^{Path(n.device).name}$"]
            env = {"LD_LIBRARY_PATH": str(nvml_dir), STATE_ENV: str(state_dir / f"nvml-{n.index}"),
                   POWER_ENV: str(state_dir / f"power-{n.index}")}  # fmt: skip
            extra += source_setup(emulation, n, gpu.uuid, state_dir, tmp, stack)
            agent = popen(n.exec(sys.executable, "-m", "nodeagent.agent", "--log-level", "warning", "run",
                                 "--collector", collector.address, "--node-id", n.node_id, "--interval", "1",
                                 "--deadline", str(seconds + 240), *extra),
                          tmp / f"agent-{n.index}.log", env)  # fmt: skip
            stack.callback(stop, agent)
        if not wait_until(lambda: _seen(polls_path) >= {n.node_id for n in nodes}, 60, 0.5):
            logs = " | ".join((tmp / f"agent-{n.index}.log").read_text()[-200:] for n in nodes)
            raise LabError(f"{scenario.name}: not every agent reached the collector in 60 s: {logs}")

        # The job: one rank per node, the torch.distributed environment a launcher gives.
        ranks = {}
        for job in jobs:
            world = len(job.nodes)
            master = job.nodes[0]
            for n in job.nodes:
                nxt = job.nodes[(n.rank + 1) % world]
                k = emulation.scale
                if n.device is not None and n is job.straggler:
                    data = {"kind": "device", "device": n.device, "device_bytes": 256 << 20, "read_bytes": READ_BYTES,
                            "reads_per_batch": max(1, round(READS_PER_BATCH * k)), "threads": 4,
                            "depth": 2}  # fmt: skip
                else:
                    data = {"kind": "http", "host": n.server_addr, "port": SERVER_PORT, "object_bytes": OBJECT_BYTES,
                            "batch_bytes": round(BATCH_BYTES * k), "threads": 2, "depth": 2}  # fmt: skip
                spec = {"rank": n.rank, "world_size": world, "listen": [n.fabric_addr, RING_PORT],
                        "next": [nxt.fabric_addr, RING_PORT], "data": data, "compute_seconds": COMPUTE_SECONDS * k,
                        "gradient_bytes": emulation.gradient_bytes, "buckets": emulation.buckets,
                        "power": emulation.power_fields(n.index), "seconds": seconds, "profile": profile,
                        "gpu": gpus[n.index], "throttle": THROTTLE if n.throttled else None,
                        "nvml_state": str(state_dir / f"nvml-{n.index}"),
                        "power_live": str(state_dir / f"power-{n.index}"), "truth": str(tmp / f"truth-{n.index}.json"),
                        "ready": str(tmp / f"ready-{n.index}")}  # fmt: skip
                (tmp / f"rank-{n.index}.json").write_text(json.dumps(spec))
                env = {"TORCHELASTIC_RUN_ID": job.run_id, "MASTER_ADDR": master.fabric_addr,
                       "MASTER_PORT": str(RING_PORT), "WORLD_SIZE": str(world), "RANK": str(n.rank),
                       "LOCAL_RANK": "0", "GROUP_RANK": str(n.rank), "LOCAL_WORLD_SIZE": "1"}  # fmt: skip
                command = n.exec(sys.executable, str(REPO / "bench" / "lab_rank.py"), str(tmp / f"rank-{n.index}.json"))
                if n.index in wraps:
                    command = wraps[n.index](command)
                ranks[n.node_id] = popen(command, tmp / f"rank-{n.index}.log", env)
                stack.callback(stop, ranks[n.node_id])

        def failed() -> str | None:
            for n in nodes:
                proc = ranks[n.node_id]
                if proc.poll() is not None and not (tmp / f"truth-{n.index}.json").exists():
                    log = (tmp / f"rank-{n.index}.log").read_text()[-400:]
                    return f"rank on {n.node_id} exited {proc.returncode}: {log}"
            return None

        ready = wait_until(lambda: all((tmp / f"ready-{n.index}").exists() for n in nodes) or failed() is not None, 90)
        if not ready or failed() is not None:
            raise LabError(f"{scenario.name}: the job did not start: {failed() or 'no rank ready in 90 s'}")
        cpu0 = _cpu_times()
        # Until the job's end, minus a margin for the final answers while it still runs.
        end = time.time() + seconds - 3
        while time.time() < end:
            if (why := failed()) is not None:
                raise LabError(f"{scenario.name}: {why}")
            time.sleep(0.5)
        try:
            # Both at once: on a loaded machine one CLI's start takes seconds, and the job must still
            # run when the second answers (else its nodes read idle, the ranks gone).
            with ThreadPoolExecutor(2) as pool:
                asked = [pool.submit(cli, "collector", what, "--json", "--collector", collector.address, prefix=prefix)
                         for what in ("jobs", "nodes")]  # fmt: skip
                final_jobs, final_nodes = (_json(f.result()) for f in asked)
        except AssertionError as err:
            raise LabError(f"{scenario.name}: the collector did not answer: {str(err)[-300:]}") from None
        for n in nodes:
            try:
                ranks[n.node_id].wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise LabError(f"{scenario.name}: the rank on {n.node_id} did not finish") from None
            if (why := failed()) is not None:
                raise LabError(f"{scenario.name}: {why}")
        cpu1 = _cpu_times()
        total, idle = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        truths = {n.node_id: json.loads((tmp / f"truth-{n.index}.json").read_text()) for n in nodes}
        polls = [json.loads(line) for line in polls_path.read_text().splitlines() if line.strip()]
        onset = min(float(t["started_unix_seconds"]) for t in truths.values())
        # The trace: from the agents' start (idle GPUs, no job yet) to the job's end.
        ended = max(float(t["ended_unix_seconds"]) for t in truths.values())
        trace = _stored_trace(tmp / "c.db", [n.node_id for n in nodes], tmp / "trace.jsonl", ended)
        final_jobs, final_nodes = _while_running(polls, truths, final_jobs, final_nodes)
    return Outcome(scenario.name, run, jobs, onset, truths, polls, final_jobs, final_nodes, config,
                   round(1 - idle / total, 3) if total else 0.0, device_filter, trace, link_speeds,
                   {n.node_id: Path(n.device).name for n in nodes if n.device}, emulation)  # fmt: skip


def _while_running(
    polls: list[dict[str, Any]],
    truths: dict[str, dict[str, Any]],
    jobs: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The final answers, taken while every rank still ran: the CLI's, unless the machine was so
    loaded that the job had ended before they came (a CLI start takes seconds there: the job's
    verdict is gone or stale, or a node reads idle); then the
    last poll begun ``FINAL_MARGIN`` seconds before the first rank ended (the poller runs both
    commands in one process, every 2 s)."""
    first_end = min(float(t["ended_unix_seconds"]) for t in truths.values())
    asked = max((float(j.get("time_unix_seconds") or 0) for j in jobs), default=0.0)
    idle = any(n.get("state") == "idle" for n in nodes)
    if jobs and asked < first_end - 1 and not idle:
        return jobs, nodes
    done = [p for p in polls if "error" not in p and "jobs" in p and p["t"] <= first_end - FINAL_MARGIN]
    return (done[-1]["jobs"], done[-1]["nodes"]) if done else (jobs, nodes)


def _json(text: str) -> list[dict[str, Any]]:
    value = json.loads(text)
    return list(value) if isinstance(value, list) else []


def _seen(polls: Path) -> set[str]:
    """The nodes the collector knew at its last poll."""
    try:
        lines = polls.read_text().splitlines()
    except FileNotFoundError:
        return set()
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            return {n["node_id"] for n in json.loads(line).get("nodes", []) if n.get("reports_total", 0) >= 2}
    return set()


def _stored_trace(db: Path, node_ids: list[str], out: Path, until: float) -> Path:
    """Every node's stored reports up to ``until``, one trace in time order (a multi-node trace),
    from every worker's database (``serve --workers``: each worker holds the nodes its node ids
    own, and a node that failed over has reports in two)."""
    from nodeagent.collector.store.database import read_stored_reports
    from nodeagent.core.wire.trace import TraceWriter

    reports = []
    for stored in [db, *sorted(db.parent.glob(f"{db.stem}.worker*{db.suffix}"))]:
        for node in node_ids:
            reports.extend(read_stored_reports(stored, node, 3600.0))
    reports = list({(r.node_id, r.epoch, r.seq): r for r in reports}.values())
    reports = sorted(
        (r for r in reports if r.time_unix_seconds <= until), key=lambda r: (r.time_unix_seconds, r.node_id)
    )
    with out.open("w") as stream:
        writer = TraceWriter(stream)
        for report in reports:
            writer.write(report)
    return out


# ---- judging ----------------------------------------------------------------------------------------


def job_truth(job: Job, truths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The job's wait share per second and over the run: the mean over its ranks of data wait and
    collective; and each rank's shares."""
    per_rank = [truths[n.node_id] for n in job.nodes]
    seconds: dict[float, list[float]] = {}
    for t in per_rank:
        for second, data, _compute, coll in t["per_second"]:
            seconds.setdefault(second, []).append(data + coll)
    per_second = [[s, round(sum(v) / len(v), 4)] for s, v in sorted(seconds.items()) if len(v) == len(per_rank)]
    # The collective's own transfers: at each step the least time a rank spent in it (the last to
    # arrive waits for no one), as a share of the run; the rest of the collective is waiting.
    steps = [t.get("collective_per_step") or [] for t in per_rank]
    length = sum(t["ended_unix_seconds"] - t["started_unix_seconds"] for t in per_rank) / len(per_rank)
    transfer = sum(min(c) for c in zip(*steps, strict=False)) / length if all(steps) else None
    return {
        "wait_share": round(sum(t["wait_share"] for t in per_rank) / len(per_rank), 4),
        "transfer_share": None if transfer is None else round(transfer, 4),
        "per_second": per_second,
        "digests": sorted({t["result_digest"] for t in per_rank}),
        "steps": sorted({t["steps"] for t in per_rank}),
    }


def window_share(per_second: list[list[float]], end: float, window: float) -> float | None:
    shares = [share for second, share in per_second if end - window < second <= end]
    return round(sum(shares) / len(shares), 4) if shares else None


def match_verdict(job: Job, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The job verdict (a row with a live state; a job only in the history has none) that is this
    job's: by key, else by its nodes."""
    verdicts = [r for r in rows if r.get("state")]
    for r in verdicts:
        if r.get("job") == job.key:
            return r
    best = max(verdicts, key=lambda r: len(set(r.get("nodes") or ()) & set(job.node_ids)), default=None)
    if best is not None and set(best.get("nodes") or ()) & set(job.node_ids):
        return best
    return None


@dataclass
class Judged:
    scenario: str
    run: int
    job: str  # the lab's job (its run id)
    expected: str
    truth_share: float
    window_truth: float | None
    transfer_share: float | None  # of the wait share: the collective's own transfers
    rank_shares: str  # the straggler's (or every rank's mean) data / collective / compute
    others_collective: float | None
    verdict: str
    wait_ratio: float | None
    first_named_seconds: float | None
    named_polls: int  # polls whose verdict named some node of this job
    right_polls: int  # ... the true straggler
    waiting: str
    nodes: str  # the single-node verdicts at the end
    gpu_seconds_lost: float | None  # the live verdict's
    history_gpu_seconds_lost: float | None  # the history's (every GPU of the job)
    truth_gpu_seconds_lost: float  # the ranks' waits
    straggler_run: bool
    ok: bool
    why: str
    cpu_busy: float
    # The verdict's wait share was null: the reason its notes give (the product says it cannot tell).
    wait_unknown: str | None = None
    # What lifting the job's bottleneck is worth: the collector's prediction (``if_fixed.speedup``
    # of the job's row), and the job's steps per second by its ranks' own timers (the mean over
    # its ranks of their steps over their run), which ``payoff_table`` sets beside the clean run's.
    predicted_speedup: float | None = None
    steps_per_second: float | None = None


def steps_per_second(truths: list[dict[str, Any]]) -> float | None:
    """A job's steps a second by its ranks' own timers: the mean over its ranks."""
    rates = [t["steps"] / (t["ended_unix_seconds"] - t["started_unix_seconds"]) for t in truths
             if t.get("steps") and t["ended_unix_seconds"] > t["started_unix_seconds"]]  # fmt: skip
    return round(sum(rates) / len(rates), 4) if rates else None


def payoff_table(rows: list[Judged]) -> str:
    """Each slowed job's predicted speed-up beside the measured one: the clean run's steps per
    second (the same run number's, else the first) over the slowed job's, by the ranks' timers."""
    clean = {r.run: r.steps_per_second for r in rows if r.scenario == "clean" and r.steps_per_second}
    lines = [
        "| if fixed | run | job | predicted | measured: clean / slowed steps/s | error |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.scenario == "clean" or (not r.straggler_run and "slowed" not in r.verdict):
            continue
        reference = clean.get(r.run) or next(iter(clean.values()), None)
        measured = reference / r.steps_per_second if reference and r.steps_per_second else None
        predicted = "-" if r.predicted_speedup is None else f"{r.predicted_speedup:.2f}x"
        shown = "-" if measured is None else f"{measured:.2f}x ({reference:.2f} / {r.steps_per_second:.2f})"
        error = "-" if measured is None or r.predicted_speedup is None else f"{r.predicted_speedup / measured - 1:+.1%}"
        # Its first cell is not the scenario's name alone: readers key the judgement table's rows by it.
        lines.append(
            f"| {r.scenario}, if fixed | {r.run} | {r.job.rsplit('-', 1)[-1]} | {predicted} | {shown} | {error} |"
        )
    return "\n".join(lines) if clean else "(no clean run: no measured speed-up to set beside the predictions)"


def _verdict_words(v: dict[str, Any] | None) -> str:
    if v is None:
        return "no job verdict"
    named = ",".join(v.get("straggler_nodes") or ())
    cause = v.get("cause")
    if v.get("job_wide"):
        named = "job-wide"
    return f"{v['state']}" + (f", {named}" if named else "") + (f" ({cause})" if cause else "")


def judge(o: Outcome) -> list[Judged]:
    window = float(o.config["window_seconds"])
    nodes_by_id = {r.get("node_id"): r for r in o.final_nodes}
    out = []
    for job in o.jobs:
        truth = job_truth(job, o.truths)
        problems: list[str] = []
        # The rig made what the scenario says (the ranks' own timers), and the collective is real.
        if len(truth["digests"]) != 1 or len(truth["steps"]) != 1:
            problems.append(f"ranks disagree: digests {truth['digests']}, steps {truth['steps']}")
        problems += _truth_problems(job, o.truths, truth)
        s = job.straggler
        shares = o.truths[s.node_id] if s is not None else None
        others = [o.truths[n.node_id]["collective_share"] for n in job.nodes if n is not s]
        if shares is not None:
            rank_shares = (
                f"{shares['data_share']:.2f} / {shares['collective_share']:.2f} / {shares['compute_share']:.2f}"
            )
        else:
            mean = {k: sum(o.truths[n.node_id][k] for n in job.nodes) / len(job.nodes)
                    for k in ("data_share", "collective_share", "compute_share")}  # fmt: skip
            rank_shares = (
                f"{mean['data_share']:.2f} / {mean['collective_share']:.2f} / {mean['compute_share']:.2f} (mean)"
            )
        final = match_verdict(job, o.final_jobs)
        named_polls = right_polls = 0
        first: float | None = None
        for poll in o.polls:
            if poll["t"] < o.onset:
                continue
            v = match_verdict(job, poll.get("jobs") or [])
            if v is None or not v.get("straggler_nodes"):
                continue
            named_polls += 1
            if s is not None and list(v["straggler_nodes"]) == [s.node_id]:
                right_polls += 1
                if first is None and v.get("cause") == job.expected_cause:
                    first = round(poll["t"] - o.onset, 1)
        end = float(final.get("time_unix_seconds") or 0) if final else 0.0
        window_truth = window_share(truth["per_second"], end or max(p for p, _ in truth["per_second"]), window)
        ratio = final.get("wait_ratio") if final else None
        waiting = []
        for n in job.nodes:
            row = nodes_by_id.get(n.node_id, {})
            if row.get("state") == "waiting":
                waiting.append(f"{n.node_id}→{','.join(row.get('waiting_on') or ()) or '?'}")
        node_words = " ".join(
            f"{n.node_id}:{nodes_by_id.get(n.node_id, {}).get('state', '-')}"
            + (f"({c})" if (c := nodes_by_id.get(n.node_id, {}).get("cause")) else "")
            for n in job.nodes
        )
        unknown = unknown_reason(final)
        problems += _verdict_problems(job, final, first, named_polls - right_polls, ratio, window_truth, unknown)
        problems += _waiting_problems(job, nodes_by_id)
        # GPU-seconds lost: the live verdict's (since the roll-up followed the job), the history's,
        # and the ranks' own waits up to the verdict (one GPU a node).
        lost = 3600 * float(final["gpu_hours_lost"]) if final and final.get("gpu_hours_lost") is not None else None
        history = (final or {}).get("history") or {}
        history_lost = 3600 * float(history["gpu_hours_lost"]) if history.get("gpu_hours_lost") is not None else None
        until = end or float("inf")
        truth_lost = sum(d + c for n in job.nodes for t, d, _, c in o.truths[n.node_id]["per_second"] if t < until)
        out.append(Judged(o.scenario, o.run, job.run_id, job.expected, truth["wait_share"], window_truth,
                          truth["transfer_share"], rank_shares,
                          round(sum(others) / len(others), 4) if others and s is not None else None,
                          _verdict_words(final), ratio, first,
                          named_polls, right_polls, " ".join(waiting) or "-", node_words, lost, history_lost,
                          round(truth_lost, 1),
                          s is not None, not problems, "; ".join(problems), o.cpu_busy, unknown,
                          ((final or {}).get("if_fixed") or {}).get("speedup"),
                          steps_per_second([o.truths[n.node_id] for n in job.nodes])))  # fmt: skip
    return out


def _truth_problems(job: Job, truths: dict[str, dict[str, Any]], truth: dict[str, Any]) -> list[str]:
    """The rig did what the scenario says, by the ranks' own timers."""
    s = job.straggler
    others = [truths[n.node_id] for n in job.nodes if n is not s]
    problems = []
    if job.kind is None:
        if truth["wait_share"] > 0.3:
            problems.append(f"clean job waited {truth['wait_share']:.2f} of its time")
    elif job.kind == "job-wide":
        # Every rank waits for data; which one is last at a step varies (a link a little faster than
        # the others leaves its rank waiting in the collective instead), the others wait for it.
        data = sum(truths[n.node_id]["data_share"] for n in job.nodes) / len(job.nodes)
        low = [n.node_id for n in job.nodes if truths[n.node_id]["wait_share"] < 0.3]
        if low or data < 0.15:
            problems.append(f"job-wide: the ranks waited {data:.2f} for data; under 0.3 in all: {low}")
    elif s is not None:
        mine = truths[s.node_id]
        if job.kind in ("network", "storage") and mine["data_share"] < 0.2:
            problems.append(f"the straggler waited only {mine['data_share']:.2f} for data")
        if job.kind == "fabric" and mine["collective_share"] < 0.3:
            problems.append(f"the degraded fabric held the collective only {mine['collective_share']:.2f}")
        if job.kind == "throttled" and mine["compute_share"] < 0.6:
            problems.append(f"the throttled rank computed only {mine['compute_share']:.2f}")
        slow = [t["rank"] for t in others if t["collective_share"] < 0.2]
        if slow:
            problems.append(f"ranks {slow} waited under 0.2 in the collective")
    return problems


def unknown_reason(final: dict[str, Any] | None) -> str | None:
    """Where the verdict's wait share is null (the product cannot tell it with this GPU's readings
    at this step length), its reason: the evidence's ``wait_unknown_reason`` code (``no_swing``,
    ``short_phases``, ...), else the first note that says "unknown", else "no reason given" (a
    null the lab judges a miss). None where the verdict has a number (or there is none)."""
    if final is None or final.get("wait_ratio") is not None:
        return None
    code = (final.get("evidence") or {}).get("wait_unknown_reason")
    said = [str(n) for n in final.get("notes") or () if "unknown" in str(n).lower()]
    return str(code) if code else said[0] if said else "no reason given"


def _verdict_problems(job: Job, final: dict[str, Any] | None, first: float | None, wrong_polls: int,
                      ratio: float | None, window_truth: float | None,
                      unknown: str | None = None) -> list[str]:  # fmt: skip
    if final is None:
        return ["no job verdict for the job"]
    problems = []
    named = list(final.get("straggler_nodes") or ())
    if final.get("state") != job.expected_state:
        problems.append(f"state {final.get('state')}, expected {job.expected_state}")
    if job.straggler is not None:
        if named != [job.straggler.node_id] or final.get("cause") != job.expected_cause:
            problems.append(f"named {named} ({final.get('cause')}), expected {job.expected}")
        if first is None or first > NAMED_WITHIN_SECONDS:
            problems.append(f"first named after {first} s (bound {NAMED_WITHIN_SECONDS:g} s)")
    elif named:
        problems.append(f"named {named}, expected no node")
    if job.kind == "job-wide" and (not final.get("job_wide") or final.get("cause") != job.expected_cause):
        problems.append(f"job_wide {final.get('job_wide')} ({final.get('cause')}), expected job-wide (network)")
    if wrong_polls:
        problems.append(f"{wrong_polls} polls named a wrong node")
    # A wait share the product says it cannot tell (null, with its reason) is honest, not wrong.
    honest = ratio is None and unknown is not None and unknown != "no reason given"
    if (
        job.kind is not None
        and not honest
        and (ratio is None or window_truth is None or abs(ratio - window_truth) > RATIO_TOLERANCE)
    ):
        problems.append(f"wait ratio {ratio} vs truth {window_truth}")
    return problems


def _waiting_problems(job: Job, nodes_by_id: dict[Any, dict[str, Any]]) -> list[str]:
    problems = []
    for n in job.nodes:
        row = nodes_by_id.get(n.node_id, {})
        waiting = row.get("state") == "waiting"
        if job.straggler is not None and n is not job.straggler:
            if not waiting or job.straggler.node_id not in (row.get("waiting_on") or ()):
                problems.append(f"{n.node_id} is {row.get('state')} (on {row.get('waiting_on')}), expected waiting")
        elif waiting:
            problems.append(f"{n.node_id} waits on {row.get('waiting_on')}")
    return problems


def table(rows: list[Judged]) -> str:
    lines = [
        "| scenario | run | job | truth: job wait share (run / window; transfers) "
        "| straggler data / collective / compute "
        "| others' collective | job verdict | wait ratio | first named | polls named (right) | waiting nodes "
        "| node verdicts | GPU-s lost: live / history / truth | expected | ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        window = "-" if r.window_truth is None else f"{r.window_truth:.3f}"
        ratio = "-" if r.wait_ratio is None else f"{r.wait_ratio:.3f}"
        if r.wait_unknown is not None:
            ratio = f"unknown ({r.wait_unknown})"
        first = "-" if r.first_named_seconds is None else f"{r.first_named_seconds:.0f} s"
        others = "-" if r.others_collective is None else f"{r.others_collective:.2f}"
        transfer = "-" if r.transfer_share is None else f"{r.transfer_share:.2f}"
        job = r.job.rsplit("-", 1)[-1]
        lines.append(f"| {r.scenario} | {r.run} | {job} | {r.truth_share:.3f} / {window}; {transfer} "
                     f"| {r.rank_shares} | {others} | {r.verdict} | {ratio} | {first} "
                     f"| {r.named_polls} ({r.right_polls}) | {r.waiting} | {r.nodes} | {_lost(r)} | {r.expected} "
                     f"| {'yes' if r.ok else 'NO: ' + r.why} |")  # fmt: skip
    return "\n".join(lines)


def _lost(r: Judged) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    return f"{f(r.gpu_seconds_lost)} / {f(r.history_gpu_seconds_lost)} / {f(r.truth_gpu_seconds_lost)}"


def summary(rows: list[Judged]) -> str:
    stragglers = [r for r in rows if r.straggler_run]
    named = sum(1 for r in stragglers if r.first_named_seconds is not None and r.first_named_seconds <= 60)
    positives = sum(r.named_polls for r in rows)
    right = sum(r.right_polls for r in rows)
    precision = f"{right / positives:.3f}" if positives else "-"
    errors = [
        abs(r.wait_ratio - r.window_truth) for r in rows if r.wait_ratio is not None and r.window_truth is not None
    ]
    firsts = sorted(r.first_named_seconds for r in stragglers if r.first_named_seconds is not None)
    out = [
        f"straggler runs named with their cause within 60 s: {named} of {len(stragglers)}"
        + (f" (median {firsts[len(firsts) // 2]:.0f} s, max {firsts[-1]:.0f} s)" if firsts else ""),
        f"precision over every poll of every run: {precision} "
        f"({right} of {positives} polls naming a node named the straggler)",
        "wait ratio vs the ranks' timers: "
        + (f"max error {max(errors):.3f}, mean {sum(errors) / len(errors):.3f}" if errors else "-"),
        f"machine CPU busy during the runs: max {max((r.cpu_busy for r in rows), default=0):.2f}",
    ]
    return "\n".join(out)


# ---- recording ------------------------------------------------------------------------------------


def record(o: Outcome, directory: Path) -> None:
    """The run's multi-node trace (every node's reports, in time order, gzip) and its label."""
    directory.mkdir(parents=True, exist_ok=True)
    assert o.trace is not None
    with o.trace.open("rb") as src, gzip.open(directory / f"{o.scenario}.jsonl.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    jobs = []
    for job in o.jobs:
        truth = job_truth(job, o.truths)
        ranks = []
        for n in job.nodes:
            t = o.truths[n.node_id]
            ranks.append({"node": n.node_id, "rank": n.rank, "pid": t["pid"], "steps": t["steps"],
                          "started_unix_seconds": t["started_unix_seconds"],
                          "ended_unix_seconds": t["ended_unix_seconds"],
                          "data_share": t["data_share"], "compute_share": t["compute_share"],
                          "collective_share": t["collective_share"], "wait_share": t["wait_share"],
                          "per_second": t["per_second"]})  # fmt: skip
        jobs.append({
            "job": job.key, "run_id": job.run_id, "nodes": job.node_ids, "state": job.expected_state,
            "straggler": job.straggler.node_id if job.straggler else None, "cause": job.expected_cause,
            "job_wide": job.kind == "job-wide", "slow": job.kind,
            "onset_unix_seconds": o.onset if job.kind else None,
            "wait_share": truth["wait_share"], "transfer_share": truth["transfer_share"],
            "truth_per_second": truth["per_second"], "ranks": ranks,
        })  # fmt: skip
    label = {
        "scenario": o.scenario,
        "format": "lab-cluster/1",
        "trace": f"{o.scenario}.jsonl.gz",
        "nodes": [n.node_id for job in o.jobs for n in job.nodes],
        "onset_unix_seconds": o.onset,
        "jobs": jobs,
        "link_speeds": o.link_speeds,
        "devices": o.devices,
        "device_filter": o.device_filter,
        "detector": o.config,
        "step": {
            "compute_seconds": COMPUTE_SECONDS * o.emulation.scale,
            "batch_bytes": round(BATCH_BYTES * o.emulation.scale),
            "gradient_bytes": o.emulation.gradient_bytes,
            "buckets": o.emulation.buckets,
        },
        **({"emulation": o.emulation.words()} if o.emulation != Emulation() else {}),
        "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    (directory / f"{o.scenario}.label.json").write_text(json.dumps(label, separators=(",", ":")) + "\n")
    # The collector's settings of the run, for nodeagent-collector replay --config.
    (directory / f"{o.scenario}.collector.toml").write_text(toml({"detector": o.config}))


# ---- the command -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated; default: all")
    parser.add_argument("--seconds", type=int, default=60, help="seconds the job runs per run (from its start)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario (the straggler moves each run)")
    parser.add_argument("--nodes", type=int, default=4, help="nodes of a job (two-jobs: two such jobs)")
    parser.add_argument("--two-jobs-nodes", type=int, default=None,
                        help="nodes of each job in two-jobs (default: --nodes; 2 or 3 on a small machine)")  # fmt: skip
    parser.add_argument(
        "--record", type=Path, help="write each scenario's trace and label here (its first run; run N under runN/)"
    )
    parser.add_argument("--gpu", choices=GPU_CLASSES, default=PROFILE,
                        help="the emulated GPU: h100_sxm5 (GPM) or a100_sxm4 (no GPM: power tells)")  # fmt: skip
    parser.add_argument(
        "--power",
        default="ideal",
        help=f"how the GPU reads power: {', '.join(POWER_MODES)} (default ideal: the draw now)",
    )
    parser.add_argument(
        "--read-lag-ms",
        type=int,
        default=0,
        help="readings trail the draw by this many ms (0; 50-100 as on real boards)",
    )
    parser.add_argument(
        "--collective", default="bandwidth", help=f"the all-reduce: {', '.join(COLLECTIVES)} (default bandwidth)"
    )
    parser.add_argument(
        "--step",
        type=float,
        default=STEP_SECONDS,
        help=f"the healthy step in seconds (default {STEP_SECONDS}); e.g. 0.15, 0.5, 2",
    )
    parser.add_argument("--dcgm", action="store_true",
                        help="an emulated dcgm-exporter beside each agent: DCGM's SM activity the source "
                             "(GPUs without GPM)")  # fmt: skip
    parser.add_argument("--json-out", type=Path,
                        help="append each job run's judged row here as a JSON line (bench/lab_score.py)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=None,
                        help="serve --workers N (default: serve's own, a worker per core behind a front)")  # fmt: skip
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]

    def bad(message: str) -> None:
        parser.exit(2, f"lab_cluster: {message}\n")

    if unknown or not names:
        bad(f"unknown scenario {unknown[0] if unknown else args.scenarios!r}; choose from {', '.join(SCENARIOS)}")
    if args.seconds < 30:
        bad(f"--seconds {args.seconds}: at least 30 (a window and a verdict)")
    if args.runs < 1:
        bad(f"--runs {args.runs}: at least 1")
    if args.workers is not None and args.workers < 1:
        bad(f"--workers {args.workers}: at least 1")
    if not 3 <= args.nodes <= 16:
        bad(f"--nodes {args.nodes}: 3 to 16 (a straggler needs peers to be told apart from)")
    if args.power not in POWER_MODES:
        bad(f"--power {args.power!r}: one of {', '.join(POWER_MODES)}")
    if not LAG_RANGE_MS[0] <= args.read_lag_ms <= LAG_RANGE_MS[1]:
        bad(f"--read-lag-ms {args.read_lag_ms}: {LAG_RANGE_MS[0]} to {LAG_RANGE_MS[1]}")
    if args.collective not in COLLECTIVES:
        bad(f"--collective {args.collective!r}: one of {', '.join(COLLECTIVES)}")
    if not STEP_RANGE[0] <= args.step <= STEP_RANGE[1]:
        bad(f"--step {args.step:g}: {STEP_RANGE[0]:g} to {STEP_RANGE[1]:g} seconds")
    if args.dcgm and args.gpu != "a100_sxm4":
        bad(f"--dcgm: DCGM is the source of GPUs without GPM (--gpu a100_sxm4), not {args.gpu}")
    args.emulation = Emulation(args.power, args.read_lag_ms, args.collective, args.step, "dcgm" if args.dcgm else "")
    two = args.two_jobs_nodes or args.nodes
    if not 2 <= two <= 8:
        bad(f"--two-jobs-nodes {two}: 2 to 8")
    args.names = names
    args.two = two
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("lab_cluster: needs root (network namespaces, tc, loop devices, cgroups)", file=sys.stderr)
        return 1
    install_interrupts()
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        print(f"lab_cluster: needs {', '.join(missing)} (iproute2)", file=sys.stderr)
        return 1
    from tests.fakes.nvml.build import FakeNvmlUnavailable, build_fake_nvml

    try:
        nvml_dir = build_fake_nvml(REPO / "build" / "lab-nvml")
    except FakeNvmlUnavailable as err:
        print(f"lab_cluster: cannot build the fake NVML: {err}", file=sys.stderr)
        return 1
    device_filter = device_filter_supported()
    rows: list[Judged] = []
    started = time.monotonic()
    try:
        for run in range(args.runs):
            for name in args.names:
                scenario = SCENARIOS[name]
                per_job = args.two if scenario.jobs > 1 else args.nodes
                with tempfile.TemporaryDirectory(prefix=f"nodeagent-lab-cluster-{name}-") as tmp:
                    t0 = time.monotonic()
                    outcome = run_scenario(
                        scenario,
                        per_job,
                        args.seconds,
                        run,
                        Path(tmp),
                        nvml_dir,
                        device_filter,
                        args.workers,
                        args.gpu,
                        args.emulation,
                    )
                    if args.record is not None:
                        record(outcome, args.record if run == 0 else args.record / f"run{run}")
                    judged = judge(outcome)
                    rows.extend(judged)
                    if args.json_out is not None:
                        with args.json_out.open("a") as out:
                            for j in judged:
                                out.write(json.dumps({"gpu": args.gpu, "seconds": args.seconds,
                                                      **args.emulation.words(), **asdict(j)}) + "\n")  # fmt: skip
                    marks = ", ".join("ok" if j.ok else f"NO: {j.why}" for j in judged)
                    print(f"{name} run {run}: {time.monotonic() - t0:.0f} s, CPU {outcome.cpu_busy:.2f}: {marks}",
                          file=sys.stderr, flush=True)  # fmt: skip
    except LabError as err:
        print(f"lab_cluster: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lab_cluster: interrupted; everything it started is removed", file=sys.stderr)
        return 130
    print(table(rows))
    print()
    print(payoff_table(rows))
    print()
    print(summary(rows))
    if "storage" in args.names and not device_filter:
        print(f"storage: this agent has no {DEVICE_FLAG}: every agent saw every disk")
    print(f"\n{len(rows)} job runs in {time.monotonic() - started:.0f} s; {sum(r.ok for r in rows)} as expected")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
