"""One job at one step: the roll-up's rules, in the order they apply (docs/jobs.md).

1. **Who is judged**: the job's nodes whose values are of this step (a node that has not
   stepped yet, or is silent, sits this one out) and that have GPUs the detector judges.
2. **Idle, warm-up**: no GPU of the job judged nor warming up is `idle`; more warming up than
   judged is `warmup`.
3. **Compare** (two nodes or more, and ranks whose claims agree: ``membership.claims``): every
   node's standing this step (``straggler.stand_out``; none at a step where too many stood out:
   ``straggler.uncrowded``) joins its history; persistent stand-outs are the stragglers
   (``straggler.stragglers``).
4. **Straggler**: `slowed`, the stragglers named with their persistent cause; the wait share
   (``wait_share``) and, for a network or storage cause, the ingest the straggler would need;
   every other judged node waits on them; those that stood out on nothing at this step wait
   whatever their own starved cause (``echoes``: in lockstep their loaders read at the job's
   pace, so their own starvation is the stragglers' echo; a node starved of its own would
   stand out, and be a straggler).
5. **Job-wide**: no straggler, and ``job_wide_share_ratio`` of the judged nodes show the same
   bottleneck of their own (a data cause, throttled, or the collective: `link`): `slowed`,
   ``job_wide``, the shared cause, no node named. A busy node counts for the most common data
   cause where its node evidence points at it and GPM or power says its GPUs wait (``_joined``).
6. **Slowed, nobody to blame**: the job's GPUs wait (its mean idle share at least the moderate
   tier) but no node stands out and their causes differ: `slowed`, cause ``unknown``.
7. Else `busy`.

A slowed job's wait share is from GPM where every judged GPU has it (``wait_share.counted_wait``
over ``BY_GPM``), else from power where it tells on every one (``BY_POWER``: GPUs without GPM), else
the estimate of its rule; but where some judged GPU's computing-share source cannot tell at the
job's step length (``NodeValues.wait_unknown_reason``: core/detector/computing_source.py), it is
unknown (None), said in the notes and the evidence (``WAIT_UNKNOWN_REASON``), and no estimate
takes its place; the stragglers are named as ever. Whether the job's GPUs wait (step 3's gate
for link findings; those that show their own cost, a link's time on the wire, retransmits, RDMA
link errors, pass it at every step: ``link.COSTLY``) is their idle share at the moderate tier, or
their power-based wait share at ``power_wait_ratio``; step 6 is the idle share's alone (as on GPUs
with GPM, whose idle SMs make no job slowed either); where neither GPM nor power tells on some
GPUs and a link sets a node apart, the notes say so.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.link import link_findings
from nodeagent.collector.jobs.membership import Claims, Member
from nodeagent.collector.jobs.node_values import NodeValues, is_data_cause
from nodeagent.collector.jobs.straggler import (
    Standing,
    latest_standout,
    persistent_cause,
    remember,
    stand_out,
    stood_out_steps,
    stragglers,
    uncrowded,
)
from nodeagent.collector.jobs.wait_share import (
    BY_GPM,
    BY_POWER,
    counted_wait,
    gpm_or_power_wait,
    job_wait,
    measured_wait,
    straggler_wait,
)
from nodeagent.core.detector.config import DetectorConfig

# The evidence key that says a slowed job's wait share is unknown (its value: the reason's code,
# ``computing_source``); ``wait_ratio`` is then None, and the ledger bills the time `unmeasured`.
WAIT_UNKNOWN_REASON = "wait_unknown_reason"
# A node's own bottleneck as a job cause: waiting on the collective everywhere is the links'.
_JOB_CAUSE = {"interconnect": "link"}
# A link sets a node apart, but on some of the job's GPUs neither GPM nor power tells computing
# from waiting, so nothing says the job waits on it.
_BLIND = (
    "a node's link differs, but no GPM and power does not tell on some GPUs (a GPU waiting in the "
    "collective reads busy there): nobody named for it"
)


@dataclass(frozen=True, slots=True)
class Judgement:
    state: str
    stragglers: tuple[str, ...] = ()
    cause: str | None = None
    job_wide: bool = False
    wait_ratio: float | None = None
    # What the stragglers make the others wait (passed to the waiting nodes' detectors).
    straggler_wait_ratio: float | None = None
    waiting: tuple[str, ...] = ()
    # The waiting nodes that stood out on nothing at this step: their own starvation is the
    # lockstep's echo of the stragglers' (their GPUs wait whatever their own cause).
    echoes: tuple[str, ...] = ()
    needed_bytes_per_second: float | None = None
    evidence: dict[str, float | str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # The nodes that wait on no other but whose GPUs the roll-up measures waiting (a `link`
    # straggler's, in the collective over its own slow link; every node of a job-wide slowdown):
    # each node's measured wait share (GPM, else power), for the ledger's split alone.
    own_waits: dict[str, float] = field(default_factory=dict)
    # Where the waiting nodes' wait share is unknown (``straggler_wait_ratio`` None for it): the
    # reason's code, passed to their detectors.
    wait_unknown_reason: str | None = None


def judge(
    members: Mapping[str, Member],
    step: int,
    claims: Claims,
    before: tuple[str, ...],
    detector: DetectorConfig,
    config: JobRollupConfig,
) -> Judgement:
    """The job's verdict at ``step``; ``members``: those with values of this step."""
    values = {node: m.values for node, m in members.items() if m.values is not None}
    judged = {node: v for node, v in values.items() if v.assigned}
    if not judged:
        warming = sum(v.warmup for v in values.values())
        return Judgement("warmup" if warming else "idle")
    if sum(v.warmup for v in values.values()) > sum(v.assigned for v in judged.values()):
        return Judgement("warmup", wait_ratio=job_wait(judged, (), None))
    own_wait = job_wait(judged, (), None)
    # Without GPM a GPU waiting in the collective reads busy: its power says it waits.
    by_power = counted_wait(judged, BY_POWER)
    waits = (own_wait is not None and own_wait >= detector.moderate_ratio) or (
        by_power is not None and by_power >= detector.power_wait_ratio
    )
    notes: list[str] = []
    named: tuple[str, ...] = ()
    if len(judged) >= 2 and claims.comparable:
        standings = uncrowded(stand_out(judged, step, waits, config), step)
        for node, member in members.items():
            remember(member, standings.get(node, Standing(step, False)))
        compared = {node: members[node] for node in judged}
        named = stragglers(compared, step, before, detector.enter_steps, detector.window_steps)
        if not waits and not named and _blind(judged) and link_findings(judged, config):
            notes.append(_BLIND)
    elif len(judged) == 1:
        notes.append("one node: judged alone, no comparison")
    if named:
        return _straggler(members, judged, named, step, detector, notes)
    # Rule 6 is the idle share's, as with GPM: a power-based wait alone (a job whose collective's
    # own transfers take 0.15 of the time reads so, like GPM's idle SMs) gates link findings only.
    idle_waits = own_wait is not None and own_wait >= detector.moderate_ratio
    return _without_straggler(judged, own_wait, idle_waits, detector, config, notes)


