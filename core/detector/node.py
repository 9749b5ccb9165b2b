"""The data-starvation detector of one node: reports in, a verdict per GPU and per node out.
Step 5 of the rule chain, the roll-up, lives here; the steps before it run per GPU, in this order:

1. the gate (``gate``): assigned (a compute process, or memory above the idle baseline), else
   `idle`; lost; a newly assigned GPU is `warmup` for ``warmup_seconds``;
2. the idle share (``idle_share``): NVML utilization, capped by GPM SM activity on Hopper+; idle
   gaps shorter than ``gap_seconds`` are left out. Without GPM the computing share from power
   (``power_share``) is kept beside it for the job roll-up (``activity``, ``window_computing``);
   the node's own verdicts do not use it;
3. the cause, first match wins (``throttle``, then ``causes`` with ``node_evidence``): throttled,
   interconnect (symmetric peer bytes / link bandwidth x efficiency splits idle time into
   interconnect waiting and data waiting), network, storage, h2d (per GPU), cpu, unknown;
4. hysteresis (``hysteresis``): a GPU enters a state when most window steps show it (and, for
   `starved`, when the window's ratio clears the tier by ``confidence_sigmas`` standard errors);
   it leaves `starved` only after the ratio of its cause stays under ``exit_ratio`` for
   ``exit_seconds``;
5. the roll-up (here): the node's state, majority cause, weighted ratios, GPU-hours lost and
   the ingest bandwidth that would keep the GPUs busy; the records are in ``verdict``. GPUs the
   collector's job roll-up says wait on another node of their job are `waiting` (``waiting``:
   ``wait_on``, ``clear_wait``); without it, as in the agent's ``top``, nothing waits.

A MIG-split GPU's instances are followed each as a GPU (``mig``): the GPU's verdict is their
roll-up, with theirs under it.

Per report and GPU the first two steps are cheap and allocation-free (``gpu_track`` runs them);
every ``evaluate_seconds`` the window (``window``) advances one step: the GPU's PCIe and NVLink
counters and the node's NIC, RDMA, disk, CPU and pressure counters turn into rates, and each GPU's
verdict is re-evaluated over the last ``window_seconds``. Between steps ``observe`` returns the
same verdict object. Thresholds: ``config``.
"""

from __future__ import annotations

import math

from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.detector.computing_source import Estimate
from nodeagent.core.detector.config import DetectorConfig, DetectorConfigError
from nodeagent.core.detector.gpu_track import GpuTrack
from nodeagent.core.detector.mig import InstanceKey, InstanceTrack, gpu_verdict, gpu_weight, instance_key
from nodeagent.core.detector.node_evidence import EMPTY, NodeEvidence, NodeEvidenceTracker
from nodeagent.core.detector.throttle import throttle_mask
from nodeagent.core.detector.verdict import (
    DATA_CAUSES,
    GpuVerdict,
    NodeVerdict,
    majority_cause,
    node_state,
    starved_causes,
)
from nodeagent.core.detector.waiting import Wait, Waiting, apply_waits, job_gpus
from nodeagent.core.detector.window import GpuActivity
from nodeagent.v1 import nodeagent_pb2 as pb

ALERT_NAME = "GPUDataStarved"

__all__ = ["ALERT_NAME", "DetectorConfig", "DetectorConfigError", "NodeDetector", "NodeVerdict"]


