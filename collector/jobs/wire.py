"""The job roll-up's messages as ``nodeagent.v1`` (``jobrelay.proto``), both ways: what travels
between workers and between collectors. In one process the messages are handed over as they are.

Bad input from another process is checked here: a message with an empty job or node id, or
values out of their range, is dropped (counted by the caller), never judged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nodeagent.collector.jobs.messages import Home, JobLeave, JobStep, JobWait, NodeMessage
from nodeagent.collector.jobs.node_values import LinkValues, NodeValues
from nodeagent.v1 import jobrelay_pb2 as jr

if TYPE_CHECKING:
    from nodeagent.collector.jobs.rollup import JobRollup

# Bounds on what one message may carry from another process.
# A job key of a report (256) scoped by its tenant's name (64) and ':' (``collector/tenants.py``).
MAX_KEY_CHARS = 256 + 65
MAX_GPUS = 1024
MAX_RANKS = 4096
MAX_STRAGGLERS = 4096


class BadJobMessage(ValueError):
    """A message another process sent that cannot be judged."""


def node_messages_to_pb(messages: Iterable[NodeMessage]) -> jr.JobNodeMessages:
    out = jr.JobNodeMessages()
    for m in messages:
        item = out.messages.add()
        item.home.collector, item.home.worker = m.home.collector, m.home.worker
        if isinstance(m, JobStep):
            _step_to_pb(m, item.step)
        else:
            leave = item.leave
            leave.job, leave.node_id, leave.note = m.job, m.node_id, m.note
            leave.time_unix_seconds = m.time_unix_seconds
    return out


def node_messages_from_pb(batch: jr.JobNodeMessages) -> tuple[list[NodeMessage], int]:
    """The messages, and how many were dropped as bad."""
    out: list[NodeMessage] = []
    bad = 0
    for item in batch.messages:
        home = Home(item.home.collector, item.home.worker)
        try:
            if item.HasField("step"):
                out.append(_step_from_pb(item.step, home))
            elif item.HasField("leave"):
                leave = item.leave
                _check_keys(leave.job, leave.node_id)
                out.append(JobLeave(leave.job, leave.node_id, _finite(leave.time_unix_seconds), leave.note[:512], home))
            else:
                bad += 1
        except BadJobMessage:
            bad += 1
    return out, bad


def waits_to_pb(waits: Iterable[JobWait]) -> jr.JobWaitMessages:
    out = jr.JobWaitMessages()
    for w in waits:
        item = out.waits.add()
        item.job, item.node_id, item.echo, item.clear = w.job, w.node_id, w.echo, w.clear
        item.stragglers.extend(w.stragglers)
        if w.wait_ratio is not None:
            item.wait_ratio = w.wait_ratio
        item.own = w.own
        item.wait_unknown_reason = w.unknown
        item.home.collector, item.home.worker = w.home.collector, w.home.worker
    return out


def waits_from_pb(batch: jr.JobWaitMessages) -> tuple[list[JobWait], int]:
    out: list[JobWait] = []
    bad = 0
    for w in batch.waits:
        try:
            _check_keys(w.job, w.node_id)
            if len(w.stragglers) > MAX_STRAGGLERS:
                raise BadJobMessage("too many stragglers")
            ratio = _ratio(w.wait_ratio) if w.HasField("wait_ratio") else None
            home = Home(w.home.collector, w.home.worker)
            unknown = w.wait_unknown_reason[:64]
            out.append(JobWait(w.job, w.node_id, tuple(w.stragglers), ratio, w.echo, w.clear, home, w.own, unknown))
        except BadJobMessage:
            bad += 1
    return out, bad


# ---- a step --------------------------------------------------------------------------------


def _step_to_pb(m: JobStep, out: jr.JobStepMessage) -> None:
    out.job, out.source, out.node_id, out.step, out.time_unix_seconds = (
        m.job, m.source, m.node_id, m.step, m.time_unix_seconds,
    )  # fmt: skip
    out.gpus.extend(m.gpus)
    out.ranks.extend(m.ranks)
    out.ranks_count, out.world_size = m.ranks_count, m.world_size
    if m.node_rank is not None:
        out.node_rank = m.node_rank
    for index, lost in m.gpu_seconds_lost.items():
        out.gpu_seconds_lost[index] = lost
    v, pv = m.values, out.values
    pv.gpus, pv.assigned, pv.warmup = v.gpus, v.assigned, v.warmup
    for name in _OPTIONAL_NUMBERS:
        value = getattr(v, name)
        if value is not None:
            setattr(pv, name, value)
    for name in ("own_cause", "evidence_cause", "wait_unknown_reason", "wait_unknown_words"):
        value = getattr(v, name)
        if value is not None:
            setattr(pv, name, value)
    for key, value in v.evidence.items():
        if isinstance(value, str):
            pv.evidence_words[key] = value
        else:
            pv.evidence_numbers[key] = float(value)
    link, pl = v.link, pv.link
    for name, speed in link.nic_speeds.items():
        pl.nic_speeds_bytes_per_second[name] = speed
    if link.fabric_nic is not None:
        pl.fabric_nic = link.fabric_nic
    if link.wire_nic is not None:
        pl.wire_nic = link.wire_nic
    for name in _LINK_NUMBERS:
        value = getattr(link, name)
        if value is not None:
            setattr(pl, name, value)
    pl.nvlink_inactive = link.nvlink_inactive
    if link.nvlink_errors is not None:
        pl.nvlink_errors = link.nvlink_errors
    if link.nic_errors is not None:
        pl.nic_errors = link.nic_errors
    if link.rdma_errors is not None:
        pl.rdma_errors = link.rdma_errors


def _step_from_pb(m: jr.JobStepMessage, home: Home) -> JobStep:
    _check_keys(m.job, m.node_id)
    if len(m.gpus) > MAX_GPUS or len(m.ranks) > MAX_RANKS or len(m.gpu_seconds_lost) > MAX_GPUS:
        raise BadJobMessage("too many GPUs or ranks")
    pv, pl = m.values, m.values.link
    numbers = {name: _finite(getattr(pv, name)) if pv.HasField(name) else None for name in _OPTIONAL_NUMBERS}
    evidence: dict[str, float | str] = {k: _finite(v) for k, v in pv.evidence_numbers.items()}
    evidence.update({k: v[:256] for k, v in pv.evidence_words.items()})
    link = LinkValues(
        nic_speeds={k: _finite(v) for k, v in pl.nic_speeds_bytes_per_second.items()},
        fabric_nic=pl.fabric_nic if pl.HasField("fabric_nic") else None,
        wire_nic=pl.wire_nic[:256] if pl.HasField("wire_nic") else None,
        nvlink_inactive=pl.nvlink_inactive,
        nvlink_errors=pl.nvlink_errors if pl.HasField("nvlink_errors") else None,
        nic_errors=pl.nic_errors if pl.HasField("nic_errors") else None,
        rdma_errors=pl.rdma_errors if pl.HasField("rdma_errors") else None,
        **{name: _finite(getattr(pl, name)) if pl.HasField(name) else None for name in _LINK_NUMBERS},
    )
    values = NodeValues(
        gpus=pv.gpus, assigned=pv.assigned, warmup=pv.warmup,
        own_cause=pv.own_cause if pv.HasField("own_cause") else None,
        evidence=evidence,
        evidence_cause=pv.evidence_cause if pv.HasField("evidence_cause") else None,
        wait_unknown_reason=pv.wait_unknown_reason[:64] if pv.HasField("wait_unknown_reason") else None,
        wait_unknown_words=pv.wait_unknown_words[:512] if pv.HasField("wait_unknown_words") else None,
        link=link,
        **numbers,
    )  # fmt: skip
    lost = {index: _finite(v) for index, v in m.gpu_seconds_lost.items()}
    node_rank = m.node_rank if m.HasField("node_rank") else None
    return JobStep(
        m.job, m.source[:64], m.node_id, m.step, _finite(m.time_unix_seconds), tuple(m.gpus), tuple(m.ranks),
        m.ranks_count, m.world_size, node_rank, values, lost, home,
    )  # fmt: skip


_OPTIONAL_NUMBERS = (
    "busy_ratio", "sm_active_ratio", "throttled_ratio", "data_wait_ratio", "window_data_wait_ratio", "idle_ratio",
    "interconnect_ratio", "needed_bytes_per_second", "clock_mhz", "window_sm_active_ratio", "window_computing_ratio",
)  # fmt: skip
_LINK_NUMBERS = (
    "fabric_peak_bytes_per_second", "fabric_speed_bytes_per_second", "pcie_bytes_per_second",
    "pcie_max_bytes_per_second", "fabric_busy_ratio", "tcp_retransmit_ratio",
)  # fmt: skip


def _check_keys(job: str, node_id: str) -> None:
    if not job or not node_id or len(job) > MAX_KEY_CHARS or len(node_id) > MAX_KEY_CHARS:
        raise BadJobMessage("empty or too long a job key or node id")


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise BadJobMessage(f"not a finite number: {value!r}")
    return value


def _ratio(value: float) -> float:
    if not 0.0 <= _finite(value) <= 1.0:
        raise BadJobMessage(f"not a ratio: {value!r}")
    return value


def through_bytes(rollup: JobRollup) -> list[int]:
    """Route both of ``rollup``'s stages through their bytes, in one process: what a process
    boundary costs them, without the socket (the bench's ``--wire``, and the tests). Returns the
    list the size of each batch of node messages is appended to."""
    sizes: list[int] = []

    def steps(messages: list[NodeMessage]) -> None:
        data = node_messages_to_pb(messages).SerializeToString()
        sizes.append(len(data))
        rollup.jobs.receive(node_messages_from_pb(jr.JobNodeMessages.FromString(data))[0])

    def waits(messages: list[JobWait]) -> None:
        data = waits_to_pb(messages).SerializeToString()
        rollup.nodes.apply(waits_from_pb(jr.JobWaitMessages.FromString(data))[0])

    rollup.route_steps, rollup.route_waits = steps, waits
    return sizes
