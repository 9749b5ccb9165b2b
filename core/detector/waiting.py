"""GPUs that wait on another node of their multi-node job: the `waiting` state.

The detector never decides this alone: the collector's job roll-up, which compares the nodes of
a job, tells a node's detector that its GPUs of job J wait on nodes N at a wait share r
(``NodeDetector.wait_on``) until it says otherwise (``clear_wait``). Each window step the GPUs of
J (``JobSample.gpus`` of the step's report) whose own verdict is `busy`, or `starved` for the
collective (``interconnect``) or for nothing saturated (``unknown``: a waiting GPU with GPM reads
idle SMs that no link traffic explains), become `waiting`, with the nodes and the share in their
evidence. A GPU that is starved for a cause of its own, throttled, in warm-up, idle or lost keeps
its verdict, unless the roll-up says its own starvation is the echo of the wait
(``echo``: the node does not stand out against the job's other nodes on any compared signal,
so its loaders read at the job's lockstep pace and what looks like its own data cause is the
straggler's; a node genuinely starved would stand out and be a straggler itself): then a
starved GPU, whatever its cause, is `waiting` too. No wait means today's verdicts exactly.

Where the roll-up says the share is unknown (its GPUs' readings cannot tell computing from
waiting at the job's step length: ``computing_source``), the waiting GPUs' evidence and the node's
say ``wait_unknown_reason`` instead of ``wait_ratio``; the ledger bills that time `unmeasured`.

Loss: a waiting GPU counts ``r`` of its time as lost (its own idle share when r is None or
unknown: the time NVML saw it idle, a lower bound); on
entering, over the window's counted seconds (as entering `starved` does), then each step the span
of the step, less what its own data starvation already counted that step (of that at most the
step's span: a GPU whose own verdict enters `starved` while it waits counts its window's data
time on entering, which the wait has already counted). So the history's
GPU time lost, summed over a job's GPUs, counts the wait on every GPU of the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodeagent.core.detector.verdict import DATA_CAUSES, GpuVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.core.detector.track_state import TrackState

# Own causes a wait on another node explains.
_WAITABLE_CAUSES = frozenset({"interconnect", "unknown"})


@dataclass(frozen=True, slots=True)
class Wait:
    nodes: tuple[str, ...]
    ratio: float | None
    # The verdict time the roll-up last said so: a wait it stops renewing lapses after a window.
    renewed_at: float
    # The GPUs' own starvation, whatever its cause, is the lockstep's echo of the wait.
    echo: bool = False
    # The share is unknown, for this reason (``computing_source``): said instead of a share.
    unknown: str = ""


@dataclass(frozen=True, slots=True)
class Waiting:
    gpus: tuple[GpuVerdict, ...]
    # The nodes waited on (sorted), the job (the first by name) and the mean wait share; or,
    # where some waiting GPU's share is unknown, the reason's code.
    nodes: tuple[str, ...] = ()
    job: str = ""
    ratio: float | None = None
    unknown: str = ""


def job_gpus(report: pb.NodeReport) -> dict[str, frozenset[int]]:
    """Each multi-node job key of the report and its GPUs on this node."""
    return {j.job: frozenset(j.gpus) for j in report.jobs if j.job}


def apply_waits(
    gpus: tuple[GpuVerdict, ...],
    tracks: Mapping[int, TrackState],
    jobs: Mapping[str, frozenset[int]],
    waits: Mapping[str, Wait],
    *,
    step: bool,
) -> Waiting:
    """The GPUs' verdicts with the waits applied; ``step``: a window step (count its loss)."""
    if not waits:
        for each in tracks.values():
            each.waiting_job = ""
        return Waiting(gpus)
    out: list[GpuVerdict] = []
    nodes: set[str] = set()
    first_job, ratios, unknown = "", [], ""
    for g in gpus:
        track = tracks.get(g.index)
        job = next((j for j in sorted(waits) if g.index in jobs.get(j, ())), None)
        if track is None or job is None or not _waitable(g, waits[job].echo):
            if track is not None:
                track.waiting_job = ""
            out.append(g)
            continue
        wait = waits[job]
        ratio = wait.ratio if wait.ratio is not None else (g.idle_ratio or 0.0)
        if track.waiting_job != job:
            # Entering: the window's counted time, unless its own data starvation counted it.
            if not (g.state == "starved" and g.cause in DATA_CAUSES):
                track.gpu_seconds_lost += ratio * track.window_counted_seconds
            track.waiting_job = job
        elif step:
            own = min(track.step_lost, track.last_since)
            track.gpu_seconds_lost += max(ratio * track.last_since, own) - track.step_lost
        evidence = dict(g.evidence)
        evidence.update(waiting_on=",".join(wait.nodes), waiting_job=job)
        if wait.unknown:
            evidence["wait_unknown_reason"] = unknown = wait.unknown
        else:
            evidence["wait_ratio"] = round(ratio, 4)
        out.append(
            replace(
                g, state="waiting", cause=None, tier=None, gpu_seconds_lost=track.gpu_seconds_lost, evidence=evidence
            )
        )
        nodes.update(wait.nodes)
        first_job = min(first_job, job) if first_job else job
        ratios.append(ratio)
    if not ratios:
        return Waiting(tuple(out))
    if unknown:
        return Waiting(tuple(out), tuple(sorted(nodes)), first_job, None, unknown)
    return Waiting(tuple(out), tuple(sorted(nodes)), first_job, round(sum(ratios) / len(ratios), 4))


def _waitable(g: GpuVerdict, echo: bool) -> bool:
    return g.state == "busy" or (g.state == "starved" and (echo or g.cause in _WAITABLE_CAUSES))
