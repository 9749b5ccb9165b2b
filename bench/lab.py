"""The bottleneck lab: real bottlenecks on this machine, the real agent and collector, and a
verdict checked against the training loop's own timers.

Each scenario starts an emulated training job (``bench/lab_job.py``: a loader feeds a loop whose
GPU compute is a timed wait, and whose compute share drives the fake NVML live) whose loader takes
its data through one real bottleneck. ``nodeagent run`` samples the host (in the loader's network
namespace where there is one) and streams to a real collector on loopback, configured with short
detector windows; ``nodeagent record`` writes the same node's trace beside it. Per scenario the
lab prints the truth (the loop's wait share), the collector's verdict (state, cause, starvation
ratio), the time to the first starved verdict (from the trace, replayed through the detector
with the collector's settings) and the counters that decided it.

  clean             a loader faster than the loop: not starved
  network           HTTP range reads from a server in a network namespace behind a veth shaped
                    with tc (tbf) below what the job needs; the veth's rate given (--link-speed)
  network-unrated   the same without the rate (the veth says 10 Gb/s): the detector names the
                    network by its flat receive plateau
  storage           random O_DIRECT reads by 8 threads from a loop device over a file here
  storage-throttled the same device capped with the block throttle (cgroup blkio), the cap given
                    to the detector as the volume's provisioned IOPS
  cpu               decode-like work in as many worker processes as there are cores
  single-core       the same work in one worker
  page-cache        a dataset that fits in memory on the throttled device: the first pass
                    storage-bound, later passes clean
  h2d               (--gpu only) large pageable host-to-device copies

Needs root (namespaces, tc, loop devices, cgroups). Everything it starts is removed when it ends,
also on Ctrl-C.

    sudo .venv/bin/python bench/lab.py [--scenarios clean,cpu] [--seconds 60] [--record DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.lab_rig import ENV_EXTRA, LabError, install_interrupts, loop_device, popen, stop, toml, wait_until  # noqa: E402

# Short windows so a verdict comes within half a minute; the rest is the default.
DETECTOR: dict[str, Any] = {
    "window_seconds": 20.0,
    "evaluate_seconds": 5.0,
    "warmup_seconds": 5.0,
    "gap_seconds": 10.0,
    "exit_seconds": 10.0,
}
NETWORK_RATE = "80mbit"  # tc's word; the job needs about twice this
NETWORK_RATE_BYTES_PER_SECOND = 80e6 / 8
THROTTLE_IOPS = 300


@dataclass
class Rig:
    """What a scenario's bottleneck gives the run: where processes start, the loader's spec, and
    what an operator of such a node would tell the agent and the detector."""

    loader: dict[str, Any]
    prefix: list[str] = field(default_factory=list)  # e.g. ip netns exec NS
    wrap: Callable[[list[str]], list[str]] = lambda command: command  # e.g. into a throttled cgroup
    link_speeds: dict[str, str] = field(default_factory=dict)
    detector: dict[str, Any] = field(default_factory=dict)
    # The truth's label: state and cause while the loop waits, and (page-cache) after the first pass.
    state: str = "starved"
    cause: str | None = None
    later: tuple[str, str | None] | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    rig: Callable[[contextlib.ExitStack, Path], Rig]
    gpu_only: bool = False


# ---- rigs --------------------------------------------------------------------------------------


def _network(rated: bool) -> Callable[[contextlib.ExitStack, Path], Rig]:
    def rig(stack: contextlib.ExitStack, tmp: Path) -> Rig:
        from tests.fakes.netns import VethPair, sh, veth_pair

        pair: VethPair = stack.enter_context(veth_pair(subnet="127.231.15", mtu=1500))
        # The server's side sends at the rented rate: what the loader receives is capped.
        sh(*pair.exec_a("tc", "qdisc", "add", "dev", pair.dev_a, "root", "tbf", "rate", NETWORK_RATE,
                        "burst", "32kb", "latency", "100ms"))  # fmt: skip
        size = 64 << 20
        server = popen(pair.exec_a(sys.executable, str(REPO / "bench" / "lab_server.py"), pair.addr_a, "8015",
                                    str(size)), tmp / "server.log")  # fmt: skip
        stack.callback(stop, server)
        assert server.stdout is not None
        if server.stdout.readline().strip() != "serving":
            raise LabError(f"the lab's HTTP server did not start: {(tmp / 'server.log').read_text()[-300:]}")
        loader = {"kind": "network", "server_host": pair.addr_a, "server_port": 8015, "object_bytes": size,
                  "batch_bytes": 1 << 20, "threads": 4, "compute_share": 0.4}  # fmt: skip
        return Rig(
            loader,
            prefix=["ip", "netns", "exec", pair.ns_b],
            link_speeds={pair.dev_b: NETWORK_RATE.replace("mbit", "M")} if rated else {},
            cause="network",
        )

    return rig


def _storage(stack: contextlib.ExitStack, tmp: Path) -> Rig:
    size = 512 << 20
    device = stack.enter_context(loop_device(tmp / "disk.img", size, direct_io=True))
    # Two threads of large reads: the device is busy all the time while the loader's threads use
    # little CPU (4 KiB reads by Python threads on a small machine are CPU-bound first: that run
    # is the cpu cause, rightly).
    loader = {"kind": "storage", "device": device, "device_bytes": size, "read_bytes": 4 << 20,
              "reads_per_batch": 8, "threads": 2, "compute_share": 0.5}  # fmt: skip
    return Rig(loader, cause="storage")


def _throttled(stack: contextlib.ExitStack, tmp: Path, loader: dict[str, Any], size: int) -> Rig:
    from tests.fakes.iops_cap import IopsCapUnavailable, iops_cap

    device = stack.enter_context(loop_device(tmp / "disk.img", size, direct_io=True))
    try:
        wrap = stack.enter_context(iops_cap(device, THROTTLE_IOPS))
    except IopsCapUnavailable as err:
        raise LabError(f"no block throttle here: {err}") from err
    name = Path(device).name
    volumes = {name: {"iops": THROTTLE_IOPS}}
    return Rig({**loader, "device": device, "device_bytes": size}, wrap=wrap, detector={"volumes": volumes},
               cause="storage")  # fmt: skip


def _storage_throttled(stack: contextlib.ExitStack, tmp: Path) -> Rig:
    loader = {"kind": "storage", "reads_per_batch": 30, "threads": 8, "compute_share": 0.5}
    return _throttled(stack, tmp, loader, 64 << 20)


def _page_cache(stack: contextlib.ExitStack, tmp: Path) -> Rig:
    # 9000 blocks at 300 reads a second: the first pass takes about 30 s, then all is cached.
    loader = {"kind": "storage", "buffered": True, "dataset_blocks": 9000, "reads_per_batch": 30, "threads": 8,
              "step_seconds": 30 / THROTTLE_IOPS * 0.5}  # fmt: skip
    rig = _throttled(stack, tmp, loader, 64 << 20)
    rig.later = ("busy", None)
    return rig


def _cpu(workers: int) -> Callable[[contextlib.ExitStack, Path], Rig]:
    def rig(stack: contextlib.ExitStack, tmp: Path) -> Rig:
        loader = {"kind": "cpu", "workers": workers, "rounds_per_batch": 2_000_000, "compute_share": 0.5}
        return Rig(loader, cause="cpu")

    return rig


def _clean(stack: contextlib.ExitStack, tmp: Path) -> Rig:
    return Rig({"kind": "clean", "batch_seconds": 0.005, "step_seconds": 0.05}, state="busy")


def _h2d(stack: contextlib.ExitStack, tmp: Path) -> Rig:
    return Rig({"kind": "h2d", "compute_share": 0.5}, cause="h2d")


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("clean", _clean),
        Scenario("network", _network(rated=True)),
        Scenario("network-unrated", _network(rated=False)),
        Scenario("storage", _storage),
        Scenario("storage-throttled", _storage_throttled),
        Scenario("cpu", _cpu(os.cpu_count() or 1)),
        Scenario("single-core", _cpu(1)),
        Scenario("page-cache", _page_cache),
        Scenario("h2d", _h2d, gpu_only=True),
    )
}
# page-cache needs its first pass (about 30 s), a window and the exit time after it.
MIN_SECONDS = {"page-cache": 90}


# ---- one run -------------------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: str
    truth: dict[str, Any]
    rig: Rig
    verdict: dict[str, Any]  # the collector's view of the node
    timeline: list[dict[str, Any]]  # the replayed trace's verdict per window step
    trace: Path
    config: dict[str, Any]

    @property
    def first_report(self) -> float:
        return float(self.timeline[0]["time_unix_seconds"]) if self.timeline else 0.0


def run_scenario(scenario: Scenario, seconds: int, tmp: Path, nvml_dir: Path | None, gpu: bool) -> Outcome:
    from tests.fakes.fleet import Collector, free_port
    from tests.fakes.nvml.plugin import STATE_ENV

    with contextlib.ExitStack() as stack:
        rig = scenario.rig(stack, tmp)
        config = {**DETECTOR, **rig.detector}
        (tmp / "collector.toml").write_text(toml({"detector": config}))
        (tmp / "agent.toml").write_text(toml({"link_speeds": rig.link_speeds}) if rig.link_speeds else "")
        env = dict(ENV_EXTRA)
        # The fake's state on tmpfs where there is one: the storage scenarios saturate the disk.
        shm = Path("/dev/shm")
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None))) / "nvml"
        if nvml_dir is not None:
            env["LD_LIBRARY_PATH"] = str(nvml_dir)
            env[STATE_ENV] = str(state)
        os.environ.update(env)  # the fleet's processes take the environment they are started in
        collector = Collector(tmp / "c.db", free_port(), args=["--config", str(tmp / "collector.toml")],
                              prefix=rig.prefix)  # fmt: skip
        if rig.prefix:
            collector.port = 8016  # inside the namespace: its own loopback, its own ports
        # Its cleanup before its start: a Ctrl-C while it starts (a busy machine takes seconds) kills it too.
        stack.callback(collector.kill)
        collector.start()
        spec = {**rig.loader, "seconds": seconds + 3, "truth": str(tmp / "truth.json"), "ready": str(tmp / "ready"),
                "nvml_state": str(state), "gpu": gpu}  # fmt: skip
        (tmp / "spec.json").write_text(json.dumps(spec))
        job = popen(rig.wrap([*rig.prefix, sys.executable, str(REPO / "bench" / "lab_job.py"),
                               str(tmp / "spec.json")]), tmp / "job.log")  # fmt: skip
        stack.callback(stop, job)
        wait_until(lambda: (tmp / "ready").exists() or job.poll() is not None, 60)
        if not (tmp / "ready").exists():
            raise LabError(f"{scenario.name}: the job did not start: {(tmp / 'job.log').read_text()[-500:]}")
        node = f"lab-{scenario.name}"
        agent_config = ["--config", str(tmp / "agent.toml")] if rig.link_speeds else []
        base = [sys.executable, "-m", "nodeagent.agent", "--log-level", "warning"]
        agent = popen([*rig.prefix, *base, "run", "--collector", collector.address, "--node-id", node,
                        "--interval", "1", "--max-reports", str(seconds), "--deadline", str(seconds + 60),
                        *agent_config], tmp / "agent.log")  # fmt: skip
        stack.callback(stop, agent)
        trace = tmp / f"{scenario.name}.jsonl"
        recorder = popen([*rig.prefix, *base, "record", "--out", str(trace), "--duration", str(seconds - 1),
                           "--interval", "1", "--node-id", node, *agent_config], tmp / "record.log")  # fmt: skip
        stack.callback(stop, recorder)
        # The verdict is read while the agent still reports: once done it says goodbye, and a
        # stopped node's verdict is of the past (`nodes` shows it `stopped`, without a cause).
        view = None
        end = time.monotonic() + seconds + 90
        while agent.poll() is None and time.monotonic() < end:
            with contextlib.suppress(StopIteration, AssertionError):
                seen = collector.node(node)
                if seen["state"] != "stopped":
                    view = seen
            time.sleep(1.0)
        for proc, what in ((agent, "agent"), (recorder, "record")):
            try:
                proc.wait(timeout=max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise LabError(f"{scenario.name}: nodeagent {what} did not finish") from None
            if proc.returncode != 0:
                log = (tmp / f"{what}.log").read_text()[-500:]
                raise LabError(f"{scenario.name}: nodeagent {what} exited {proc.returncode}: {log}")
        if view is None:
            raise LabError(f"{scenario.name}: the collector never showed {node} while it reported")
        job.wait(timeout=60)
        if not (tmp / "truth.json").exists():
            raise LabError(f"{scenario.name}: the job left no truth: {(tmp / 'job.log').read_text()[-500:]}")
        truth = json.loads((tmp / "truth.json").read_text())
    return Outcome(scenario.name, truth, rig, view, replay_timeline(trace, config), trace, config)


def replay_timeline(trace: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's verdict after every report of the trace, through a detector with ``config``."""
    from nodeagent.core.detector.config import DetectorConfig
    from nodeagent.core.detector.node import NodeDetector
    from nodeagent.core.wire.trace import read_trace

    detector: NodeDetector | None = None
    out = []
    with trace.open("rb") as stream:
        for _, report in read_trace(stream):
            if detector is None:
                detector = NodeDetector(report.node_id, DetectorConfig.from_mapping(config, source=str(trace)))
            out.append(detector.observe(report).to_plain())
    return out


