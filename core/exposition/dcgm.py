"""GPU families in dcgm-exporter's names, types, units, help and labels, from the latest tick.

The families are dcgm-exporter's default counters (etc/default-counters.csv) and its profiling set
(etc/dcp-metrics-included.csv, plus SM activity, occupancy and NVLink bytes): the same names, the
same units (percent for the DEV_*_UTIL families, MiB for framebuffer memory, W, mJ, MHz, 0..1
ratios and bytes per second for PROF_*), the same labels (``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``). Values come from the report
the sampling loop made; a scrape never calls NVML. Where a GPU did not give a value (no GPM before
Hopper, a field its driver lacks, a lost GPU), that GPU has no sample in the family: never a zero
that was not measured.

A MIG-enabled GPU's instances are series of their own in the same families, as dcgm-exporter
writes its GPU_I entities: the GPU's labels plus ``GPU_I_PROFILE`` and ``GPU_I_ID``, the job of the
instance's processes and the kubelet's pod of the MIG device (by its UUID). An instance has the
values NVML gives per instance (framebuffer, GPM's profiling fields); the GPU keeps its own series.

Per-link NVLink bytes and errors, which dcgm-exporter leaves out by default, are nodeagent's own
families beside them, with a ``link`` label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Final

from nodeagent.core.exposition.text import TextFamily, format_value, label_text, number
from nodeagent.v1 import nodeagent_pb2 as pb

# A family's value from a GPU's sample: a field as NVML gave it, a field in DCGM's unit, or a
# function of the sample (None for no sample).
Getter = Callable[[pb.GpuSample], float | None]
AS_IS, PERCENT, MIB, KIB = "", "%", "MiB", "KiB"


def _nvlink_bandwidth_total(gpu: pb.GpuSample) -> float | None:
    """Bytes over all links, both directions: the per-GPU sums the agent's report carries, else
    the per-link counters (a report from an agent that sent no sums)."""
    if gpu.HasField("nvlink_rx_bytes_total") or gpu.HasField("nvlink_tx_bytes_total"):
        return gpu.nvlink_rx_bytes_total + gpu.nvlink_tx_bytes_total
    links = gpu.nvlinks
    # Unset counters read 0, so the sum is right either way; whether any link has a counter only
    # matters when the sum is 0 (a traffic-free GPU, or one with no per-link counters).
    total = sum(link.rx_bytes_total + link.tx_bytes_total for link in links)
    if total or any(link.HasField("rx_bytes_total") or link.HasField("tx_bytes_total") for link in links):
        return total
    return None


def _row_remap_failure(gpu: pb.GpuSample) -> float | None:
    return (1 if gpu.remapped_rows_failure else 0) if gpu.HasField("remapped_rows_failure") else None


# (name, type, help as dcgm-exporter's CSV has it, the GpuSample field or a function of the sample,
# the field's unit on the page: as NVML gave it, percent of a ratio, whole MiB or KiB of bytes as
# DCGM divides them). Counters keep dcgm-exporter's names, without "_total" (promtool's naming lint
# flags them, as it does dcgm-exporter's own output), and their TYPE lines are written as they are.
GPU_FAMILIES: Final[tuple[tuple[str, str, str, str | Getter, str], ...]] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz", AS_IS),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "memory_clock_mhz", AS_IS),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "memory_temperature_celsius", AS_IS),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_celsius", AS_IS),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_watts", AS_IS),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
     "energy_millijoules_total", AS_IS),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
     "pcie_tx_bytes_total", KIB),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "Total number of bytes received through PCIe RX (in KB) via NVML.",
     "pcie_rx_bytes_total", KIB),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "pcie_replay_total", AS_IS),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization_gpu_ratio", PERCENT),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "utilization_memory_ratio", PERCENT),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "utilization_encoder_ratio", PERCENT),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "utilization_decoder_ratio", PERCENT),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory_free_bytes", MIB),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory_used_bytes", MIB),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "memory_reserved_bytes", MIB),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.",
     _nvlink_bandwidth_total, AS_IS),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors",
     "remapped_rows_uncorrectable_total", AS_IS),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors",
     "remapped_rows_correctable_total", AS_IS),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", _row_remap_failure, AS_IS),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
     "graphics_active_ratio", AS_IS),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.",
     "sm_active_ratio", AS_IS),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.",
     "sm_occupancy_ratio", AS_IS),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.",
     "tensor_active_ratio", AS_IS),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data.", "dram_active_ratio", AS_IS),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - "
     "in bytes per second.", "gpm_pcie_tx_bytes_per_second", AS_IS),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
     "in bytes per second.", "gpm_pcie_rx_bytes_per_second", AS_IS),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
     "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
     "gpm_nvlink_tx_bytes_per_second", AS_IS),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
     "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
     "gpm_nvlink_rx_bytes_per_second", AS_IS),
)  # fmt: skip

XID_FAMILY: Final = "DCGM_FI_DEV_XID_ERRORS"

_LINK_ERRORS: Final = (
    ("replay", "replay_errors_total", "replay (DL replay)"),
    ("recovery", "recovery_errors_total", "recovery (DL recovery)"),
    ("crc_flit", "crc_flit_errors_total", "flit CRC"),
    ("crc_data", "crc_data_errors_total", "data CRC"),
)


def gpu_labels(info: pb.NodeInfo | None, node_id: str) -> dict[int, dict[str, str]]:
    """dcgm-exporter's labels of each GPU, by index."""
    if info is None:
        return {}
    hostname = info.hostname or node_id
    driver = info.gpu.driver_version
    return {
        g.index: {
            "gpu": str(g.index),
            "UUID": g.uuid,
            "pci_bus_id": g.pci_bus_id,
            "device": f"nvidia{g.index}",
            "modelName": g.name,
            "Hostname": hostname,
            "DCGM_FI_DRIVER_VERSION": driver,
        }
        for g in info.gpu.gpus
    }


