"""Step 1 of the detector's rule chain, the gate: is the GPU assigned?

A GPU with a compute process, or memory used above the idle baseline, is assigned; one that is
not is `idle` and counts in no ratio. A lost GPU is `lost`. A GPU newly assigned, or taken by
another job, is in `warmup` for ``warmup_seconds``. Only reports that pass the gate go on to the
idle share (step 2, ``idle_share``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nodeagent.core.detector.idle_share import end_gap
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.core.detector.track_state import TrackState


def admit(track: TrackState, g: pb.GpuSample, t: float) -> bool:
    """Follow lost, assigned and warm-up from this report; whether it counts toward the idle share."""
    if g.lost or g.unresponsive:  # no readings this report: nothing to judge, as for a lost GPU
        track.lost, track.assigned = True, False
        end_gap(track)
        return False
    track.lost = False
    config = track.config
    # Memory first: it is a plain field, and a GPU with a job is above the baseline anyway.
    if g.memory_used_bytes <= config.idle_memory_bytes and not g.processes:
        if track.assigned:
            end_gap(track)
        track.assigned, track.seen_unassigned = False, True
        return False
    if not track.assigned:
        track.assigned = True
        track.assigned_since = t if track.seen_unassigned else -math.inf
    track.in_warmup = t - track.assigned_since < config.warmup_seconds
    return not track.in_warmup


def new_job(track: TrackState, g: pb.GpuSample, t: float) -> None:
    """Note the GPU's jobs at a window step; another job taking the GPU starts a new warm-up."""
    jobs = tuple(sorted({job_id(p.job) for p in g.processes} - {""}))
    if jobs and track.jobs and not set(jobs) & set(track.jobs):
        track.assigned_since = t  # another job took the GPU: it warms up again
        track.in_warmup = track.config.warmup_seconds > 0
    track.jobs = jobs


def gated_state(track: TrackState) -> str | None:
    """`lost`, `idle` or `warmup` when the gate holds the GPU out of the chain; None when it passes."""
    if track.lost or not track.assigned or track.in_warmup:
        return "lost" if track.lost else "idle" if not track.assigned else "warmup"
    return None


def job_id(job: pb.JobRef) -> str:
    """The name a GPU's job goes by in verdicts, the history and the ledger."""
    # The multi-node job key first: it names the job the same way on every node.
    return job.job_key or job.slurm_job_id or job.k8s_pod_uid or job.container_id
