"""The fleet's families on ``/metrics``: per node and per GPU, and per multi-node job
(``metrics_jobs``), from the collector's memory.

Rendered at scrape time from what ingest already keeps (each node's row of counters, the
detector's latest verdict and the node-wide inputs of its last window step); nothing is updated
per report for the sake of metrics. Runs on the HTTP server's thread: it takes a copy of the node
table (one C-level call, atomic under the GIL) and reads only objects that the event loop
replaces whole (verdicts, evidence) or plain numbers (row counters).

A node's verdict families are shown while its last report is younger than `[alerts] node_down_seconds`;
after that the node is down (the ``NodeDown`` alert says so) and its verdict says nothing of now,
so those series end rather than repeat a stale state, and ``nodeagent_node_state`` says
``state="down"``: the word of ``shown_state``, as in ``nodes`` and on the fleet page. Once the
node rests (``ingest/resting.py``: silent that long with its history written) it keeps only
``nodeagent_node_state`` and ``nodeagent_node_last_report_timestamp_seconds``: a fleet whose nodes
come and go pays two lines per node gone, not every per-node family, until it is retired. A job's
families likewise: they are shown while any node of the job is fresh (the roll-up's snapshot is
read as it is, replaced whole).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nodeagent.collector.history.split import CATEGORIES
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.ingest.shown_state import down_after_seconds, is_silent, node_shown_state
from nodeagent.collector.jobs.families import job_families
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.payoff.families import add_worth, worth_families
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.collector.payoff.worth import gpu_models, job_worth, node_worth
from nodeagent.collector.views.metrics_config import MetricsConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.node_evidence import NodeEvidence
from nodeagent.core.detector.verdict import GpuVerdict, NodeVerdict
from nodeagent.core.exposition.text import TextFamily, escape, format_value, label, render

# name -> (type, help). Order is the order on /metrics.
NODE_FAMILIES: Final = {
    "nodeagent_node_connected": ("gauge", "1 while the node's agent has a stream open to this collector."),
    "nodeagent_node_last_report_timestamp_seconds": ("gauge", "When the node's last new report arrived (Unix time)."),
    "nodeagent_node_gpus": ("gauge", "GPUs the node reported in its topology."),
    "nodeagent_gpu_seconds_total": (
        "counter",
        "GPU time held by each job on the node, by what it did: computing or lost to a category (the ledger's split).",
    ),
    "nodeagent_node_reports_total": ("counter", "New reports stored for the node (duplicates excluded)."),
    "nodeagent_node_duplicate_reports_total": ("counter", "Reports of the node received again (acked, not stored)."),
    "nodeagent_node_gap_reports_total": ("counter", "Sequence numbers skipped in the node's reports (never received)."),
    "nodeagent_node_spool_dropped_reports_total": (
        "counter", "Reports the node's agent dropped unsent because its spool was full (as the agent reports it).",
    ),
    "nodeagent_node_clock_skew_seconds": (
        "gauge", "The node's newest report's time minus this collector's clock when it arrived (positive: ahead).",
    ),
    "nodeagent_node_clock_refused_reports_total": (
        "counter", "Reports of the node acknowledged but not stored: their time too far from the collector's clock.",
    ),
}  # fmt: skip
VERDICT_FAMILIES: Final = {
    "nodeagent_node_state": (
        "gauge", "The node's state as every view shows it: 1 for its current state (the detector's verdict while "
        "it reports, with cause and tier while starved; down once silent; no-gpu).",
    ),
    "nodeagent_node_starvation_ratio": ("gauge", "Share of the node's assigned GPU time lost to data causes (window)."),
    "nodeagent_node_interconnect_wait_ratio": ("gauge", "Share of the node's assigned GPU time in collectives."),
    "nodeagent_node_needed_ingest_bytes_per_second": (
        "gauge", "For network and storage causes: the ingest that would keep the node's GPUs busy.",
    ),
    "nodeagent_node_network_receive_bytes_per_second": ("gauge", "Received over all physical NICs and RDMA ports."),
    "nodeagent_node_link_receive_bytes_per_second": ("gauge", "Received on the link nearest its capacity."),
    "nodeagent_node_link_transmit_bytes_per_second": ("gauge", "Sent on the link nearest its capacity."),
    "nodeagent_node_link_receive_capacity_ratio": ("gauge", "Receive rate over capacity, on the link nearest it."),
    "nodeagent_node_disk_read_bytes_per_second": ("gauge", "Read from all disks."),
    "nodeagent_node_disk_reads_per_second": ("gauge", "Read operations per second of the disk nearest saturation."),
    "nodeagent_node_disk_busy_ratio": ("gauge", "Share of time the disk nearest saturation was busy."),
    "nodeagent_node_disk_read_await_seconds": ("gauge", "Mean read latency of the disk nearest saturation."),
    "nodeagent_node_disk_provisioned_ratio": (
        "gauge", "IOPS or throughput over the volume's provisioned peak (configured volumes only).",
    ),
    "nodeagent_node_io_pressure_ratio": ("gauge", "PSI io 'some': share of time tasks stalled on I/O."),
    "nodeagent_node_cpu_busy_ratio": ("gauge", "Share of the node's CPU time busy."),
    "nodeagent_node_cpu_pressure_ratio": ("gauge", "PSI cpu 'some': share of time runnable tasks waited for a CPU."),
    "nodeagent_node_cpu_saturated_cores": ("gauge", "Cores busy above the saturation threshold."),
    "nodeagent_node_cpu_max_core_busy_ratio": ("gauge", "Busy share of the busiest core."),
}  # fmt: skip
GPU_FAMILIES: Final = {
    "nodeagent_gpu_state": (
        "gauge", "The detector's verdict for the GPU: 1 for its current state, with cause and tier while starved.",
    ),
    "nodeagent_gpu_starvation_ratio": ("gauge", "Share of the GPU's assigned time lost to data causes (window)."),
    "nodeagent_gpu_interconnect_wait_ratio": ("gauge", "Share of the GPU's assigned time waiting for collectives."),
    "nodeagent_gpu_data_starved_seconds_total": (
        "counter", "GPU time lost waiting for data while starved (GPU-seconds; /3600 for GPU-hours).",
    ),
    "nodeagent_gpu_bad_reading": (
        "gauge", "1 per link (pcie, nvlink) whose counters ran faster than it carries in the window: ignored.",
    ),
}  # fmt: skip

# Always there, whatever ``[metrics]`` says: a few lines for the whole fleet this process holds.
SUMMARY_FAMILIES: Final = {
    "nodeagent_fleet_nodes": ("gauge", "Nodes this process holds, by the state the views show (nodeagent_node_state)."),
    "nodeagent_fleet_gpus": (
        "gauge", "GPUs of the reporting nodes by the detector's verdict (as nodeagent_gpu_state, summed).",
    ),
    "nodeagent_fleet_per_gpu_families": (
        "gauge", "1 while this page carries the per-GPU families ([metrics] per_gpu_families, per_gpu_max_nodes).",
    ),
}  # fmt: skip

# Evidence value name -> family, for the plain numbers of NodeEvidence.values.
_NODE_VALUES: Final = {
    "storage_io_pressure_ratio": "nodeagent_node_io_pressure_ratio",
    "cpu_busy_ratio": "nodeagent_node_cpu_busy_ratio",
    "cpu_pressure_ratio": "nodeagent_node_cpu_pressure_ratio",
    "cpu_saturated_cores": "nodeagent_node_cpu_saturated_cores",
    "cpu_max_core_busy_ratio": "nodeagent_node_cpu_max_core_busy_ratio",
}
_LINK_VALUES: Final = {
    "network_rx_bytes_per_second": "nodeagent_node_link_receive_bytes_per_second",
    "network_tx_bytes_per_second": "nodeagent_node_link_transmit_bytes_per_second",
    "network_rx_link_ratio": "nodeagent_node_link_receive_capacity_ratio",
}
_DISK_VALUES: Final = {
    "storage_iops": "nodeagent_node_disk_reads_per_second",
    "storage_busy_ratio": "nodeagent_node_disk_busy_ratio",
    "storage_await_seconds": "nodeagent_node_disk_read_await_seconds",
    "storage_provisioned_ratio": "nodeagent_node_disk_provisioned_ratio",
}


class FleetMetrics:
    def __init__(
        self,
        ingest: Ingest,
        clock: Callable[[], float] | None = None,
        settings: MetricsConfig | None = None,
        worker: str | None = None,
        worth: tuple[Prices, PayoffConfig] | None = None,
    ) -> None:
        self.ingest = ingest
        # ``[prices]`` and ``[payoff]``: nodeagent_fix_worth_* (collector/payoff/families.py).
        self.prices, self.payoff = worth or (Prices(), PayoffConfig())
        self.clock = clock or ingest.clock
        self.settings = settings or MetricsConfig()
        # The summary's own label under a front (``worker="i"``), so the merged page holds each
        # worker's summary once; the per-node families need none (a node is on one worker).
        self._worker = "" if worker is None else label("worker", worker)
        self._node_labels: dict[str, str] = {}

    def render(self) -> str:
        """Every fleet family in the text format, at this moment."""
        families = {
            name: TextFamily(name, kind, help_text)
            for table in (NODE_FAMILIES, VERDICT_FAMILIES, GPU_FAMILIES, SUMMARY_FAMILIES)
            for name, (kind, help_text) in table.items()
        }
        now, down = self.clock(), down_after_seconds(self.ingest)
        nodes = list(self.ingest.nodes.values())  # a copy: the event loop may add nodes meanwhile
        if len(self._node_labels) > 2 * len(nodes) + 1000:
            self._node_labels.clear()
        fresh: set[str] = set()
        per_node = self.settings.per_node_families
        detectors = [self._detector(node, now, down) for node in nodes]
        per_gpu = self.settings.per_gpu_shown(sum(1 for d in detectors if d is not None))
        worth = worth_families()
        node_states: dict[str, int] = {}
        gpu_states: dict[str, int] = {}
        for node, detector in zip(nodes, detectors, strict=True):
            state = node_shown_state(node, now, down)
            node_states[state] = node_states.get(state, 0) + 1
            verdict = detector.verdict if detector is not None and detector.verdict.time_unix_seconds else None
            if verdict is not None:
                _count_gpus(gpu_states, verdict)
            if detector is not None:
                fresh.add(node.row.node_id)
            if per_node or per_gpu:
                self._node(families, node, detector, verdict, state, per_node=per_node, per_gpu=per_gpu)
            if per_node and verdict is not None and detector is not None and verdict.state == "starved":
                fixed = node_worth(verdict, detector.evidence.values, node.topology, self.prices, self.payoff)
                if fixed is not None:
                    add_worth(worth, self._node_label(node.row.node_id), fixed)
        self._summary(families, node_states, gpu_states, per_gpu)
        # A job judged here may have every node on another worker: its stage heard them.
        jobs = fresh_jobs(self.ingest.jobs.verdicts(), fresh | self.ingest.jobs.heard_nodes())
        for job in jobs:
            fixed = job_worth(
                job.if_fixed, job.gpus, gpu_models(self.ingest.nodes, job.nodes), self.prices, self.payoff
            )
            if fixed is not None:
                add_worth(worth, label("job_name", job.job), fixed)
        return render([*families.values(), *job_families(jobs), *worth.values()])

    def _node(
        self, families: dict[str, TextFamily], node: NodeState, detector: NodeDetector | None,
        verdict: NodeVerdict | None, state: str, *, per_node: bool, per_gpu: bool,
    ) -> None:  # fmt: skip
        """One node's lines in the per-node and per-GPU families, as ``[metrics]`` asks."""
        labels = self._node_label(node.row.node_id)
        if node.resting:
            if per_node:
                _resting(families, node, labels, state)
            return
        if per_node:
            self._row(families, node, labels)
        if verdict is not None:
            if per_node:
                _verdict(families, verdict, labels, state)
            if per_gpu:
                for gpu in verdict.gpus:
                    _gpu(families, gpu, labels)
        elif per_node:  # down, or no verdict yet: the state alone, the same word as nodes and the page
            families["nodeagent_node_state"].add(f"{labels},{_state_labels(state, None, None)}", 1.0)
        if per_node and detector is not None:
            _evidence(families, detector.evidence, labels)
        if per_node and node.history is not None:
            _gpu_seconds(families, node.history.gpu_seconds(), labels)

    @staticmethod
    def _detector(node: NodeState, now: float, down: float) -> NodeDetector | None:
        """The node's detector while its verdict says something of now: reporting, not resting."""
        if node.resting or node.stopped or is_silent(node, now, down):
            return None
        return node.detector

    def _summary(
        self, families: dict[str, TextFamily], nodes: dict[str, int], gpus: dict[str, int], per_gpu: bool
    ) -> None:
        worker = f"{self._worker}," if self._worker else ""
        for state, count in sorted(nodes.items()):
            families["nodeagent_fleet_nodes"].add(f"{worker}{label('state', state)}", count)
        for state_labels, count in sorted(gpus.items()):
            families["nodeagent_fleet_gpus"].add(f"{worker}{state_labels}", count)
        shown = families["nodeagent_fleet_per_gpu_families"]
        labels = f"{{{self._worker}}}" if self._worker else ""  # no braces without labels, as Go writes it
        shown.lines.append(f"{shown.name}{labels} {format_value(1.0 if per_gpu else 0.0)}\n")

    def _node_label(self, node_id: str) -> str:
        text = self._node_labels.get(node_id)
        if text is None:
            text = self._node_labels[node_id] = label("node", node_id)
        return text

    @staticmethod
    def _row(families: dict[str, TextFamily], node: NodeState, labels: str) -> None:
        row = node.row
        families["nodeagent_node_connected"].add(labels, 1.0 if node.stream is not None else 0.0)
        if row.last_seen:
            families["nodeagent_node_last_report_timestamp_seconds"].add(labels, row.last_seen)
        if row.gpu_count:
            families["nodeagent_node_gpus"].add(labels, row.gpu_count)
        families["nodeagent_node_reports_total"].add(labels, row.reports_total)
        families["nodeagent_node_duplicate_reports_total"].add(labels, row.duplicates_total)
        families["nodeagent_node_gap_reports_total"].add(labels, row.gap_reports_total)
        families["nodeagent_node_spool_dropped_reports_total"].add(labels, row.spool_dropped_total)
        if node.clock_skew_seconds is not None:
            families["nodeagent_node_clock_skew_seconds"].add(labels, node.clock_skew_seconds)
        families["nodeagent_node_clock_refused_reports_total"].add(labels, node.clock_refused_total)


