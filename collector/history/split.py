"""The ledger's split: each GPU's held time, by what it did with it.

A GPU is held while its verdict names a job (``node_history``'s ``held_seconds``). Every held second is
counted once, in one of ``CATEGORIES``: ``computing``, or lost to the node's own data causes
(``network``, ``storage``, ``cpu``, ``h2d``), to the collective (``interconnect``), to another
node of the job (``waiting``, the detector's `waiting` state), to clock throttling
(``throttled``), sitting allocated with no work (``idle``), to a GPU that does not answer
(``unresponsive``) or is gone (``lost``), and ``unknown``: a gap in the reports (held, but no
report says what it did) and starvation whose cause the detector could not name. Beside them,
``unmeasured``: held seconds whose split between computing and waiting nothing measured (below),
neither computing nor lost: the ledger bills the money lost as a range, lost to lost plus
unmeasured. So the parts add up to the held time per GPU-minute, and any grouping of minutes (job,
node, fleet) adds up too.

Each report stands for the seconds since the one before it; its verdict says how they went:

| verdict | lost share of the seconds, to |
|---|---|
| `busy`, `warmup` | none: computing (the detector does not judge warm-up) |
| `starved` | the data share (``starvation_ratio``) to its cause (`unknown` for none), and the |
|           | share waiting for the collective (``interconnect_ratio``) to `interconnect`       |
| `waiting` | the wait share the job roll-up set (``wait_ratio``), to `waiting` |
| `throttled` | the window's idle share, to `throttled` |
| `idle` | all of it, to `idle` |
| `lost` | all of it, to `unresponsive` when the GPU did not answer in time, else `lost` |

The rest of the seconds compute. Ratios are the detector's window values, the same that make
its GPU-seconds lost, so a GPU starved on the network 34% of its time reads 0.34 network here. A
`busy` GPU's small waits (below the detector's thresholds) count as computing.

Where the job roll-up measures a GPU waiting on no other node (``JobShare``: a `link` straggler
waiting in the collective over its own slow link; each node of a job-wide slowdown, behind the
others), its share counts too: the verdict's own losses first, and what the share adds beyond
them to the share's category (`interconnect` for the straggler, `waiting` job-wide); never a
second twice. ``NodeHistory`` puts the share in the verdict it splits (``with_share``).

**Unmeasured.** Where the GPU's power regime cannot separate computing from waiting at its job's
step length, its wait share is unknown: the verdict's evidence carries ``wait_unknown_reason``
(``WAIT_UNKNOWN``; a `waiting` GPU then has no ``wait_ratio``), or the roll-up's share of a GPU
waiting on no other node is unknown (``JobShare`` with no ratio). Such a verdict's own measured
losses count as above (a starved GPU's data share to its cause, a throttled GPU's idle share, all
of an idle or lost GPU), and the rest of its seconds, what it computed or waited nobody can tell,
is ``unmeasured`` rather than computing: all of a `waiting` GPU's (its loss is the unknown wait),
the rest of a `busy`, `starved` or `throttled` one's. Never a guessed share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from nodeagent.core.detector.verdict import GpuVerdict, NodeVerdict

CATEGORIES: Final = (
    "computing", "network", "storage", "cpu", "h2d", "interconnect", "waiting", "throttled", "idle",
    "unresponsive", "lost", "unknown", "unmeasured",
)  # fmt: skip
# Every category but computing and unmeasured: the seconds lost (``lost_seconds``).
LOST_CATEGORIES: Final = CATEGORIES[1:-1]
# The history's columns, one per category (GPU rows: that GPU's seconds; the node row: the sum).
COLUMNS: Final = tuple(f"{name}_seconds" for name in CATEGORIES)
INDEX: Final = {name: i for i, name in enumerate(CATEGORIES)}
_COMPUTING, _UNKNOWN, _UNMEASURED = INDEX["computing"], INDEX["unknown"], INDEX["unmeasured"]
_OWN_CAUSES: Final = frozenset({"network", "storage", "cpu", "h2d", "interconnect"})
# The evidence keys of the job roll-up's share on a verdict the history splits (``with_share``).
JOB_WAIT_RATIO: Final = "job_wait_ratio"
JOB_WAIT_CATEGORY: Final = "job_wait_category"
# A verdict's evidence key: its wait share cannot be measured, and why (the job roll-up's, or
# ``with_share``'s for a share the roll-up could not measure).
WAIT_UNKNOWN: Final = "wait_unknown_reason"
_SHARED_STATES: Final = frozenset({"busy", "starved"})


@dataclass(frozen=True, slots=True)
class JobShare:
    """The job roll-up's measured wait of a node's GPUs of a job that wait on no other node;
    ``ratio`` None: not measurable there (``reason`` says why), the seconds are unmeasured."""

    ratio: float | None
    category: str  # "interconnect" (a link straggler) or "waiting" (job-wide)
    reason: str = ""


def with_share(verdict: GpuVerdict, share: JobShare) -> GpuVerdict:
    """The verdict with the roll-up's share in its evidence, as the split counts it; only a
    `busy` or `starved` GPU takes one (waiting GPUs have their wait, the others their own loss)."""
    if verdict.state not in _SHARED_STATES or share.category not in INDEX:
        return verdict
    if share.ratio is None:
        reason = share.reason or "the job's wait share cannot be measured on this GPU"
        evidence = {**verdict.evidence, WAIT_UNKNOWN: reason, JOB_WAIT_CATEGORY: share.category}
    else:
        evidence = {**verdict.evidence, JOB_WAIT_RATIO: round(share.ratio, 4), JOB_WAIT_CATEGORY: share.category}
    return replace(verdict, evidence=evidence)


def job_share(verdict: GpuVerdict) -> float | None:
    """The roll-up's share the verdict carries (``with_share``), None without one."""
    ratio = verdict.evidence.get(JOB_WAIT_RATIO)
    return float(ratio) if isinstance(ratio, float | int) else None


