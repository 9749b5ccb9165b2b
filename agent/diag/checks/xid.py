"""Xid errors per GPU: from the kernel log since boot when it can be read, else the Xid events NVML
delivered while diag watched. Xids that mean the GPU or its data cannot be trusted fail; the
others (most are raised by applications: 13, 31, 43) warn."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.kernel_log import parse_xids, pci_address
from nodeagent.agent.diag.model import CheckResult, failed, plural, skipped, summarize, warned
from nodeagent.agent.gpu.events import CRITICAL_XIDS
from nodeagent.v1 import nodeagent_pb2 as pb

# What the common Xids mean (NVIDIA's Xid catalogue), for the hint.
MEANINGS = {
    13: "graphics engine exception (usually the application)",
    31: "GPU memory page fault (usually the application)",
    43: "GPU stopped processing (usually the application)",
    45: "preemptive cleanup after another error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def check(ctx: DiagContext, info: Mapping[int, pb.GpuInfo]) -> list[CheckResult]:
    group = plural(len(info), "GPU")
    log = ctx.kernel_log
    by_subject: dict[str, Counter[int]] = {}
    if log.source:
        by_pci = {pci_address(g.pci_bus_id): i for i, g in info.items() if g.pci_bus_id}
        for record in parse_xids(log.lines):
            index = by_pci.get(record.pci)
            domain, bus, device = record.pci
            subject = f"gpu:{index}" if index is not None else f"pci:{domain:04x}:{bus:02x}:{device:02x}"
            by_subject.setdefault(subject, Counter())[record.xid] += 1
        source = f"kernel log ({log.source})"
    else:
        events = [e for e in ctx.observation.events if e.kind == "xid" and e.attributes.get("xid", "").isdigit()]
        for event in events:
            by_subject.setdefault(event.subject, Counter())[int(event.attributes["xid"])] += 1
        if not by_subject:
            reason = f"kernel log not readable: {log.unreadable_reason}; no Xid event while watching"
            return [skipped("gpu.xid", group, reason)]
        source = "NVML events"
    problems = [_result(subject, xids, source) for subject, xids in sorted(by_subject.items())]
    return summarize("gpu.xid", group, problems, f"none in the {source}", "none")


def _result(subject: str, xids: Counter[int], source: str) -> CheckResult:
    value = ", ".join(f"Xid {x} ×{n}" for x, n in sorted(xids.items()))
    critical = sorted(x for x in xids if x in CRITICAL_XIDS)
    worst = critical[0] if critical else max(xids, key=lambda x: xids[x])
    meaning = MEANINGS.get(worst, "see NVIDIA's Xid catalogue")
    if critical:
        hint = f"Xid {worst}: {meaning}; drain the node, reset the GPU or reboot, replace it if it returns"
        return failed("gpu.xid", subject, value, "none", hint)
    return warned("gpu.xid", subject, value, "none", f"Xid {worst}: {meaning} (from the {source})")