class NodeDetector:
    def __init__(self, node_id: str, config: DetectorConfig) -> None:
        self.node_id = node_id
        self.config = config
        self._throttle_mask = throttle_mask(config)
        self._tracks: dict[int, GpuTrack] = {}
        self._instances: dict[InstanceKey, InstanceTrack] = {}  # MIG instances, each a GPU of its own
        self._weights: dict[int, float] = {}  # a MIG-split GPU's weight in the node's ratios
        self._info = pb.NodeInfo()
        self._evidence = NodeEvidenceTracker(config)
        self._recent: list[NodeEvidence] = []
        self._last_time: float | None = None
        # The first report since the detector started or last forgot its window (a silence).
        self._since: float | None = None
        self._step_end: float | None = None
        self._verdict = NodeVerdict(node_id, 0.0, "idle", None, None, None, None, 0.0, (), None, {}, ())
        # The GPUs' verdicts of the last step before any wait, each job key's GPUs in that step's
        # report, and the waits the job roll-up set (job -> nodes waited on, share).
        self._own: tuple[GpuVerdict, ...] = ()
        self._job_gpus: dict[str, frozenset[int]] = {}
        self._waits: dict[str, Wait] = {}
        # The node-wide inputs of the last window step (rates and shares, whatever the verdict):
        # what /metrics shows beside the verdict. Replaced whole, so other threads may read it.
        self.evidence: NodeEvidence = EMPTY
        # Its windows let go (``rest``): it only says what it last said, and takes no report.
        self.rested = False

    def rest(self) -> None:
        """Let go of the windows and keep what was last said: the verdict, the evidence and the
        window seen. For a node gone silent, whose state the collector shrinks to what its views
        show; the node's next report goes to a new detector."""
        self._tracks = {}
        self._instances = {}
        self._weights = {}
        self._info = pb.NodeInfo()
        self._evidence = NodeEvidenceTracker(self.config)
        self._recent = []
        self._own = ()
        self._job_gpus = {}
        self._waits = {}
        self.rested = True

    @property
    def verdict(self) -> NodeVerdict:
        return self._verdict

    @property
    def seen_seconds(self) -> float:
        """Report time the current window has seen, up to ``window_seconds``: below it, the
        verdict is still forming."""
        if self._since is None or self._last_time is None:
            return 0.0
        return min(self._last_time - self._since, self.config.window_seconds)

    def observe(self, report: pb.NodeReport) -> NodeVerdict:
        """Take one report of this node; the verdict changes only when the window advances."""
        t = report.time_unix_seconds
        last = self._last_time
        if not math.isfinite(t) or (last is not None and t <= last):
            return self._verdict  # a duplicate, or the clock stepped back: nothing to add
        if report.HasField("info"):
            self._learn(report.info)
        config = self.config
        dt = 0.0
        if last is not None:
            dt = min(t - last, config.max_interval_seconds)
            if t - last > config.window_seconds:
                self._forget()
        if self._since is None:
            self._since = t
        self._last_time = t
        tracks, mask = self._tracks, self._throttle_mask
        for sample in report.gpus:
            if sample.mig_instances:
                self._tick_instances(sample, t, dt, mask)
                continue
            track = tracks.get(sample.index)
            if track is None:
                track = tracks[sample.index] = GpuTrack(sample.index, config, self._gpu_info(sample.index))
            track.tick(sample, t, dt, mask)
        if report.host.cpus:
            self._evidence.observe_cores(report)
        if self._step_end is None or t >= self._step_end:
            self._step(report, t)
        return self._verdict

    def wait_on(
        self, job: str, nodes: tuple[str, ...], wait_ratio: float | None, *, echo: bool = False, unknown: str = ""
    ) -> None:
        """The job roll-up: this node's GPUs of ``job`` wait on ``nodes``, ``wait_ratio`` of their
        time (None: each its own idle share); ``echo``: their own starvation, whatever its cause,
        is the wait's echo (the node stands out on nothing), so starved GPUs wait too;
        ``unknown``: the share is unknown, for this reason (``computing_source``): their evidence
        says so instead of a share. Takes effect at once; renewed at each of the job's steps, it
        lapses a window after the last renewal."""
        entering = self._waits.get(job)
        self._waits[job] = Wait(nodes, wait_ratio, self._verdict.time_unix_seconds, echo, unknown)
        if entering is None or entering.nodes != nodes or entering.echo != echo or entering.unknown != unknown:
            self._rewait()

    def clear_wait(self, job: str) -> None:
        """The job roll-up: this node's GPUs of ``job`` no longer wait on another node."""
        if self._waits.pop(job, None) is not None:
            self._rewait()

    def computing_sources(self) -> dict[int, tuple[str, str]]:
        """Each GPU's computing-share source and its evidence in words, as last heard."""
        return {index: (t.source, t.source_reason) for index, t in self._tracks.items() if t.source}

    @property
    def own_gpus(self) -> tuple[GpuVerdict, ...]:
        """The GPUs' verdicts of the last window step as the node alone judges them (no wait applied)."""
        return self._own

    def activity(self, index: int) -> GpuActivity | None:
        """What GPU ``index`` did over the last closed window step, as read (the job roll-up's input)."""
        track = self._tracks.get(index)
        return None if track is None else track.activity()

    def window_sm_active(self, index: int) -> float | None:
        """GPU ``index``'s raw GPM SM activity over the window's closed steps (the job roll-up's
        wait share); None without GPM."""
        track = self._tracks.get(index)
        return None if track is None else track.window_sm_active()

    def window_computing(self, index: int) -> float | None:
        """GPU ``index``'s computing share from power over the window's closed steps (GPUs
        without GPM: ``power_share``); None with GPM, or where power does not tell."""
        track = self._tracks.get(index)
        return None if track is None else track.window_computing()

    def window_estimate(self, index: int) -> tuple[str, Estimate] | None:
        """GPU ``index``'s computing-share source and its estimate over the window's closed steps
        as of the last window step (``computing_source``: the share, or why it cannot tell)."""
        track = self._tracks.get(index)
        return None if track is None else (track.source_name(), track.estimate)

    def signals(self) -> list[AlertSignal]:
        """``GPUDataStarved`` for this node (key ""): firing while any GPU is starved."""
        v = self._verdict
        starved = v.starved_gpus
        if not starved or v.cause is None:
            return [AlertSignal(name=ALERT_NAME, node_id=self.node_id, key="", firing=False)]
        cause = v.cause
        ratios = [g.cause_ratio for g in starved if g.cause_ratio is not None]
        ratio = sum(ratios) / len(ratios) if ratios else 0.0
        tier = v.tier or "moderate"
        gpus = ",".join(str(g.index) for g in starved)
        evidence = " ".join(f"{k}={_text(val)}" for k, val in sorted(v.evidence.items()))
        what = "waiting for the collective (interconnect)" if cause == "interconnect" else f"starved of data ({cause})"
        annotations = {
            "summary": f"{len(starved)} GPU(s) on {self.node_id} {what}: {ratio:.0%} of their time",
            "description": f"GPUs {gpus} lose {ratio:.1%} of their assigned time, cause {cause}; "
            # The detector's own count, from the state entered: the ledger's split (every other
            # GPU-hours lost) counts the window before it too, so this says which it is.
            f"{v.gpu_seconds_lost / 3600:.2f} GPU-hours starved so far by the detector's count",
            "starvation_ratio": f"{ratio:.3f}",
            "gpu_seconds_lost": f"{v.gpu_seconds_lost:.0f}",
            "evidence": evidence,
        }
        if v.needed_ingest_bytes_per_second is not None:
            annotations["needed_ingest_bytes_per_second"] = f"{v.needed_ingest_bytes_per_second:.0f}"
        return [
            AlertSignal(
                name=ALERT_NAME,
                node_id=self.node_id,
                key="",
                firing=True,
                severity="critical" if tier == "high" else "warning",
                labels={"cause": cause, "gpus": gpus, "jobs": ",".join(v.jobs), "tier": tier},
                annotations=annotations,
            )
        ]

    # ---- the window advances -----------------------------------------------------------------

    def _step(self, report: pb.NodeReport, t: float) -> None:
        config = self.config
        first = self._step_end is None
        self._step_end = (math.floor(t / config.evaluate_seconds) + 1) * config.evaluate_seconds
        samples = {g.index: g for g in report.gpus}
        assigned = sum(1 for track in self._tracks.values() if track.assigned)
        assigned += sum(1 for it in self._instances.values() if it.track.assigned)
        evidence = self._evidence.step(report, assigned)
        self.evidence = evidence
        self._recent.append(evidence)
        del self._recent[: -config.window_steps]
        gpus = []
        split = self._step_instances(report, t, evidence, first=first)
        for index in sorted(self._tracks.keys() | split.keys()):
            track = self._tracks.get(index)
            if track is not None and t - track.last_seen > config.window_seconds:
                del self._tracks[index]  # gone from the reports (the hardware rules say why)
                track = None
            if index in split:
                gpus.append(split[index])  # split into MIG instances now: their roll-up
            elif track is not None:
                gpus.append(track.step(samples.get(index), t, evidence, first=first))
        self._own = tuple(gpus)
        self._job_gpus = job_gpus(report) if report.jobs else {}
        if self._waits:
            lapsed = [job for job, w in self._waits.items() if t - w.renewed_at > config.window_seconds]
            for job in lapsed:
                del self._waits[job]
        waiting = apply_waits(self._own, self._tracks, self._job_gpus, self._waits, step=True)
        self._verdict = self._roll_up(t, waiting)

    def _rewait(self) -> None:
        """Apply the waits to the last step's verdicts again (no step: no loss counted but on entering)."""
        if not self._own:
            return
        waiting = apply_waits(self._own, self._tracks, self._job_gpus, self._waits, step=False)
        self._verdict = self._roll_up(self._verdict.time_unix_seconds, waiting)

    def _roll_up(self, t: float, waiting: Waiting) -> NodeVerdict:
        gpus = waiting.gpus
        state = node_state(gpus)
        cause = majority_cause(starved_causes(gpus))
        weights = [(g, w) for g in gpus if (w := self._weight(g)) > 0]
        total = sum(w for _, w in weights)
        data = round(sum((g.starvation_ratio or 0.0) * w for g, w in weights) / total, 4) if total else None
        sync = round(sum((g.interconnect_ratio or 0.0) * w for g, w in weights) / total, 4) if total else None
        starved = [g for g in gpus if g.state == "starved"]
        ratios = [g.cause_ratio for g in starved if g.cause_ratio is not None]
        ratio = sum(ratios) / len(ratios) if ratios else 0.0
        # The worst GPU's tier: each GPU's tier already has hysteresis, so this one is stable too.
        tier = ("high" if any(g.tier == "high" for g in starved) else "moderate") if starved else None
        needed = None
        evidence: dict[str, float | str] = {}
        if cause is not None and self._recent:
            latest = self._recent[-1]
            evidence = dict(latest.for_cause(cause)) if cause in DATA_CAUSES and cause != "h2d" else {}
            if cause == "interconnect" and sync is not None:
                evidence["interconnect_wait_ratio"] = sync
            if cause == "h2d":
                shares = [float(g.evidence["h2d_link_ratio"]) for g in starved if "h2d_link_ratio" in g.evidence]
                if shares:
                    evidence["h2d_link_ratio"] = round(sum(shares) / len(shares), 4)
            if cause in ("network", "storage"):
                needed = self._needed_ingest(cause, ratio)
        jobs = tuple(sorted({job for g in gpus for job in g.jobs}))
        if state == "waiting":
            evidence = {"waiting_on": ",".join(waiting.nodes), "waiting_job": waiting.job}
            if waiting.unknown:
                evidence["wait_unknown_reason"] = waiting.unknown
            elif waiting.ratio is not None:
                evidence["wait_ratio"] = waiting.ratio
        lost = sum(track.gpu_seconds_lost for track in self._tracks.values())
        lost += sum(it.track.gpu_seconds_lost * it.share for it in self._instances.values())
        return NodeVerdict(
            self.node_id, t, state, cause, tier, data, sync, lost, jobs, needed, evidence, gpus, waiting.nodes,
            waiting.job,
        )  # fmt: skip

    def _needed_ingest(self, cause: str, data_ratio: float) -> float | None:
        observed = [
            e.network_rx_bytes_per_second if cause == "network" else e.disk_read_bytes_per_second for e in self._recent
        ]
        known = [v for v in observed if v is not None]
        if not known or data_ratio >= 1.0:
            return None
        return sum(known) / len(known) / (1.0 - data_ratio)

    # ---- MIG instances -----------------------------------------------------------------------

    def _tick_instances(self, gpu: pb.GpuSample, t: float, dt: float, mask: int) -> None:
        for instance in gpu.mig_instances:
            key = instance_key(gpu, instance)
            followed = self._instances.get(key)
            if followed is None or followed.uuid != instance.uuid:
                track = GpuTrack(gpu.index, self.config, self._gpu_info(gpu.index), mig_instance=True)
                followed = self._instances[key] = InstanceTrack(
                    track, instance.uuid, instance.mig_profile, instance.gpu_instance_id
                )
            followed.track.tick(instance, t, dt, mask)

    def _step_instances(
        self, report: pb.NodeReport, t: float, evidence: NodeEvidence, *, first: bool
    ) -> dict[int, GpuVerdict]:
        """Each MIG instance's verdict, rolled up into its GPU's, for the GPUs split in this
        report; instances gone from the reports for a window are forgotten."""
        config = self.config
        for key in [k for k, it in self._instances.items() if t - it.track.last_seen > config.window_seconds]:
            del self._instances[key]
        out: dict[int, GpuVerdict] = {}
        self._weights = {}
        for gpu in report.gpus:
            if not gpu.mig_instances:
                continue
            followed = []
            for instance in gpu.mig_instances:
                it = self._instances.get(instance_key(gpu, instance))
                if it is not None:
                    followed.append((it, it.step(instance, t, evidence, first=first)))
            if followed:
                out[gpu.index] = gpu_verdict(gpu, followed)
                self._weights[gpu.index] = gpu_weight([it for it, _ in followed])
        return out

    def _weight(self, g: GpuVerdict) -> float:
        """The GPU's counted seconds in the window: its weight in the node's ratios."""
        if g.instances:
            return self._weights.get(g.index, 0.0)
        track = self._tracks.get(g.index)
        return track.window_seconds() if track is not None else 0.0

    # ---- topology ----------------------------------------------------------------------------

    def learn(self, info: pb.NodeInfo) -> None:
        """The node's topology, from elsewhere than a report (the collector's hello of a node that
        came over from another collector): its links, GPUs and their limits."""
        self._learn(info)

    def _learn(self, info: pb.NodeInfo) -> None:
        self._info = pb.NodeInfo()
        self._info.CopyFrom(info)
        self._evidence.learn(self._info)
        for index, track in self._tracks.items():
            track.learn(self._gpu_info(index))
        for (index, _gi, _ci), it in self._instances.items():
            it.track.learn(self._gpu_info(index))

    def _gpu_info(self, index: int) -> pb.GpuInfo | None:
        return next((g for g in self._info.gpu.gpus if g.index == index), None)

    def _forget(self) -> None:
        """After a silence longer than the window, what the window held says nothing of now."""
        for track in self._tracks.values():
            track.forget()
        for it in self._instances.values():
            it.track.forget()
        self._recent.clear()
        self.evidence = EMPTY
        self._evidence = NodeEvidenceTracker(self.config)
        self._evidence.learn(self._info)
        self._step_end = None
        self._since = None


def _text(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"