def _count_gpus(counts: dict[str, int], v: NodeVerdict) -> None:
    for g in v.gpus:
        key = _state_labels(g.state, g.cause, g.tier)
        counts[key] = counts.get(key, 0) + 1


def _resting(families: dict[str, TextFamily], node: NodeState, labels: str, state: str) -> None:
    """A resting node (silent past the down threshold, ``ingest/resting.py``): its state and
    when it was last heard, nothing else, so that nodes that left cost ``/metrics`` two lines
    each until they are retired, not every family of a reporting node."""
    families["nodeagent_node_state"].add(f"{labels},{_state_labels(state, None, None)}", 1.0)
    if node.row.last_seen:
        families["nodeagent_node_last_report_timestamp_seconds"].add(labels, node.row.last_seen)


def fresh_jobs(verdicts: tuple[JobVerdict, ...], fresh_nodes: set[str]) -> list[JobVerdict]:
    """The jobs with a node whose verdict is fresh: a job all of whose nodes went silent says
    nothing of now."""
    return [v for v in verdicts if any(node in fresh_nodes for node in v.nodes)]


def _verdict(families: dict[str, TextFamily], v: NodeVerdict, labels: str, state: str) -> None:
    families["nodeagent_node_state"].add(f"{labels},{_state_labels(state, v.cause, v.tier)}", 1.0)
    if v.starvation_ratio is not None:
        families["nodeagent_node_starvation_ratio"].add(labels, v.starvation_ratio)
    if v.interconnect_ratio is not None:
        families["nodeagent_node_interconnect_wait_ratio"].add(labels, v.interconnect_ratio)
    if v.needed_ingest_bytes_per_second is not None:
        families["nodeagent_node_needed_ingest_bytes_per_second"].add(labels, v.needed_ingest_bytes_per_second)


