"""Which node holds a job back: its nodes compared with each other at each step, and persistence
over the window.

At each job step every judged node gets a robust score per signal (``robust``), against the
other nodes, in the direction a straggler moves it:

- ``busy_ratio`` low: NVML utilization (lowered by the computing share of power read between
  reports, ``node_values``). A node waiting in the collective keeps its kernel resident and reads
  ~100%; a data-starved straggler reads its compute share;
- ``data_wait_ratio`` high: its GPUs' share of the step waiting for data (idle time their link
  time does not explain, as the detector splits it);
- ``throttled_ratio`` high: the share of the step with throttle reasons set;
- ``sm_active_ratio`` high: GPM SM activity (where most nodes have GPM). Waiting nodes' SMs idle,
  a slow node's (throttled, a slower GPU) compute while they wait;

plus its link findings (``link``), which count only while the job's GPUs wait (its mean idle
share at least the detector's moderate tier) or with a signal: hardware that differs and costs
nothing names nobody. The findings that show their own cost (``LinkFinding.costly``: time on the
wire far above the others', retransmits, RDMA link errors) count at every step: a GPU waiting in
the collective can read busy on every counter it has. A node *stands out* at a step when a signal
passes the score threshold or a link finding counts; the step's cause is, first match wins:
``throttled`` (its throttled share stood out, or its own verdict is throttled), ``link`` where a
link finding counts and its own verdict is ``network`` over its fabric NIC (the one carrying the
collective: its slow link saturated by the collective's traffic reads as a busy NIC to its
detector, not its loader's), its own data cause (``network``, ``storage``, ``cpu``, ``h2d``, from
its detector's verdict), ``link`` (a finding), the data cause its latest evidence flags, else
``unknown``.

It is a *straggler* when it stood out in ``enter_steps`` of the last ``window_steps`` steps (the
detector's 4 of 6), and stays one while it stands out in more than ``window_steps -
enter_steps`` of them; its cause is the majority of its steps' causes (tie: the latest). Fewer
than half the compared nodes can be stragglers (one of two): more, and nobody stands out from
a majority, so none is named. The same holds at each step (``uncrowded``): a step at which more
nodes stood out than may be stragglers counts for none of them. A job waiting on all its nodes
alike (every data link slow) has them stand out in turn, two of four at a step as their loads
alternate, and without this one of them could gather 4 of 6 steps by chance and be named.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.link import LinkFinding, link_findings
from nodeagent.collector.jobs.membership import Member
from nodeagent.collector.jobs.node_values import NodeValues, is_data_cause
from nodeagent.collector.jobs.robust import scores
from nodeagent.collector.jobs.verdict import JOB_CAUSES
from nodeagent.core.detector.verdict import majority_cause

# (signal, direction a straggler moves it: -1 low, +1 high, the config's floor for it)
SIGNALS: Final = (
    ("busy_ratio", -1, "busy_floor_ratio"),
    ("data_wait_ratio", 1, "data_wait_floor_ratio"),
    ("throttled_ratio", 1, "throttled_floor_ratio"),
    ("sm_active_ratio", 1, "sm_active_floor_ratio"),
)


@dataclass(frozen=True, slots=True)
class Score:
    signal: str
    value: float
    job_median: float
    score: float


@dataclass(frozen=True, slots=True)
class Standing:
    """One node at one job step."""

    step: int
    stood_out: bool
    cause: str | None = None
    scores: tuple[Score, ...] = ()
    links: tuple[LinkFinding, ...] = ()


def stand_out(
    values: Mapping[str, NodeValues], step: int, waiting: bool, config: JobRollupConfig
) -> dict[str, Standing]:
    """Each node's standing at this step (``waiting``: the job's GPUs wait, so links count)."""
    found: dict[str, list[Score]] = {node: [] for node in values}
    for signal, direction, floor_name in SIGNALS:
        known = [(node, x) for node, v in values.items() if (x := getattr(v, signal)) is not None]
        if len(known) < 2 or (signal == "sm_active_ratio" and len(known) * 2 < len(values)):
            continue
        floor = getattr(config, floor_name)
        for (node, x), (median, score) in zip(
            known, scores([x for _, x in known], floor, config.exact_nodes), strict=True
        ):
            if score * direction >= config.score_threshold:
                found[node].append(Score(signal, round(x, 4), round(median, 4), round(score, 2)))
    links = link_findings(values, config)
    out = {}
    for node, v in values.items():
        signals = tuple(found[node])
        found_links = links.get(node, ())
        node_links = tuple(found_links if (waiting or signals) else (f for f in found_links if f.costly))
        if not signals and not node_links:
            out[node] = Standing(step, False)
            continue
        out[node] = Standing(step, True, _cause(v, signals, node_links), signals, node_links)
    return out


def straggler_limit(compared: int) -> int:
    """The most stragglers ``compared`` nodes can have: fewer than half of them (one of two)."""
    return max(1, (compared - 1) // 2)


def uncrowded(standings: dict[str, Standing], step: int) -> dict[str, Standing]:
    """The standings as they count: none stood out at a step where more nodes stood out than
    ``straggler_limit`` allows (nobody stands out from a majority), except those that stood out
    on a link finding that shows its own cost (``LinkFinding.costly``), where few enough did: a
    link ten times busier than the others' on the same bytes is not the per-step noise of a
    signal (a job whose steps last seconds reads each 5-10 s step's busy share by where its
    phases fell, and the waiting nodes stand out on it in turn)."""
    limit = straggler_limit(len(standings))
    if sum(s.stood_out for s in standings.values()) <= limit:
        return standings
    costly = {node for node, s in standings.items() if s.stood_out and any(f.costly for f in s.links)}
    if len(costly) > limit:
        costly = set()
    return {node: s if node in costly else Standing(step, False) for node, s in standings.items()}


def remember(member: Member, standing: Standing) -> None:
    """The standing joins the member's history (a ring of ``window_steps``)."""
    member.history.append(standing)


