"""nodeagent's GPU health families beside dcgm-exporter's: the NVLink fabric, Xids that count, and
readings the rest of the GPU contradicts; and dcgm-exporter's opt-in ``DCGM_EXP_XID_ERRORS_COUNT``.

Labelled as the GPU families are (``dcgm.gpu_labels``, the job, the kubelet's pod). A GPU that is
not fabric-attached has no fabric series; a GPU without an Xid has no ``_total`` series (a counter
that appears at its first increment; ``DCGM_FI_DEV_XID_ERRORS`` still reads 0 for it).

- ``nodeagent_gpu_fabric_info{state, cluster_uuid, clique_id}`` 1; ``_registered`` (state completed
  with status 0), ``_healthy`` (no problem of ``core/wire/fabric.py``), and
  ``_health_condition{condition}`` for each part of the health mask the driver reports;
- ``nodeagent_gpu_xid_errors_total{xid}``: Xids since the agent started, per number;
- ``nodeagent_gpu_suspect_reading{field}`` 1 while a field is not believed;
- ``DCGM_EXP_XID_ERRORS_COUNT{window_size_in_ms, xid}``: Xids in the last window (dcgm-exporter's
  ``--xid-count-window-size``, 5 minutes by default), a GPU without any as one series without
  ``xid`` at 0, as dcgm-exporter writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from nodeagent.core.exposition.dcgm import gpu_series_labels
from nodeagent.core.exposition.text import TextFamily, label, label_text
from nodeagent.core.wire.fabric import HEALTH_PARTS, fabric_problems
from nodeagent.v1 import nodeagent_pb2 as pb

XID_COUNT_FAMILY: Final = "DCGM_EXP_XID_ERRORS_COUNT"
XID_COUNT_HELP: Final = "Count of XID Errors within user-specified time window (see xid-count-window-size param)."
XID_COUNT_WINDOW_SECONDS: Final = 300.0  # dcgm-exporter's default window


def gpu_health_families(
    report: pb.NodeReport,
    labels_by_gpu: Mapping[int, dict[str, str]],
    pods: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[TextFamily]:
    pods = pods or {}
    info = TextFamily(
        "nodeagent_gpu_fabric_info", "gauge", "The GPU's NVLink fabric registration: state, cluster and clique."
    )
    registered = TextFamily(
        "nodeagent_gpu_fabric_registered", "gauge", "1 when the GPU completed its registration with the fabric manager."
    )
    healthy = TextFamily(
        "nodeagent_gpu_fabric_healthy", "gauge",
        "1 when the GPU's fabric is registered, its routes healthy and its bandwidth not degraded.",
    )  # fmt: skip
    condition = TextFamily(
        "nodeagent_gpu_fabric_health_condition", "gauge",
        "1 while the condition of the fabric health mask holds (degraded bandwidth, route recovery, ...).",
    )  # fmt: skip
    xids = TextFamily("nodeagent_gpu_xid_errors_total", "counter", "Xid errors on the GPU since the agent started.")
    suspect = TextFamily(
        "nodeagent_gpu_suspect_reading", "gauge",
        "1 while the GPU's other readings contradict this field (read as 0 or frozen): it is not believed.",
    )  # fmt: skip
    for gpu in report.gpus:
        if gpu.index not in labels_by_gpu or gpu.lost:
            continue
        has_fabric, has_xids, has_suspects = (
            gpu.HasField("fabric"),
            bool(gpu.xid_errors_total),
            bool(gpu.suspect_fields),
        )
        if not (has_fabric or has_xids or has_suspects):
            continue
        labels = label_text(gpu_series_labels(gpu, labels_by_gpu, pods))
        if has_fabric:
            fabric = gpu.fabric
            where = {"state": fabric.state, "cluster_uuid": fabric.cluster_uuid, "clique_id": str(fabric.clique_id)}
            info.lines.append(f"{info.name}{{{labels},{label_text(where)}}} 1\n")
            problems = fabric_problems(fabric)
            done = fabric.state == "completed" and fabric.status == 0
            registered.lines.append(f"{registered.name}{{{labels}}} {1 if done else 0}\n")
            healthy.lines.append(f"{healthy.name}{{{labels}}} {0 if problems else 1}\n")
            for part, _shift in HEALTH_PARTS:
                if fabric.HasField(part):
                    value = 1 if getattr(fabric, part) else 0
                    condition.lines.append(f"{condition.name}{{{labels},{label('condition', part)}}} {value}\n")
        for number, count in sorted(gpu.xid_errors_total.items()):
            xids.lines.append(f"{xids.name}{{{labels},{label('xid', number)}}} {count}\n")
        for field in gpu.suspect_fields:
            suspect.lines.append(f"{suspect.name}{{{labels},{label('field', field)}}} 1\n")
    yield from (info, registered, healthy, condition, xids, suspect)


def gpu_answer_families(
    report: pb.NodeReport, labels_by_gpu: Mapping[int, dict[str, str]], pods: Mapping[str, Mapping[str, str]]
) -> Iterator[TextFamily]:
    """Whether each GPU answers within the agent's deadlines, and its samples taken of those expected."""
    unresponsive = TextFamily(
        "nodeagent_gpu_unresponsive", "gauge",
        "1 while the GPU does not answer NVML within the agent's deadlines (call: the call that overran).",
    )  # fmt: skip
    taken = TextFamily(
        "nodeagent_gpu_samples_taken_total", "counter", "Ticks that read the GPU whole since the agent started."
    )
    expected = TextFamily(
        "nodeagent_gpu_samples_expected_total", "counter", "Ticks that should have read the GPU, since the start."
    )
    for gpu in report.gpus:
        if gpu.index not in labels_by_gpu or not gpu.samples_expected_total:
            continue
        labels = label_text(gpu_series_labels(gpu, labels_by_gpu, pods))
        if gpu.unresponsive:
            unresponsive.lines.append(f"{unresponsive.name}{{{labels},{label('call', gpu.unresponsive_call)}}} 1\n")
        else:
            unresponsive.lines.append(f"{unresponsive.name}{{{labels}}} 0\n")
        taken.lines.append(f"{taken.name}{{{labels}}} {gpu.samples_taken_total}\n")
        expected.lines.append(f"{expected.name}{{{labels}}} {gpu.samples_expected_total}\n")
    yield from (unresponsive, taken, expected)