def _gpu(families: dict[str, TextFamily], g: GpuVerdict, node_labels: str) -> None:
    labels = f'{node_labels},gpu="{g.index}"'
    state = f'{_state_labels(g.state, g.cause, g.tier)},uuid="{escape(g.uuid)}"'
    families["nodeagent_gpu_state"].add(f"{labels},{state}", 1.0)
    if g.starvation_ratio is not None:
        families["nodeagent_gpu_starvation_ratio"].add(labels, g.starvation_ratio)
    if g.interconnect_ratio is not None:
        families["nodeagent_gpu_interconnect_wait_ratio"].add(labels, g.interconnect_ratio)
    families["nodeagent_gpu_data_starved_seconds_total"].add(labels, g.gpu_seconds_lost)
    bad = g.evidence.get("bad_reading")
    if isinstance(bad, str):  # what sample and top flag too (a rate above the link's capacity)
        for link in bad.split(","):
            families["nodeagent_gpu_bad_reading"].add(f'{labels},link="{escape(link)}"', 1.0)


def _gpu_seconds(families: dict[str, TextFamily], totals: dict[str, list[float]], node_labels: str) -> None:
    family = families["nodeagent_gpu_seconds_total"]
    for job, values in sorted(totals.items()):
        job_labels = f"{node_labels},{label('job_name', job)}"
        for category, value in zip(CATEGORIES, values, strict=True):
            family.add(f"{job_labels},{label('category', category)}", value)


