"""What a dcgm-exporter ``/metrics`` page says about each GPU's profiling: text in, readings out.

dcgm-exporter writes one series per GPU (or, on a GPU in MIG mode, per GPU instance) and field, as
its ``internal/pkg/rendermetrics/render_metrics.go`` renders them (one line, broken here)::

    DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-…",pci_bus_id="00000000:07:00.0",device="nvidia0",
        modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",hostname="node-1"} 0.734512

The UUID label is ``UUID`` (``uuid`` under its ``--use-old-namespace``) and names the physical GPU,
also for an instance (``GPU_I_ID`` is NVML's GPU instance id). Only the families read here are handed
to prometheus_client's parser: an 8-GPU page has some 30 families and the rest would cost a parse
each tick for nothing. No I/O here (``dcgm_exporter.py`` fetches the page).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

SM_ACTIVE: Final = "DCGM_FI_PROF_SM_ACTIVE"  # ratio of cycles an SM has at least one warp assigned
TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"  # ratio of cycles the tensor (HMMA) pipe is active
# Fields every refresh of DCGM changes on a GPU that is powered (the energy counter climbs, the draw
# wavers): the page's "has it been refreshed" evidence, read beside the profiling fields. Both are in
# dcgm-exporter's default counters (etc/default-counters.csv).
_REFRESH_MARKERS: Final = ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE")
_READ: Final = (SM_ACTIVE, TENSOR_ACTIVE)
_SELECTED: Final = tuple(f"{name}{end}" for name in (*_READ, *_REFRESH_MARKERS) for end in ("{", " "))
_UUID_LABELS: Final = ("UUID", "uuid")

# (GPU UUID, GPU instance id or None for the whole GPU)
Entity = tuple[str, int | None]


@dataclass(frozen=True, slots=True)
class DcgmReading:
    """One GPU's (or GPU instance's) profiling, as ratios 0..1 over DCGM's last sampling interval."""

    sm_active_ratio: float | None = None  # DCGM_FI_PROF_SM_ACTIVE
    tensor_active_ratio: float | None = None  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE


@dataclass(frozen=True, slots=True)
class DcgmPage:
    readings: Mapping[Entity, DcgmReading]
    uuids: frozenset[str]  # every GPU the page's profiling or refresh markers name
    fingerprint: int  # changes when DCGM refreshed the values (the selected series, in any order)
    has_sm_active: bool  # the exporter collects DCGM_FI_PROF_SM_ACTIVE (not in its default counters)


class NotAnExporterPage(ValueError):
    """The page is not dcgm-exporter's (one line: what it is instead)."""


def parse_page(text: str) -> DcgmPage:
    """The profiling readings of a dcgm-exporter page; ``NotAnExporterPage`` for a page that is not one.

    A value outside 0..1 (or NaN) is no reading; a series without a UUID label is not a GPU's."""
    if "# TYPE nodeagent_" in text or "\nnodeagent_" in text:
        # The agent's own /metrics speaks dcgm-exporter's names (it replaces it on port 9400): reading
        # it back would present the agent's own GPM as DCGM's.
        raise NotAnExporterPage("it is a nodeagent /metrics page, not dcgm-exporter's")
    if "DCGM_FI_" not in text:
        raise NotAnExporterPage("it has no DCGM_FI_ series")
    lines = [line for line in text.splitlines() if line.startswith(_SELECTED)]
    values: dict[Entity, dict[str, float]] = {}
    uuids: set[str] = set()
    has_sm_active = False
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            uuid = next((sample.labels[k] for k in _UUID_LABELS if sample.labels.get(k)), None)
            if uuid is None:
                continue
            uuids.add(uuid)
            if sample.name not in _READ:
                continue
            has_sm_active = has_sm_active or sample.name == SM_ACTIVE
            if not (isinstance(sample.value, float | int) and 0.0 <= sample.value <= 1.0):
                continue  # NaN fails both comparisons
            values.setdefault((uuid, _instance(sample.labels)), {})[sample.name] = float(sample.value)
    readings = {
        entity: DcgmReading(sm_active_ratio=got.get(SM_ACTIVE), tensor_active_ratio=got.get(TENSOR_ACTIVE))
        for entity, got in values.items()
    }
    return DcgmPage(
        readings=readings, uuids=frozenset(uuids), fingerprint=hash(frozenset(lines)), has_sm_active=has_sm_active
    )


def _instance(labels: Mapping[str, str]) -> int | None:
    text = labels.get("GPU_I_ID", "")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return -1  # an instance of no id this agent can match: kept apart from the whole GPU
    return value if value >= 0 else -1
