"""MIG instances in the detector: each instance of a MIG-split GPU is followed as a GPU of its own
(its own gate, window and verdict: a tenant starved of data while its neighbours are busy is
starved), and the GPU's verdict is the roll-up of its instances', as the node's is of its GPUs'.

An instance's busy share is GPM's SM activity of its GPU instance (NVML has no utilization per
instance, ``idle_share.busy_ratio``). In the GPU's roll-up and the node's ratios each instance
weighs its share of the GPU's compute: its profile's slices of the seven (``3g.40gb``: 3/7).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.core.detector.node_evidence import NodeEvidence
from nodeagent.core.detector.verdict import GpuVerdict, majority_cause, node_state, starved_causes
from nodeagent.v1 import nodeagent_pb2 as pb

COMPUTE_SLICES: Final = 7  # every MIG-capable GPU so far (A100, H100, H200, B200) splits into seven

InstanceKey = tuple[int, int, int]  # (GPU index, GPU instance id, compute instance id)


@dataclass(slots=True)
class InstanceTrack:
    """One MIG instance as the detector follows it: a GpuTrack, and who the instance is."""

    track: GpuTrack
    uuid: str
    profile: str
    gpu_instance_id: int

    @property
    def share(self) -> float:
        """Its part of the GPU's compute."""
        slices = slices_of(self.profile)
        return min(1.0, slices / COMPUTE_SLICES) if slices else 1.0 / COMPUTE_SLICES

    def step(self, sample: pb.GpuSample | None, t: float, evidence: NodeEvidence, *, first: bool) -> GpuVerdict:
        verdict = self.track.step(sample, t, evidence, first=first)
        return dataclasses.replace(
            verdict, uuid=self.uuid, gpu_instance_id=self.gpu_instance_id, mig_profile=self.profile
        )


def instance_key(gpu: pb.GpuSample, instance: pb.GpuSample) -> InstanceKey:
    return (gpu.index, instance.gpu_instance_id, instance.compute_instance_id)


def gpu_verdict(gpu: pb.GpuSample, instances: Sequence[tuple[InstanceTrack, GpuVerdict]]) -> GpuVerdict:
    """The MIG-split GPU's verdict from its instances': the worst state (starved first, as a
    node's), the majority cause of the starved ones, ratios weighted by each instance's window
    time and share of the GPU, GPU time lost counted by share."""
    verdicts = tuple(v for _, v in instances)
    weights = [(v, it.track.window_seconds() * it.share) for it, v in instances]
    weights = [(v, w) for v, w in weights if w > 0]
    total = sum(w for _, w in weights)

    def mean(name: str) -> float | None:
        known = [(getattr(v, name), w) for v, w in weights if getattr(v, name) is not None]
        weight = sum(w for _, w in known)
        return round(sum(x * w for x, w in known) / weight, 4) if known and weight else None

    starved = [v for v in verdicts if v.state == "starved"]
    tier = ("high" if any(v.tier == "high" for v in starved) else "moderate") if starved else None
    evidence: dict[str, float | str] = {}
    if starved:
        evidence["starved_instances"] = ",".join(f"{v.mig_profile} gi{v.gpu_instance_id}" for v in starved)
    return GpuVerdict(
        index=gpu.index,
        uuid=gpu.uuid,
        state=node_state(verdicts),
        cause=majority_cause(starved_causes(verdicts)),
        tier=tier,
        starvation_ratio=mean("starvation_ratio") if total else None,
        interconnect_ratio=mean("interconnect_ratio") if total else None,
        idle_ratio=mean("idle_ratio") if total else None,
        gpu_seconds_lost=sum(v.gpu_seconds_lost * it.share for it, v in instances),
        jobs=tuple(sorted({job for v in verdicts for job in v.jobs})),
        evidence=evidence,
        instances=verdicts,
    )


def gpu_weight(instances: Sequence[InstanceTrack]) -> float:
    """The GPU's weight in the node's ratios: its instances' counted seconds by their shares."""
    return sum(it.track.window_seconds() * it.share for it in instances)


def slices_of(profile: str) -> int | None:
    """The compute slices a profile names: "3g.40gb" -> 3, "1c.3g.20gb" -> 3, "1g.10gb+me" -> 1."""
    for part in profile.split("."):
        if part.endswith("g") and part[:-1].isdigit():
            return int(part[:-1])
    return None