# ---- judging -------------------------------------------------------------------------------------


@dataclass
class Judged:
    scenario: str
    truth_share: float  # the loop's wait share over the run
    overhead_share: float  # ... and its bookkeeping between steps (the GPU idles, nobody waits)
    window_truth: float | None  # ... over the final verdict's window
    state: str
    cause: str | None
    ratio: float | None
    first_starved_seconds: float | None
    evidence: dict[str, Any]
    expected: str
    ok: bool
    why: str
    # What lifting the bottleneck is worth: the collector's prediction (``if_fixed.speedup`` of
    # the node's row), and the loop's own: its steps per second without its waits over the
    # verdict's window, over its steps per second as they ran (1 / (1 - its window wait share)).
    predicted_speedup: float | None = None
    measured_speedup: float | None = None


def measured_speedup(window_wait: float | None) -> float | None:
    """The loop's steps per second with its waits for data lifted, over its steps per second as
    they ran: each step's compute stays (the GPU's is a timed wait), the waits go."""
    return None if window_wait is None or window_wait >= 1.0 else round(1.0 / (1.0 - window_wait), 4)


def judge(o: Outcome) -> Judged:
    window = float(o.config["window_seconds"])
    per_second = {int(t): share for t, share in o.truth["per_second"]}
    end = float(o.verdict.get("time_unix_seconds") or (o.timeline[-1]["time_unix_seconds"] if o.timeline else 0))
    recent = [per_second[s] for s in range(int(end - window) + 1, int(end) + 1) if s in per_second]
    window_truth = round(sum(recent) / len(recent), 4) if recent else None
    state, cause, ratio = o.verdict["state"], o.verdict.get("cause"), o.verdict.get("starvation_ratio")
    starved_at = next((v["time_unix_seconds"] for v in o.timeline if v["state"] == "starved"), None)
    first = None if starved_at is None else round(starved_at - o.first_report, 1)
    final_state, final_cause = o.rig.later or (o.rig.state, o.rig.cause)
    expected = final_state + (f" ({final_cause})" if final_cause else "")
    problems = []
    if state != final_state or (final_cause is not None and cause != final_cause):
        problems.append(f"verdict {state} ({cause}), expected {expected}")
    if o.rig.later is not None:
        # The first pass: storage-starved at some step while it lasted.
        causes = {v.get("cause") for v in o.timeline if v["state"] == "starved"}
        if o.rig.cause not in causes:
            problems.append(f"never starved ({o.rig.cause}) in the first pass")
    elif final_state == "starved":
        if ratio is None or window_truth is None or abs(ratio - window_truth) > 0.05:
            problems.append(f"ratio {ratio} vs truth {window_truth}")
        bound = window + float(o.config["evaluate_seconds"])
        if first is None or first > bound:
            problems.append(f"first starved verdict after {first} s (bound {bound:g} s)")
    if final_state != "starved" and any(v["state"] == "starved" for v in o.timeline) and o.rig.later is None:
        problems.append("starved at some step")
    truth, overhead = o.truth["wait_share"], o.truth.get("overhead_share", 0.0)
    fixed = o.verdict.get("if_fixed") or {}
    predicted = fixed.get("speedup")
    measured = measured_speedup(window_truth) if state == "starved" else None
    lifted = final_state == "starved" and o.rig.later is None and predicted is not None and measured is not None
    if lifted and abs(predicted / measured - 1.0) > 0.15:
        problems.append(f"if fixed: {predicted:.2f}x predicted, the loop's timers say {measured:.2f}x")
    return Judged(o.scenario, truth, overhead, window_truth, state, cause, ratio, first,
                  dict(o.verdict.get("evidence") or {}), expected, not problems, "; ".join(problems),
                  predicted, measured)  # fmt: skip