def stragglers(
    members: Mapping[str, Member], step: int, before: tuple[str, ...], enter_steps: int, window_steps: int
) -> tuple[str, ...]:
    """The nodes that stood out persistently (at most fewer than half of them; one of two)."""
    named = []
    for node, member in members.items():
        count = sum(1 for s in member.history if s.stood_out and s.step > step - window_steps)
        need = window_steps - enter_steps + 1 if node in before else enter_steps
        if count >= need:
            named.append(node)
    return tuple(sorted(named)) if len(named) <= straggler_limit(len(members)) else ()


def persistent_cause(member: Member, step: int, window_steps: int) -> str:
    """The majority of the causes of the steps it stood out in (tie: the latest; then JOB_CAUSES' order)."""
    recent = [s for s in member.history if s.stood_out and s.cause is not None and s.step > step - window_steps]
    votes = Counter(s.cause for s in recent if s.cause is not None)
    return majority_cause(votes, recent[-1].cause if recent else None, JOB_CAUSES) or "unknown"


def latest_standout(member: Member) -> Standing | None:
    return next((s for s in reversed(member.history) if s.stood_out), None)


def stood_out_steps(member: Member, step: int, window_steps: int) -> int:
    return sum(1 for s in member.history if s.stood_out and s.step > step - window_steps)


def _cause(v: NodeValues, signals: tuple[Score, ...], links: tuple[LinkFinding, ...]) -> str:
    names = {s.signal for s in signals}
    if "throttled_ratio" in names or v.own_cause == "throttled":
        return "throttled"
    fabric = v.link.fabric_nic
    if v.own_cause == "network" and links and fabric is not None and v.evidence.get("network_link") == fabric:
        return "link"
    if is_data_cause(v.own_cause):
        return v.own_cause or "unknown"
    if links:
        return "link"
    if names & {"busy_ratio", "data_wait_ratio"} and v.evidence_cause is not None:
        return v.evidence_cause
    return "unknown"
