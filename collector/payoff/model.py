"""The step model behind a prediction, and the predictions for a node and a job.

A training step runs as fast as its slowest stage (the input pipeline runs ahead of the GPUs):

    step = max(GPU pace, each input stage's time)      GPU pace = compute + collective

Every time is a share of the current step (so the current step is 1). Shares come from the
judgement: a starved node's data wait ``d`` and collective wait ``i`` (its verdict's
``starvation_ratio`` and ``interconnect_ratio``), compute ``c = 1 - d - i``; a data-bound node's
own stage takes the whole step (it binds). The other stages' times are what their counters show
of the step: the busiest core's busy share (CPU decode), the host-to-device copy's share of the
PCIe link, the NIC's share of its rating. Lifting the bottleneck removes its stage (a data
stage's time goes to 0; the collective's wait to 0) and the step becomes the next slowest stage:

    speedup = 1 / max(the stages left)

At a named highway (a ``Target``) the stage is scaled instead: a network or storage stage takes
``rate now / target rate`` of the step (the link's rating when it runs near it: it is the limit),
the collective ``interconnect now / target`` of its share. A job's straggler is lifted to the pace
of the others: their wait on it, ``w``, goes (``1 / (1 - w)``); a job-wide cause the same with the
job's wait share. The GPU-hours a day a fix saves are the job's GPUs x 24 x (1 - 1/speedup): the
same work in less GPU time, at the job's current size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.collector.payoff.targets import PayoffConfig, Target
from nodeagent.core.quantities.units import pcie_bytes_per_second
from nodeagent.v1 import nodeagent_pb2 as pb

DATA_CAUSES: Final = frozenset({"network", "storage", "cpu", "h2d", "unknown"})
_HIGHWAY = {"network": "network", "storage": "storage", "interconnect": "interconnect"}
# Stages below this share of the step never bind: noise, not a limit.
_STAGE_FLOOR = 0.05
_STAGE_WORDS = {
    "gpu": "the GPUs' own pace (compute and the collective)",
    "cpu": "the CPU decode (busiest core {:.0%} busy)",
    "h2d": "the host-to-device copy ({:.0%} of PCIe)",
    "network": "the network link ({:.0%} of its rating)",
}


@dataclass(frozen=True, slots=True)
class IfFixed:
    """What lifting one bottleneck is worth; ``speedup`` None: unknown (the notes say why)."""

    speedup: float | None
    bottleneck: str
    target: str = ""
    target_speedup: float | None = None
    gpu_hours_per_day: float | None = None
    money_per_day: float | None = None
    currency: str = ""
    notes: tuple[str, ...] = ()
    # The step model, for the targets (priced at query time); not on the wire.
    model: StepModel | None = None

    def to_plain(self) -> dict[str, Any]:
        """``if_fixed`` of ``nodes --json`` and ``jobs --json``."""
        return {
            "speedup": self.speedup,
            "bottleneck": self.bottleneck,
            "target": {"highway": self.target, "speedup": self.target_speedup} if self.target else None,
            "gpu_hours_per_day": self.gpu_hours_per_day,
            "money_per_day": self.money_per_day,
            "currency": self.currency or None,
            "notes": list(self.notes),
        }

    def to_proto(self) -> pb.IfFixed:
        message = pb.IfFixed(bottleneck=self.bottleneck, target=self.target, currency=self.currency, notes=self.notes)
        if self.speedup is not None:
            message.speedup = self.speedup
        if self.target_speedup is not None:
            message.target_speedup = self.target_speedup
        if self.gpu_hours_per_day is not None:
            message.gpu_hours_per_day = self.gpu_hours_per_day
        if self.money_per_day is not None:
            message.money_per_day = self.money_per_day
        return message


def if_fixed_of(message: pb.IfFixed) -> IfFixed:
    """The wire's ``IfFixed`` back as the record."""
    return IfFixed(
        message.speedup if message.HasField("speedup") else None, message.bottleneck, message.target,
        message.target_speedup if message.HasField("target_speedup") else None,
        message.gpu_hours_per_day if message.HasField("gpu_hours_per_day") else None,
        message.money_per_day if message.HasField("money_per_day") else None, message.currency, tuple(message.notes),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class StepModel:
    """The current step's stages, each a share of it (module docstring)."""

    bottleneck: str
    # The GPUs' compute share, and their wait in the collective.
    compute: float
    sync: float
    # The bottleneck's own stage: a data stage binds (1.0); 0.0 for the collective or a job's.
    stage: float
    # The other stages' shares of the step: ("cpu", 0.58), ("h2d", 0.3), ("network", 0.4).
    limits: tuple[tuple[str, float], ...] = ()
    # The bottleneck's highway now (bytes/s), and its rating when it runs near it.
    rate_bytes_per_second: float | None = None
    rating_bytes_per_second: float | None = None
    interconnect_bytes_per_second: float | None = None

    def step(self, target: Target | None = None) -> tuple[float, str]:
        """The step's share of the current one with the bottleneck lifted (or at ``target``), and
        the stage that binds then."""
        sync = self.sync
        stage = 0.0
        if target is None:
            if self.bottleneck in ("interconnect", "link"):
                sync = 0.0
        else:
            now, rated = self.interconnect_bytes_per_second, target.interconnect_bytes_per_second
            if now and rated and rated > now:
                sync *= now / rated
            stage = self.stage
            highway = _HIGHWAY.get(self.bottleneck)
            to = target.rate(highway) if highway in ("network", "storage") else None
            basis = self.rating_bytes_per_second or self.rate_bytes_per_second
            if to and basis:
                stage = min(stage, self.stage * basis / to)
        stages = [("gpu", self.compute + sync), (self.bottleneck, stage), *self.limits]
        name, longest = max(stages, key=lambda s: s[1])
        return max(longest, 1e-6), name

    def speedup(self, target: Target | None = None) -> float:
        return round(1.0 / self.step(target)[0], 4)

    def next_limit(self, target: Target | None = None) -> str:
        name = self.step(target)[1]
        if name == self.bottleneck:
            return f"the {name} bottleneck itself (this highway does not lift it)"
        value = dict(self.limits).get(name, 0.0)
        words = _STAGE_WORDS.get(name, "the " + name)
        return words.format(value) if "{" in words else words


def unknown(bottleneck: str, reason: str) -> IfFixed:
    """Unknown stays unknown: no speed-up where the wait share cannot be measured."""
    return IfFixed(None, bottleneck, notes=(f"unknown: {reason}",))


def node_prediction(
    cause: str | None,
    data_ratio: float | None,
    sync_ratio: float | None,
    evidence: Mapping[str, float | str],
    node_values: Mapping[str, float | str],
    interconnect_bytes_per_second: float | None,
    needed_bytes_per_second: float | None,
    config: PayoffConfig,
) -> IfFixed | None:
    """A starved node's prediction (``cause``: its verdict's); None for a node not starved."""
    if cause is None:
        return None
    reason = evidence.get("wait_unknown_reason")
    if reason is not None:
        return unknown(cause, str(reason))
    if data_ratio is None or (cause == "interconnect" and sync_ratio is None):
        return unknown(cause, "no window yet: the GPUs' wait share is not measured")
    d, i = max(0.0, min(data_ratio, 1.0)), max(0.0, min(sync_ratio or 0.0, 1.0 - data_ratio))
    limits, notes = _limits(cause, evidence, node_values)
    link = _number(node_values.get("network_rx_link_ratio"))
    rating = None
    rate = _rate_now(cause, evidence, node_values, needed_bytes_per_second, d)
    if cause in DATA_CAUSES:
        model = StepModel(cause, 1.0 - d - i, i, 1.0, tuple(limits), rate, None, interconnect_bytes_per_second)
        notes.insert(
            0,
            f"the {d:.0%} of GPU time waiting for data ({cause}) removed, as if the data came as fast as the "
            "GPUs take it",
        )
    else:  # the collective
        model = StepModel(cause, 1.0 - i, i, 0.0, tuple(limits), None, None, interconnect_bytes_per_second)
        notes.insert(0, f"the {i:.0%} of GPU time waiting in the collective removed")
    if cause == "network" and link is not None and link > 0:
        if link >= config.link_near_rating_ratio:
            rating = rate / link if rate else None
            notes.append(
                f"the link runs at {link:.0%} of its rating: only a faster link (or the data nearer) gets this; "
                f"on this link at most {1.0 / link:.2f}x"
            )
        else:
            notes.append(f"the link runs at {link:.0%} of its rating: the limit is beyond it (the store, the loader)")
    if rating is not None:
        model = StepModel(model.bottleneck, model.compute, model.sync, model.stage, model.limits, rate, rating,
                          interconnect_bytes_per_second)  # fmt: skip
    notes.append(f"then {model.next_limit()} binds")
    return with_target(IfFixed(model.speedup(), cause, notes=tuple(notes), model=model), config)


def job_prediction(
    state: str,
    cause: str | None,
    stragglers: tuple[str, ...],
    job_wide: bool,
    wait_ratio: float | None,
    straggler_wait_ratio: float | None,
    needed_bytes_per_second: float | None,
    evidence: Mapping[str, float | str],
    config: PayoffConfig | None = None,
) -> IfFixed | None:
    """A slowed job's prediction: its straggler as fast as the others, or its shared cause
    removed; None for a job neither (busy, idle, or slowed with nobody to blame)."""
    if state != "slowed" or cause is None or not (stragglers or job_wide):
        return None
    reason = evidence.get("wait_unknown_reason")
    if reason is not None:
        return unknown(cause, str(reason))
    # A straggler makes the others wait the larger of its own wait (its data wait, its clocks'
    # slowdown) and the job's measured wait share: a slow link makes every rank wait in the
    # collective, which the straggler's own data wait does not show.
    known = [x for x in (straggler_wait_ratio if stragglers else None, wait_ratio) if x is not None]
    w = max(known) if known else None
    if w is None:
        return unknown(cause, "the job's wait share is not measured")
    w = max(0.0, min(w, 0.99))
    highway = _HIGHWAY.get(cause)
    rate = needed_bytes_per_second * (1.0 - w) if needed_bytes_per_second and highway else None
    model = StepModel(cause, 1.0 - w, 0.0, 1.0 if rate else 0.0, (), rate)
    if stragglers:
        who = ", ".join(stragglers)
        notes = [
            f"{who} as fast as the slowest other node: the {w:.0%} the others wait on it removed (the collective's "
            "own transfers counted in it too); in lockstep the others' own limits do not show (they read at the "
            "job's pace)",
        ]
    else:
        notes = [f"the shared cause ({cause}) removed on every node: the job's {w:.0%} waiting removed"]
    return with_target(IfFixed(model.speedup(), cause, notes=tuple(notes), model=model), config)


def priced(fixed: IfFixed, gpus: int, per_gpu_hour: float | None, currency: str) -> IfFixed:
    """``fixed`` with the GPU-hours a day it would save on ``gpus`` GPUs, and their money at
    ``per_gpu_hour`` (None: no price, no money)."""
    if fixed.speedup is None or gpus <= 0:
        return IfFixed(fixed.speedup, fixed.bottleneck, fixed.target, fixed.target_speedup, None, None, "", fixed.notes)
    hours = round(gpus * 24.0 * (1.0 - 1.0 / fixed.speedup), 3)
    money = round(hours * per_gpu_hour, 2) if per_gpu_hour is not None else None
    return IfFixed(
        fixed.speedup, fixed.bottleneck, fixed.target, fixed.target_speedup, hours, money,
        currency if money is not None else "", fixed.notes,
    )  # fmt: skip


def interconnect_rate(info: pb.NodeInfo | None) -> float | None:
    """One direction of one GPU's all-reduce highway: its NVLinks where it has them, else its
    PCIe link (the first GPU's, as every GPU of a node is alike)."""
    if info is None or not info.gpu.gpus:
        return None
    gpu = info.gpu.gpus[0]
    if gpu.nvlink_count and gpu.HasField("nvlink_speed_bytes_per_second"):
        return gpu.nvlink_count * gpu.nvlink_speed_bytes_per_second
    if gpu.HasField("pcie_max_generation") and gpu.HasField("pcie_max_width"):
        return pcie_bytes_per_second(gpu.pcie_max_generation, gpu.pcie_max_width)
    return None


def _limits(
    cause: str, evidence: Mapping[str, float | str], values: Mapping[str, float | str]
) -> tuple[tuple[tuple[str, float], ...], list[str]]:
    """The other stages' shares of the step the counters show, and what the notes say of them."""
    limits: list[tuple[str, float]] = []
    notes: list[str] = []
    busiest = _number(values.get("cpu_max_core_busy_ratio"))
    if cause != "cpu" and busiest is not None and busiest >= _STAGE_FLOOR:
        # Not counted as a limit: the counters do not say whose work keeps a core busy (the lab's
        # shared cores were others' at 94% while the loader's took a few percent).
        notes.append(
            f"the busiest core is {busiest:.0%} busy: if it decodes the data, the CPU binds at {1.0 / busiest:.2f}x "
            "(not counted: the counters do not say whose work it is)"
        )
    h2d = _number(evidence.get("h2d_link_ratio"))
    if cause != "h2d" and h2d is not None and h2d >= _STAGE_FLOOR:
        limits.append(("h2d", h2d))
    link = _number(values.get("network_rx_link_ratio"))
    if cause != "network" and link is not None and link >= _STAGE_FLOOR:
        limits.append(("network", link))
    return tuple(limits), notes


def with_target(fixed: IfFixed, config: PayoffConfig | None) -> IfFixed:
    """With the first ``[payoff]`` target that sets the bottleneck's own highway, else the first
    that sets the collective's where the GPUs wait in it, and its speed-up."""
    model = fixed.model
    if config is None or model is None or fixed.speedup is None:
        return fixed
    own = "interconnect" if model.bottleneck in ("interconnect", "link") else _HIGHWAY.get(model.bottleneck, "")
    chosen = next((t for t in config.targets if own and t.rate(own) is not None), None)
    if chosen is None and model.sync > 0:
        chosen = next((t for t in config.targets if t.interconnect_bytes_per_second is not None), None)
    if chosen is None:
        return fixed
    speedup = model.speedup(chosen)
    note = f"at {chosen.name}: {speedup:.2f}x, then {model.next_limit(chosen)} binds"
    return IfFixed(fixed.speedup, fixed.bottleneck, chosen.name, speedup, notes=(*fixed.notes, note), model=model)


def _rate_now(
    cause: str, evidence: Mapping[str, float | str], values: Mapping[str, float | str], needed: float | None, d: float
) -> float | None:
    key = "network_rx_bytes_per_second" if cause == "network" else "storage_read_bytes_per_second"
    if cause not in ("network", "storage"):
        return None
    now = _number(evidence.get(key)) or _number(values.get(key))
    if now:
        return now
    return needed * (1.0 - d) if needed else None


def _number(value: float | str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def worth_words(plain: Mapping[str, Any] | None) -> str:
    """A row's ``if_fixed`` as the tables say it: ``1.51x 71.68 USD/d``, ``1.51x 65 GPU-h/d``
    without prices, ``unknown``, ``-`` (the target and the notes are in JSON)."""
    if not plain:
        return "-"
    speedup = plain.get("speedup")
    if speedup is None:
        return "unknown"
    words = f"{speedup:.2f}x"
    if plain.get("money_per_day") is not None:
        words += f" {plain['money_per_day']:.2f} {plain.get('currency') or ''}/d"
    elif plain.get("gpu_hours_per_day") is not None:
        words += f" {plain['gpu_hours_per_day']:.0f} GPU-h/d"
    return words