def table(rows: list[Judged]) -> str:
    lines = [
        "| scenario | truth: wait share (run / window) | loop overhead | verdict | starvation ratio | first starved "
        "| if fixed: predicted / loop's timers | expected | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        window = "-" if r.window_truth is None else f"{r.window_truth:.3f}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        first = "-" if r.first_starved_seconds is None else f"{r.first_starved_seconds:.0f} s"
        verdict = r.state + (f" ({r.cause})" if r.cause else "")
        worth = "-"
        if r.predicted_speedup is not None or r.measured_speedup is not None:
            worth = " / ".join("-" if x is None else f"{x:.2f}x" for x in (r.predicted_speedup, r.measured_speedup))
        lines.append(f"| {r.scenario} | {r.truth_share:.3f} / {window} | {r.overhead_share:.3f} | {verdict} "
                     f"| {ratio} | {first} | {worth} | {r.expected} "
                     f"| {'yes' if r.ok else 'NO: ' + r.why} |")  # fmt: skip
    return "\n".join(lines)


def evidence_lines(rows: list[Judged]) -> str:
    out = []
    for r in rows:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(r.evidence.items()))
        out.append(f"{r.scenario}: {shown or '(no evidence: not starved)'}")
    return "\n".join(out)


def record(o: Outcome, directory: Path) -> None:
    """The trace and its label: the truth per second, what the verdict must be, the settings."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(o.trace, directory / f"{o.scenario}.jsonl")
    label = {
        "scenario": o.scenario,
        "state": o.rig.state,
        "cause": o.rig.cause,
        "later": list(o.rig.later) if o.rig.later else None,
        "first_pass_end_unix_seconds": o.truth.get("first_pass_end_unix_seconds"),
        "wait_share": o.truth["wait_share"],
        "overhead_share": o.truth.get("overhead_share"),
        "truth_per_second": o.truth["per_second"],
        "detector": o.config,
        "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    (directory / f"{o.scenario}.label.json").write_text(json.dumps(label, indent=1) + "\n")


# ---- the command -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(n for n, s in SCENARIOS.items() if not s.gpu_only),
                        help="comma-separated; default: all but the GPU-only ones")  # fmt: skip
    parser.add_argument("--seconds", type=int, default=45, help="reports (one a second) per scenario")
    parser.add_argument("--record", type=Path, help="write each scenario's trace and label here")
    parser.add_argument("--gpu", action="store_true", help="a real CUDA step and the real driver (PyTorch)")
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        parser.exit(2, f"lab: unknown scenario {unknown[0] if unknown else args.scenarios!r}; "
                       f"choose from {', '.join(SCENARIOS)}\n")  # fmt: skip
    gpu_only = [n for n in names if SCENARIOS[n].gpu_only and not args.gpu]
    if gpu_only:
        parser.exit(2, f"lab: scenario {gpu_only[0]!r} needs --gpu\n")
    if args.seconds < 30:
        parser.exit(2, f"lab: --seconds {args.seconds}: at least 30 (a window and a verdict)\n")
    args.names = names
    return args


def check_gpu() -> None:
    """--gpu: PyTorch with a CUDA GPU, or one line why not (exit 1)."""
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise SystemExit("lab: --gpu needs PyTorch with CUDA (pip install torch); it is not installed") from None
    if not torch.cuda.is_available():
        raise SystemExit("lab: --gpu needs a CUDA GPU; PyTorch sees none")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.gpu:
        check_gpu()
    if os.geteuid() != 0:
        print("lab: needs root (network namespaces, tc, loop devices, cgroups)", file=sys.stderr)
        return 1
    # Ctrl-C and SIGTERM unwind the same way: every rig's cleanup runs. SIGINT is set here too, not
    # left as inherited: started from a background job of a shell, it would be ignored.
    install_interrupts()
    nvml_dir = None
    if not args.gpu:
        from tests.fakes.nvml.build import FakeNvmlUnavailable, build_fake_nvml

        try:
            nvml_dir = build_fake_nvml(REPO / "build" / "lab-nvml")
        except FakeNvmlUnavailable as err:
            print(f"lab: cannot build the fake NVML: {err}", file=sys.stderr)
            return 1
    rows: list[Judged] = []
    started = time.monotonic()
    try:
        for name in args.names:
            seconds = max(args.seconds, MIN_SECONDS.get(name, 0))
            with tempfile.TemporaryDirectory(prefix=f"nodeagent-lab-{name}-") as tmp:
                t0 = time.monotonic()
                outcome = run_scenario(SCENARIOS[name], seconds, Path(tmp), nvml_dir, args.gpu)
                if args.record is not None:
                    record(outcome, args.record)
                rows.append(judge(outcome))
                print(f"{name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    except LabError as err:
        print(f"lab: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lab: interrupted; everything it started is removed", file=sys.stderr)
        return 130
    print(table(rows))
    print()
    print(evidence_lines(rows))
    print(f"\n{len(rows)} scenarios in {time.monotonic() - started:.0f} s; "
          f"{sum(r.ok for r in rows)} with the right verdict")  # fmt: skip
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
