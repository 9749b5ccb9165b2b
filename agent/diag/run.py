"""One diag run: observe the node, run every area's checks, probe storage when asked."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nodeagent.agent.diag.checks import AREAS, DiagContext
from nodeagent.agent.diag.checks import collector as collector_check
from nodeagent.agent.diag.kernel_log import KernelLog, read_kernel_log
from nodeagent.agent.diag.model import NODE, CheckResult, DiagReport, failed, passed, warned
from nodeagent.agent.diag.observe import observe
from nodeagent.agent.diag.probe import ProbeError, ProbeOptions, ProbeResult, run_probe
from nodeagent.agent.diag.profile import ProbeExpectations, Profile
from nodeagent.agent.sources import Roots


@dataclass(frozen=True, slots=True)
class DiagOptions:
    profile: Profile = field(default_factory=Profile)
    roots: Roots = field(default_factory=Roots)
    window_seconds: float = 1.0  # between the two samples; counters must not grow in it
    kernel_log_path: str | None = None  # None: this machine's kernel log
    probe: ProbeOptions | None = None
    node_id: str | None = None


def run_diag(options: DiagOptions) -> DiagReport:
    started = time.monotonic()
    # The kernel log and the collector are asked while the window runs: they cost no extra time.
    side: dict[str, Any] = {}

    def meanwhile() -> None:
        # Each is bounded (2 s); side by side, the worst case stays well inside the 5 s budget.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="diag-collector") as pool:
            collector = pool.submit(collector_check.check, options.profile.collector.address)
            side["kernel_log"] = read_kernel_log(options.kernel_log_path)
            side["collector"] = collector.result()

    observation = observe(options.roots, options.window_seconds, meanwhile, node_id=options.node_id)
    kernel_log: KernelLog = side["kernel_log"]
    ctx = DiagContext(profile=options.profile, roots=options.roots, observation=observation, kernel_log=kernel_log)
    results: list[CheckResult] = []
    for area, check in AREAS:
        try:
            results.extend(check(ctx))
        except Exception as err:  # one broken area must not hide the others' results
            hint = "diag could not finish this area's checks: report it with the --json output"
            results.append(warned(f"{area}.error", NODE, f"{type(err).__name__}: {err}", "", hint))
    results.append(side["collector"])
    probe_figures = None
    if options.probe is not None:
        probe_results, result = _probe(options.probe, options.profile.probe)
        results += probe_results
        probe_figures = result.to_dict() if result is not None else None
    return DiagReport(
        node_id=observation.info.node_id,
        profile=options.profile.name,
        results=tuple(results),
        duration_seconds=time.monotonic() - started,
        probe=probe_figures,
    )


def _probe(options: ProbeOptions, expect: ProbeExpectations) -> tuple[list[CheckResult], ProbeResult | None]:
    subject = f"mount:{options.path}"
    try:
        result = run_probe(options)
    except ProbeError as err:
        return [warned("probe.read", subject, f"could not probe: {err}", "", "run the probe on a writable mount")], None
    value = (
        f"{result.read_bytes_per_second / 1e6:,.0f} MB/s, {result.read_iops:,.0f} IOPS "
        f"(4 KiB random, queue depth {result.queue_depth}, {result.read_latency_seconds * 1e6:,.0f} µs)"
    )
    wanted = []
    if expect.min_read_bytes_per_second is not None:
        wanted.append(f"≥ {expect.min_read_bytes_per_second / 1e6:,.0f} MB/s")
    if expect.min_read_iops is not None:
        wanted.append(f"≥ {expect.min_read_iops:,.0f} IOPS")
    slow = (expect.min_read_bytes_per_second or 0) > result.read_bytes_per_second or (
        expect.min_read_iops or 0
    ) > result.read_iops
    if slow:
        hint = "the volume reads slower than rented: check its attachment (transport), its tier and its load"
        return [failed("probe.read", subject, value, ", ".join(wanted), hint)], result
    return [passed("probe.read", subject, value, ", ".join(wanted))], result
