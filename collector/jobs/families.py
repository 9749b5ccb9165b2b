"""The job roll-up's verdicts as ``nodeagent_job_*`` families, written with ``core/exposition/text.py``:
the collector's ``/metrics`` (``FleetMetrics``) and remote write (``remote_write/series.py``)
both take them from here, so the two carry the same names, labels and values.

As ``nodeagent_node_state`` does for a node, ``nodeagent_job_state`` is 1 for the job's current
state only, its cause a label while slowed; each node that holds a slowed job back is a
``nodeagent_job_straggler`` series of its own, with its cause. A job-wide cause (every node
shows it) names no straggler: ``job_wide="true"`` on the state.

The job is the label ``job_name``, not ``job``: ``job`` is the label Prometheus gives every
target it scrapes, and a scraped ``job`` label would arrive renamed ``exported_job`` (as
kube-state-metrics names a Kubernetes Job ``job_name`` for the same reason).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.core.exposition.text import TextFamily, label

# name -> (type, help). Order is the order on /metrics.
JOB_FAMILIES: Final = {
    "nodeagent_job_state": (
        "gauge", "The job roll-up's verdict on a multi-node job: 1 for its current state, with the cause while slowed.",
    ),
    "nodeagent_job_nodes": ("gauge", "Nodes reporting the job."),
    "nodeagent_job_gpus": ("gauge", "GPUs of the job on the nodes reporting it."),
    "nodeagent_job_wait_ratio": (
        "gauge", "Share of the job's GPU time spent waiting, for data or for its straggler (window).",
    ),
    "nodeagent_job_gpu_seconds_lost_total": (
        "counter", "GPU time the job lost on every one of its GPUs (GPU-seconds; /3600 for GPU-hours).",
    ),
    "nodeagent_job_needed_bytes_per_second": (
        "gauge", "For a data cause: the bandwidth the straggler's link or volume would need to keep the job busy.",
    ),
    "nodeagent_job_straggler": ("gauge", "1 for each node that holds the slowed job back, with its cause."),
}  # fmt: skip


def job_families(verdicts: Iterable[JobVerdict]) -> list[TextFamily]:
    """Every job family, in ``JOB_FAMILIES`` order, with the samples of ``verdicts``."""
    families = {name: TextFamily(name, kind, help_text) for name, (kind, help_text) in JOB_FAMILIES.items()}
    for verdict in verdicts:
        add_job(families, verdict)
    return list(families.values())


def add_job(families: dict[str, TextFamily], v: JobVerdict) -> None:
    job = label("job_name", v.job)
    cause = label("cause", v.cause or "")
    wide = "true" if v.job_wide else "false"
    state = f'{job},{label("source", v.source)},{label("state", v.state)},{cause},job_wide="{wide}"'
    families["nodeagent_job_state"].add(state, 1.0)
    families["nodeagent_job_nodes"].add(job, len(v.nodes))
    families["nodeagent_job_gpus"].add(job, v.gpus)
    if v.wait_ratio is not None:
        families["nodeagent_job_wait_ratio"].add(job, v.wait_ratio)
    families["nodeagent_job_gpu_seconds_lost_total"].add(job, v.gpu_seconds_lost)
    if v.needed_bytes_per_second is not None:
        families["nodeagent_job_needed_bytes_per_second"].add(job, v.needed_bytes_per_second)
    if v.state == "slowed":
        for node in v.straggler_nodes:
            families["nodeagent_job_straggler"].add(f"{job},{label('node', node)},{cause}", 1.0)
