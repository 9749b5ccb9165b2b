"""NVLink: active links per GPU against what was rented, each link's speed, and its error counters.

A link down makes collectives slower or routes them over PCIe; errors that grow while diag
watches mean a link failing now. Without an expected link count a link is suspect when other
GPUs of the node have it up.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import CheckResult, failed, passed, plural, skipped, summarize, warned
from nodeagent.core.quantities.units import format_bits
from nodeagent.v1 import nodeagent_pb2 as pb

# Counters that count link-level retransmissions and retraining: growth means failing now.
GROWTH_FAILS = ("replay_errors_total", "recovery_errors_total")
ERROR_COUNTERS = ("replay_errors_total", "recovery_errors_total", "crc_flit_errors_total", "crc_data_errors_total")
_DOWN_HINT = (
    "NVLink link down: collectives slow down or fall back to PCIe; check `nvidia-smi nvlink -s`, reset the GPU "
    "(and the fabric manager on NVSwitch systems), or drain for repair"
)


def run(ctx: DiagContext) -> list[CheckResult]:
    info = {g.index: g for g in ctx.observation.info.gpu.gpus}
    gpus = [g for g in ctx.observation.last.gpus if not g.lost and g.index in info]
    if ctx.observation.info.gpu.unavailable_reason or not gpus:
        return []  # the GPU area already said why
    expected = ctx.profile.gpu.nvlinks_per_gpu
    if not any(info[g.index].nvlink_count for g in gpus):
        if expected:
            hint = "the GPUs report no NVLink: a PCIe variant, or the NVLink bridges/fabric missing"
            return [failed("nvlink.links", plural(len(gpus), "GPU"), "no NVLink", f"{expected} per GPU", hint)]
        return [skipped("nvlink.links", plural(len(gpus), "GPU"), "these GPUs have no NVLink")]
    return [*_links(gpus, expected), *_speed(ctx, gpus), *_errors(ctx, gpus)]


def _links(gpus: Sequence[pb.GpuSample], expected: int | None) -> list[CheckResult]:
    active = {g.index: [link.link for link in g.nvlinks if link.active] for g in gpus}
    most = max(len(links) for links in active.values())
    problems: list[CheckResult] = []
    for g in gpus:
        count = len(active[g.index])
        down = [link.link for link in g.nvlinks if link.HasField("active") and not link.active]
        target = expected if expected is not None else most
        want = f"{expected} active per GPU" if expected is not None else f"{most} active like the other GPUs"
        short = count < target
        for link in down:
            value = f"down ({count} of {len(g.nvlinks)} links active)"
            subject = f"gpu:{g.index}/nvlink:{link}"
            if expected is not None and short:
                problems.append(failed("nvlink.links", subject, value, want, _DOWN_HINT))
            else:
                problems.append(warned("nvlink.links", subject, value, want, _DOWN_HINT))
        if short and not down:
            value = f"{count} active of {len(g.nvlinks)}"
            problems.append(failed("nvlink.links", f"gpu:{g.index}", value, want, _DOWN_HINT))
        elif expected is not None and count > expected:
            hint = "more links than the profile says: is it the GPU model rented?"
            problems.append(warned("nvlink.links", f"gpu:{g.index}", f"{count} active", f"{expected} per GPU", hint))
    want = f"{expected} per GPU" if expected is not None else ""
    return summarize("nvlink.links", plural(len(gpus), "GPU"), problems, f"{most} active on every GPU", want)


def _speed(ctx: DiagContext, gpus: Sequence[pb.GpuSample]) -> list[CheckResult]:
    group = plural(len(gpus), "GPU")
    minimum = ctx.profile.gpu.nvlink_min_speed_bytes_per_second
    speeds: dict[tuple[int, int], float] = {}
    for g in gpus:
        extra = ctx.observation.gpu_extras.get(g.index)
        if extra is None:
            continue
        known = extra.nvlink_speeds_bytes_per_second
        for link in g.nvlinks:
            speed = known[link.link] if link.link < len(known) else None
            if link.active and speed:
                speeds[(g.index, link.link)] = speed
    if not speeds:
        return [skipped("nvlink.speed", group, "link speeds not reported")]
    fastest = max(speeds.values())
    floor = minimum if minimum is not None else fastest
    problems: list[CheckResult] = []
    for (index, number), speed in sorted(speeds.items()):
        if speed >= floor * 0.99:
            continue
        subject = f"gpu:{index}/nvlink:{number}"
        if minimum is not None:
            hint = "the link runs slower than rented: reset the GPU; if it stays slow, drain for repair"
            problems.append(failed("nvlink.speed", subject, _gbytes(speed), f"≥ {_gbytes(minimum)}", hint))
        else:
            hint = "the link trained slower than the node's others: reset the GPU; drain for repair if it stays"
            problems.append(warned("nvlink.speed", subject, _gbytes(speed), _gbytes(fastest), hint))
    expected = f"≥ {_gbytes(minimum)}" if minimum is not None else ""
    return summarize("nvlink.speed", group, problems, f"{_gbytes(fastest)} per link, each way", expected)


def _errors(ctx: DiagContext, gpus: Sequence[pb.GpuSample]) -> list[CheckResult]:
    observation = ctx.observation
    problems: list[CheckResult] = []
    links = 0
    for g in gpus:
        before = observation.first_gpu(g.index)
        earlier = {link.link: link for link in before.nvlinks} if before is not None else {}
        for link in g.nvlinks:
            links += 1
            subject = f"gpu:{g.index}/nvlink:{link.link}"
            grown = _growth(earlier.get(link.link), link)
            if grown:
                value = ", ".join(f"{_label(c)} +{n}" for c, n in grown.items())
                value += f" during the {observation.window_seconds:.1f} s check"
                hint = "NVLink errors are growing now: the link is failing; drain the node and reset or repair the GPU"
                problems.append(failed("nvlink.errors", subject, value, "no growth", hint))
                continue
            counts = {c: getattr(link, c) for c in ERROR_COUNTERS if link.HasField(c) and getattr(link, c)}
            if counts:
                value = ", ".join(f"{_label(c)} {n}" for c, n in counts.items())
                hint = "errors on this link since boot (a marginal link): watch whether they grow; reset the GPU"
                problems.append(warned("nvlink.errors", subject, value, "0", hint))
    if not links:
        return [skipped("nvlink.errors", plural(len(gpus), "GPU"), "no link counters reported")]
    if problems:
        return problems
    return [passed("nvlink.errors", plural(links, "link"), "no errors", "0")]


def _growth(before: pb.NvLinkSample | None, after: pb.NvLinkSample) -> dict[str, int]:
    if before is None:
        return {}
    grown = {}
    for counter in GROWTH_FAILS:
        if before.HasField(counter) and after.HasField(counter):
            delta = getattr(after, counter) - getattr(before, counter)
            if delta > 0:
                grown[counter] = delta
    return grown


def _label(counter: str) -> str:
    return counter.removesuffix("_errors_total")


def _gbytes(bytes_per_second: float) -> str:
    # Bits per second, as the profile's nvlink_min_speed is written ("200G") and every link rate.
    return format_bits(bytes_per_second)