def job_labels(gpu: pb.GpuSample) -> dict[str, str]:
    """The job of the first process on the GPU that has one. The agent knows a pod by its UID and a
    container by its id (from the cgroup); names need the kubelet and are not read."""
    for process in gpu.processes:
        job = process.job
        labels = {}
        if job.slurm_job_id:
            labels["hpc_job"] = job.slurm_job_id
        if job.k8s_pod_uid:
            labels["pod_uid"] = job.k8s_pod_uid
        if job.container_id:
            labels["container_id"] = job.container_id
        if labels:
            return labels
    return {}


def gpu_series_labels(
    gpu: pb.GpuSample, labels_by_gpu: Mapping[int, dict[str, str]], pods: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The GPU's labels: dcgm-exporter's, its job's from the cgroup, and the kubelet's pod,
    namespace and container (by UUID) where the kubelet has allocated it."""
    labels = labels_by_gpu[gpu.index]
    return {**labels, **job_labels(gpu), **pods.get(labels["UUID"], {})}


def instance_labels(
    instance: pb.GpuSample, labels_by_gpu: Mapping[int, dict[str, str]], pods: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """A MIG instance's labels: its GPU's (UUID stays the GPU's, as in dcgm-exporter), the GPU
    instance's profile and id, its processes' job, and the kubelet's pod of the MIG device."""
    mig = {"GPU_I_PROFILE": instance.mig_profile, "GPU_I_ID": str(instance.gpu_instance_id)}
    return {**labels_by_gpu[instance.index], **mig, **job_labels(instance), **pods.get(instance.uuid, {})}


# Each GPU's label text by its label set: the same few sets come back every scrape (a GPU's
# labels change with its job), and sorting and escaping them was a tenth of the page's cost.
_LABEL_TEXTS: dict[tuple[tuple[str, str], ...], str] = {}
_MAX_LABEL_TEXTS: Final = 4096


def _label_text(labels: dict[str, str]) -> str:
    key = tuple(labels.items())
    text = _LABEL_TEXTS.get(key)
    if text is None:
        if len(_LABEL_TEXTS) >= _MAX_LABEL_TEXTS:
            _LABEL_TEXTS.clear()
        text = _LABEL_TEXTS[key] = label_text(labels)
    return text


# The label text of a GPU with no job and no pod is its dcgm-exporter labels' alone, kept by that
# labels dict (the same object from one topology report to the next): no merge, no key to build.
# The entry holds the dict, so its id cannot be reused while the entry lives.
_BARE_TEXTS: dict[int, tuple[dict[str, str], str]] = {}


def _gpu_label_text(
    gpu: pb.GpuSample, labels_by_gpu: Mapping[int, dict[str, str]], pods: Mapping[str, Mapping[str, str]]
) -> str:
    labels = labels_by_gpu[gpu.index]
    if gpu.processes or (pods and labels["UUID"] in pods):
        return _label_text(gpu_series_labels(gpu, labels_by_gpu, pods))
    kept = _BARE_TEXTS.get(id(labels))
    if kept is not None and kept[0] is labels:
        return kept[1]
    if len(_BARE_TEXTS) >= _MAX_LABEL_TEXTS:
        _BARE_TEXTS.clear()
    text = label_text(labels)
    _BARE_TEXTS[id(labels)] = (labels, text)
    return text


def dcgm_families(
    report: pb.NodeReport,
    labels_by_gpu: Mapping[int, dict[str, str]],
    last_xid: Mapping[int, int],
    pods: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[TextFamily]:
    """The GPU families of one report. Each GPU's label text is written once, then every family
    adds one line per GPU. ``pods``: the kubelet's ``pod``, ``namespace`` and ``container``
    labels by GPU UUID.

    A page is 30 families x 8 GPUs, and a scrape writes it anew each tick, so the loop does the
    least per value: a field that is not zero is set (only a zero needs ``HasField``, which costs
    three times a read), and the field's type and unit, known from the schema, pick how its text
    is written."""
    pods = pods or {}
    live = [(g, _gpu_label_text(g, labels_by_gpu, pods)) for g in report.gpus
            if g.index in labels_by_gpu and not g.lost]  # fmt: skip
    whole = len(live)  # the GPUs; their MIG instances follow
    for g in report.gpus:
        if g.mig_instances and g.index in labels_by_gpu and not g.lost:
            live.extend((i, _label_text(instance_labels(i, labels_by_gpu, pods))) for i in g.mig_instances)
    for name, kind, doc, source, unit in GPU_FAMILIES:
        family = TextFamily(name, kind, doc)
        lines = family.lines
        if not isinstance(source, str):
            for gpu, labels in live:
                value = source(gpu)
                if value is not None:
                    lines.append(f"{name}{{{labels}}} {number(value)}\n")
        elif unit in (MIB, KIB):  # integer fields (bytes)
            shift = 20 if unit == MIB else 10
            for gpu, labels in live:
                value = getattr(gpu, source)
                if value or gpu.HasField(source):
                    lines.append(f"{name}{{{labels}}} {value >> shift}\n")
        elif unit == PERCENT or source in _FLOAT_FIELDS:
            percent = unit == PERCENT
            for gpu, labels in live:
                value = getattr(gpu, source)
                if value or gpu.HasField(source):
                    if percent:
                        # NVML's whole percent, kept as a ratio: 0.57 * 100 is 56.99999999999999,
                        # where DCGM shows 57. Nine places undo the ratio's rounding, no more.
                        value = round(value * 100.0, 9)
                    # repr is the text format's float where finite (inf - inf and NaN - NaN are NaN)
                    text = repr(value) if value - value == 0.0 else format_value(value)
                    lines.append(f"{name}{{{labels}}} {text}\n")
        else:
            for gpu, labels in live:
                value = getattr(gpu, source)
                if value or gpu.HasField(source):
                    lines.append(f"{name}{{{labels}}} {value}\n")
        yield family
    xid = TextFamily(XID_FAMILY, "gauge", "Value of the last XID error encountered.")
    for gpu, labels in live[:whole]:
        # The agent watches XID events from its start: 0 until one comes, as DCGM shows.
        xid.lines.append(f"{XID_FAMILY}{{{labels}}} {last_xid.get(gpu.index, 0)}\n")
    yield xid


_FLOAT_FIELDS: Final = frozenset(
    f.name for f in pb.GpuSample.DESCRIPTOR.fields if f.cpp_type in (f.CPPTYPE_DOUBLE, f.CPPTYPE_FLOAT)
)


def nvlink_families(
    report: pb.NodeReport,
    labels_by_gpu: Mapping[int, dict[str, str]],
    pods: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[TextFamily]:
    """nodeagent's per-link NVLink families, with the GPU's dcgm-exporter labels and ``link``."""
    pods = pods or {}
    gpus = [
        (g, gpu_series_labels(g, labels_by_gpu, pods))
        for g in report.gpus
        if g.index in labels_by_gpu and not g.lost and g.nvlinks
    ]
    yield from _per_link(gpus)


def _link_labels(labels: Mapping[str, str]) -> tuple[str, str]:
    """The GPU's label text before and after where ``link`` sorts: a link's text is then
    ``before + link="N" + after``, with no sort per link."""
    before = label_text({k: v for k, v in labels.items() if k < "link"})
    after = label_text({k: v for k, v in labels.items() if k > "link"})
    return (before + "," if before else ""), ("," + after if after else "")


def _per_link(gpus: list[tuple[pb.GpuSample, dict[str, str]]]) -> Iterator[TextFamily]:
    rx = TextFamily(
        "nodeagent_gpu_nvlink_receive_bytes_total", "counter", "Bytes received on the NVLink (payload), per link."
    )
    tx = TextFamily(
        "nodeagent_gpu_nvlink_transmit_bytes_total", "counter", "Bytes sent on the NVLink (payload), per link."
    )
    # One family per error kind (not a "kind" label): each link's label set is then written once.
    errors = [
        (TextFamily(f"nodeagent_gpu_nvlink_{kind}_errors_total", "counter", f"NVLink {doc} errors, per link."), field)
        for kind, field, doc in _LINK_ERRORS
    ]
    up = TextFamily("nodeagent_gpu_nvlink_up", "gauge", "1 when the NVLink is active.")
    for gpu, labels in gpus:
        before, after = _link_labels(labels)
        for link in gpu.nvlinks:
            series = f'{{{before}link="{link.link}"{after}}} '
            # As in dcgm_families: a value that is not zero is set, HasField only for a zero.
            active, received, sent = link.active, link.rx_bytes_total, link.tx_bytes_total
            if active or link.HasField("active"):
                up.lines.append(f"nodeagent_gpu_nvlink_up{series}{1 if active else 0}\n")
            if received or link.HasField("rx_bytes_total"):
                rx.lines.append(f"{rx.name}{series}{received}\n")
            if sent or link.HasField("tx_bytes_total"):
                tx.lines.append(f"{tx.name}{series}{sent}\n")
            for family, field in errors:
                value = getattr(link, field)
                if value or link.HasField(field):
                    family.lines.append(f"{family.name}{series}{value}\n")
    yield from (rx, tx, up)
    yield from (family for family, _ in errors)