def _straggler(
    members: Mapping[str, Member],
    judged: Mapping[str, NodeValues],
    named: tuple[str, ...],
    step: int,
    detector: DetectorConfig,
    notes: list[str],
) -> Judgement:
    causes = Counter(persistent_cause(members[n], step, detector.window_steps) for n in named)
    cause = causes.most_common(1)[0][0]
    blind = _blind_nodes(judged)
    if blind:
        # Some GPUs' readings cannot tell: no estimate in their place. The waiting nodes wait what
        # their own counters measure where every one of them tells, else unknown too.
        share = None if any(n not in named for n in blind) else gpm_or_power_wait(judged, named)
        wait = None
    else:
        share = straggler_wait(judged, named, cause, detector.moderate_ratio)
        wait = _slowed_wait(judged, job_wait(judged, named, share))
    own_waits: dict[str, float] = {}
    if share is None and not blind:
        # A link straggler makes the others wait what their GPM or power shows (their own idle
        # share, the detector's, reads a GPM GPU half computing as busy and misses the collective);
        # its own GPUs wait in the collective too, over its slow link.
        share = gpm_or_power_wait(judged, named)
        if cause == "link":
            own_waits = {n: w for n in named if n in judged and (w := measured_wait(judged[n])) is not None}
    top = max(named, key=lambda n: _strength(latest_standout(members[n])))
    evidence: dict[str, float | str] = {
        "straggler": top,
        "stood_out_steps": f"{stood_out_steps(members[top], step, detector.window_steps)}/{detector.window_steps}",
        "nodes_compared": len(judged),
    }
    if len(named) > 1:
        evidence["stragglers"] = ",".join(named)
    standout = latest_standout(members[top])
    if standout is not None:
        for s in standout.scores:
            evidence[s.signal] = s.value
            evidence[f"{s.signal}_job_median"] = s.job_median
            evidence[f"{s.signal}_score"] = s.score
        for f in standout.links:
            evidence[f"link_{f.kind}"] = f.subject
            evidence[f"link_{f.kind}_value"] = round(f.value, 4)
            evidence[f"link_{f.kind}_job_median"] = round(f.job_median, 4)
    v = judged[top]
    if cause in (v.own_cause, v.evidence_cause):
        evidence.update(v.evidence)
    if share is not None:
        evidence["straggler_wait_ratio"] = share
    unknown = _say_unknown(judged, blind, evidence, notes)
    if cause == "throttled" and v.clock_mhz is not None:
        evidence["sm_clock_mhz"] = round(v.clock_mhz, 1)
    needed = v.needed_bytes_per_second if cause in ("network", "storage") else None
    waiting = tuple(sorted(n for n in judged if n not in named))
    echoes = tuple(n for n in waiting if not _stood_out_at(members[n], step))
    return Judgement(
        "slowed", named, cause, False, wait, share, waiting, echoes, needed, evidence, tuple(notes), own_waits,
        unknown if share is None else None,
    )  # fmt: skip