def empty() -> list[float]:
    return [0.0] * len(CATEGORIES)


# The categories (their index) a verdict loses time to, each with its share of the seconds.
Losses = tuple[tuple[int, float], ...]


def losses(verdict: GpuVerdict, unresponsive: bool) -> Losses:
    """The categories (their index) the verdict loses time to, each with its share of the seconds."""
    return losses_given(verdict, unresponsive, job_share(verdict))


def losses_given(verdict: GpuVerdict, unresponsive: bool, share: float | None) -> Losses:
    """``losses``, with the verdict's ``job_share`` already read (the ingest path reads it once a GPU)."""
    own = _own_losses(verdict, unresponsive)
    if WAIT_UNKNOWN in verdict.evidence:
        # What it computed or waited beyond its own measured losses nobody can tell: unmeasured.
        rest = 1.0 - sum(s for _, s in own)
        return (*own, (_UNMEASURED, rest)) if rest > 1e-12 else own
    if share is None:
        return own
    # The roll-up measured more of the time waiting than the verdict's own losses count: the rest.
    more = _share(share) - sum(s for _, s in own)
    return (*own, (INDEX[str(verdict.evidence[JOB_WAIT_CATEGORY])], more)) if more > 0 else own


def _own_losses(verdict: GpuVerdict, unresponsive: bool) -> tuple[tuple[int, float], ...]:
    state = verdict.state
    if state == "lost":
        return ((INDEX["unresponsive" if unresponsive else "lost"], 1.0),)
    if state == "idle":
        return ((INDEX["idle"], 1.0),)
    if state == "starved":
        # The window's idle time splits into waiting for data and for the collective
        # (``detector/causes.py``): each part to its own category, the data part to the cause.
        cause = verdict.cause if verdict.cause in _OWN_CAUSES else "unknown"
        sync = _share(verdict.interconnect_ratio)
        if cause == "interconnect":
            return (
                (INDEX["interconnect"], sync if verdict.interconnect_ratio is not None else _share(verdict.idle_ratio)),
            )
        data = _share(verdict.starvation_ratio if verdict.starvation_ratio is not None else verdict.idle_ratio)
        return ((INDEX[cause], data), (INDEX["interconnect"], min(sync, 1.0 - data)))
    if state == "waiting":
        if WAIT_UNKNOWN in verdict.evidence:
            return ()  # its loss is the wait share, which is unknown: all of it unmeasured
        wait = verdict.evidence.get("wait_ratio")
        return ((INDEX["waiting"], _share(float(wait) if isinstance(wait, float | int) else verdict.idle_ratio)),)
    if state == "throttled":
        return ((INDEX["throttled"], _share(verdict.idle_ratio)),)
    if state == "warmup":  # not judged yet: unknown until the first verdict that judges it (``forming``)
        return ((_UNKNOWN, 1.0),)
    return ()


def unnamed(verdict: GpuVerdict) -> bool:
    """A `starved` verdict with no cause of its own named (its data share counts `unknown`)."""
    return verdict.cause not in _OWN_CAUSES


def shares(verdict: GpuVerdict, unresponsive: bool) -> list[float]:
    """Each category's share of the seconds the verdict speaks for (computing the rest)."""
    out = empty()
    add(out, verdict, 1.0, 0.0, unresponsive)
    return out


def add(parts: list[float], verdict: GpuVerdict, seconds: float, gap_seconds: float, unresponsive: bool) -> None:
    """Count ``seconds`` the verdict speaks for, and ``gap_seconds`` no report spoke for, into ``parts``."""
    add_losses(parts, losses(verdict, unresponsive), seconds, gap_seconds)


def add_losses(parts: list[float], lost: Losses, seconds: float, gap_seconds: float) -> None:
    """``add`` with the verdict's ``losses`` already read (once per GPU per report, however many
    rows and provisional counts take them)."""
    if seconds > 0:
        if not lost:  # a verdict that loses nothing (most): all of it computed, as below
            parts[_COMPUTING] += seconds
        else:
            computing = seconds
            for category, share in lost:
                part = seconds * share
                parts[category] += part
                computing -= part
            parts[_COMPUTING] += max(0.0, computing)
    if gap_seconds > 0:
        parts[_UNKNOWN] += gap_seconds


def lost_seconds(parts: list[float]) -> float:
    """The seconds of a split (``COLUMNS``' order) lost: neither computing nor unmeasured."""
    return sum(parts) - parts[_COMPUTING] - parts[_UNMEASURED]


def _share(ratio: float | None) -> float:
    if ratio is None or math.isnan(ratio):  # no window yet: the detector lost nothing it can name
        return 0.0
    return min(1.0, max(0.0, float(ratio)))


def with_shares(verdict: NodeVerdict, shares: Mapping[str, JobShare]) -> NodeVerdict:
    """The verdict as the split counts it: each GPU of a job with a share carries it (the first
    such job's, by name)."""
    gpus = []
    for g in verdict.gpus:
        job = next((j for j in sorted(g.jobs) if j in shares), None)
        gpus.append(g if job is None else with_share(g, shares[job]))
    return replace(verdict, gpus=tuple(gpus))