def _evidence(families: dict[str, TextFamily], e: NodeEvidence, labels: str) -> None:
    if e.network_rx_bytes_per_second is not None:
        families["nodeagent_node_network_receive_bytes_per_second"].add(labels, e.network_rx_bytes_per_second)
    if e.disk_read_bytes_per_second is not None:
        families["nodeagent_node_disk_read_bytes_per_second"].add(labels, e.disk_read_bytes_per_second)
    values = e.values
    if not values:
        return
    for key, family in _NODE_VALUES.items():
        value = values.get(key)
        if isinstance(value, int | float):
            families[family].add(labels, value)
    _named(families, values, "network_link", "link", _LINK_VALUES, labels)
    _named(families, values, "storage_disk", "disk", _DISK_VALUES, labels)


def _named(
    families: dict[str, TextFamily],
    values: dict[str, float | str],
    name_key: str,
    label_name: str,
    table: dict[str, str],
    node_labels: str,
) -> None:
    """Values about one link or disk (the one nearest saturation), labelled with its name."""
    name = values.get(name_key)
    if not isinstance(name, str):
        return
    labels = f"{node_labels},{label(label_name, name)}"
    for key, family in table.items():
        value = values.get(key)
        if isinstance(value, int | float):
            families[family].add(labels, value)


def _state_labels(state: str, cause: str | None, tier: str | None) -> str:
    return f'state="{state}",cause="{cause or ""}",tier="{tier or ""}"'