def _without_straggler(
    judged: Mapping[str, NodeValues],
    own_wait: float | None,
    waits: bool,
    detector: DetectorConfig,
    config: JobRollupConfig,
    notes: list[str],
) -> Judgement:
    shared = Counter(v.own_cause for v in judged.values() if v.own_cause is not None)
    evidence: dict[str, float | str] = {"nodes_compared": len(judged)}
    for own, count in shared.items():
        evidence[f"nodes_{own}"] = count
    if shared:
        own, count = shared.most_common(1)[0]
        joined = _joined(judged, own, detector)
        if joined:
            evidence[f"nodes_{own}_by_evidence"] = joined
        if count + joined >= math.ceil(config.job_wide_share_ratio * len(judged) - 1e-9):
            cause = _JOB_CAUSE.get(own, own)
            needed = [v.needed_bytes_per_second for v in judged.values() if v.needed_bytes_per_second is not None]
            need = statistics.median(needed) if needed and cause in ("network", "storage") else None
            if need is not None:
                evidence["needed_bytes_per_second_node_median"] = round(need)
            wait = _slowed_wait(judged, own_wait)
            # Each node waits on the others too (behind them in the collective): its measured share.
            own_waits = {n: w for n, v in judged.items() if (w := measured_wait(v)) is not None}
            if _say_unknown(judged, _blind_nodes(judged), evidence, notes):
                wait = None
            return Judgement("slowed", (), cause, True, wait, None, (), (), need, evidence, tuple(notes), own_waits)
    if waits:
        notes.append("the job's GPUs wait, but no node stands out and their causes differ")
        wait = _slowed_wait(judged, own_wait)
        if _say_unknown(judged, _blind_nodes(judged), evidence, notes):
            wait = None
        return Judgement("slowed", (), "unknown", False, wait, None, (), (), None, evidence, tuple(notes))
    return Judgement("busy", wait_ratio=own_wait, evidence=evidence, notes=tuple(notes))


def _joined(judged: Mapping[str, NodeValues], cause: str, detector: DetectorConfig) -> int:
    """The nodes without a cause of their own that the shared data ``cause`` holds too: their node
    evidence points at it (a link or disk at its capacity) and their GPUs wait by GPM or power
    (at least ``power_wait_ratio``), or no reading of theirs can tell whether they wait (their
    regime says so: the job's wait share is then unknown too, never a guess). In lockstep behind
    loaders that all read at their cap, the node whose loader is ahead waits in the collective
    rather than for data: without GPM, NVML reads that as busy, and its own verdict stays `busy`
    with its data wait near the tier."""
    if not is_data_cause(cause):
        return 0
    return sum(
        1
        for v in judged.values()
        if v.own_cause is None
        and v.evidence_cause == cause
        and (
            ((wait := measured_wait(v)) is not None and wait >= detector.power_wait_ratio)
            or (wait is None and v.wait_unknown_reason is not None)
        )
    )


def _slowed_wait(judged: Mapping[str, NodeValues], estimate: float | None) -> float | None:
    """A slowed job's wait share: from GPM where every judged GPU has it, else from power where
    it tells on every one, else ``estimate``."""
    gpm = counted_wait(judged, BY_GPM)
    if gpm is not None:
        return gpm
    by_power = counted_wait(judged, BY_POWER)
    return by_power if by_power is not None else estimate


def _blind_nodes(judged: Mapping[str, NodeValues]) -> tuple[str, ...]:
    """The judged nodes on which some GPU's computing-share source cannot tell (sorted)."""
    return tuple(sorted(n for n, v in judged.items() if v.wait_unknown_reason is not None))


def _say_unknown(
    judged: Mapping[str, NodeValues], blind: tuple[str, ...], evidence: dict[str, float | str], notes: list[str]
) -> str | None:
    """A slowed job's wait share is unknown on ``blind``: the evidence (``wait_unknown_reason``, the
    first node's code; ``wait_unknown_nodes``) and one sentence a node in the notes. The reason's
    code, or None where every GPU tells."""
    if not blind:
        return None
    reason = str(judged[blind[0]].wait_unknown_reason)
    evidence[WAIT_UNKNOWN_REASON] = reason
    evidence["wait_unknown_nodes"] = ",".join(blind)
    for node in blind:
        words = judged[node].wait_unknown_words or f"GPUs: {judged[node].wait_unknown_reason}"
        notes.append(f"{node}'s {words}")
    return reason


def _blind(judged: Mapping[str, NodeValues]) -> bool:
    return any(v.window_sm_active_ratio is None and v.window_computing_ratio is None for v in judged.values())


def _stood_out_at(member: Member, step: int) -> bool:
    latest = member.history[-1] if member.history else None
    return latest is not None and latest.step == step and latest.stood_out


def _strength(standing: Standing | None) -> float:
    if standing is None:
        return 0.0
    return max((abs(s.score) for s in standing.scores), default=0.0) + len(standing.links)