def xid_count_family(
    report: pb.NodeReport,
    labels_by_gpu: Mapping[int, dict[str, str]],
    recent: Iterable[tuple[float, int, int]],
    window_seconds: float = XID_COUNT_WINDOW_SECONDS,
    pods: Mapping[str, Mapping[str, str]] | None = None,
) -> TextFamily:
    """``recent``: (time, GPU index, Xid) of the Xids seen; those within ``window_seconds`` of the
    report's time count."""
    pods = pods or {}
    since = report.time_unix_seconds - window_seconds
    counts: dict[int, dict[int, int]] = {}
    for at, index, xid in recent:
        if at > since:
            by_xid = counts.setdefault(index, {})
            by_xid[xid] = by_xid.get(xid, 0) + 1
    family = TextFamily(XID_COUNT_FAMILY, "gauge", XID_COUNT_HELP)
    window = label("window_size_in_ms", str(round(window_seconds * 1000)))
    for gpu in report.gpus:
        if gpu.index not in labels_by_gpu or gpu.lost:
            continue
        labels = f"{label_text(gpu_series_labels(gpu, labels_by_gpu, pods))},{window}"
        seen = counts.get(gpu.index)
        if not seen:
            family.lines.append(f"{family.name}{{{labels}}} 0\n")
        for xid, count in sorted((seen or {}).items()):
            family.lines.append(f"{family.name}{{{labels},{label('xid', str(xid))}}} {count}\n")
    return family


def computing_source_family(
    report: pb.NodeReport, labels_by_gpu: Mapping[int, dict[str, str]], pods: Mapping[str, Mapping[str, str]]
) -> TextFamily:
    """``nodeagent_gpu_computing_source_info{source}`` 1: which reading tells each GPU's computing
    share, as the agent decided it (``agent/gpu/power_regime.py``); a GPU not decided yet has none.
    The evidence in words stays in the report (``computing_source_reason``): a label that changes
    with every span's numbers would make a new series each time."""
    family = TextFamily(
        "nodeagent_gpu_computing_source_info", "gauge",
        "Which reading tells the GPU's computing share: gpm, dcgm, power_instant, power_mean, energy or none.",
    )  # fmt: skip
    for gpu in report.gpus:
        if gpu.index not in labels_by_gpu or gpu.lost or not gpu.computing_source:
            continue
        labels = label_text(gpu_series_labels(gpu, labels_by_gpu, pods))
        family.lines.append(f"{family.name}{{{labels},{label('source', gpu.computing_source)}}} 1\n")
    return family
