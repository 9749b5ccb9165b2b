"""What a dcgm-exporter ``/metrics`` page says about each GPU's profiling: text in, readings out.

dcgm-exporter writes one series per GPU (or, on a GPU in MIG mode, per GPU instance) and field, as
its ``internal/pkg/rendermetrics/render_metrics.go`` renders them (one line, broken here)::

    DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-…",pci_bus_id="00000000:07:00.0",device="nvidia0",
        modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",hostname="node-1"} 0.734512

The UUID label is ``UUID`` (``uuid`` under its ``--use-old-namespace``) and names the physical GPU,
also for an instance (``GPU_I_ID`` is NVML's GPU instance id). Only the two families read here
go through prometheus_client's parser (an 8-GPU page has some 25, and the parser walks each label
character by character); the energy and power lines are only compared, as text, between scrapes.
No I/O here (``dcgm_exporter.py`` fetches the page).
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
_PARSED: Final = tuple(f"{name}{end}" for name in _READ for end in ("{", " "))
_MARKERS: Final = tuple(f"{name}{end}" for name in _REFRESH_MARKERS for end in ("{", " "))
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
    uuids: frozenset[str]  # every GPU the page's SM or tensor activity names
    fingerprint: int  # changes when DCGM refreshed the values (the selected series, in any order)
    has_sm_active: bool  # the exporter collects DCGM_FI_PROF_SM_ACTIVE (not in its default counters)


class NotAnExporterPage(ValueError):
    """The page is not dcgm-exporter's (one line: what it is instead)."""


def parse_page(text: str) -> DcgmPage:
    """The profiling readings of a dcgm-exporter page (``PageParser`` without its memory)."""
    return PageParser().parse(text)


class PageParser:
    """Reads pages of one exporter, scrape after scrape. A series' name and labels (the text up to
    its ``}``) go through prometheus_client's parser the first time they are seen; the same series on
    the next page reuses what it said, and only the value is read (Python's ``float`` reads Go's
    ``NaN`` and ``+Inf`` as the parser does). An exporter's series change only with its GPUs."""

    MAX_SERIES: Final = 4096  # forgotten all at once beyond this: a page of ever-new series

    def __init__(self) -> None:
        self._series: dict[str, tuple[str, str, int | None] | None] = {}  # head -> (name, uuid, instance)

    def parse(self, text: str) -> DcgmPage:
        """``NotAnExporterPage`` for a page that is not dcgm-exporter's; ``ValueError`` for text that is
        not the exposition format. A value outside 0..1 (or NaN) is no reading; a series without a
        UUID label is not a GPU's."""
        if "# TYPE nodeagent_" in text or "\nnodeagent_" in text:
            # The agent's own /metrics speaks dcgm-exporter's names (it replaces it on port 9400):
            # reading it back would present the agent's own GPM as DCGM's.
            raise NotAnExporterPage("it is a nodeagent /metrics page, not dcgm-exporter's")
        if "DCGM_FI_" not in text:
            raise NotAnExporterPage("it has no DCGM_FI_ series")
        every = text.splitlines()
        lines = [line for line in every if line.startswith(_PARSED)]
        markers = [line for line in every if line.startswith(_MARKERS)]  # compared between scrapes, never parsed
        values: dict[Entity, dict[str, float]] = {}
        uuids: set[str] = set()
        has_sm_active = False
        for line in lines:
            end = line.rfind("}") + 1
            head = line[:end] if end else line.split(" ", 1)[0]
            series = self._series[head] if head in self._series else self._learn(head)
            if series is None:
                continue
            name, uuid, instance = series
            uuids.add(uuid)
            has_sm_active = has_sm_active or name == SM_ACTIVE
            value = _value(line[len(head) :])
            if not 0.0 <= value <= 1.0:
                continue  # NaN fails both comparisons
            values.setdefault((uuid, instance), {})[name] = value
        readings = {
            entity: DcgmReading(sm_active_ratio=got.get(SM_ACTIVE), tensor_active_ratio=got.get(TENSOR_ACTIVE))
            for entity, got in values.items()
        }
        return DcgmPage(
            readings=readings,
            uuids=frozenset(uuids),
            fingerprint=hash(frozenset(lines + markers)),
            has_sm_active=has_sm_active,
        )

    def _learn(self, head: str) -> tuple[str, str, int | None] | None:
        """What prometheus_client's parser says of a series it has not seen: its name, GPU UUID and
        GPU instance; None for a series of no GPU."""
        if len(self._series) >= self.MAX_SERIES:
            self._series.clear()
        learnt: tuple[str, str, int | None] | None = None
        for family in text_string_to_metric_families(f"{head} 0\n"):
            for sample in family.samples:
                uuid = next((sample.labels[k] for k in _UUID_LABELS if sample.labels.get(k)), None)
                if uuid is not None:
                    learnt = (sample.name, uuid, _instance(sample.labels))
        self._series[head] = learnt
        return learnt


def _value(rest: str) -> float:
    """The value after a series' labels (an optional timestamp after it is ignored)."""
    parts = rest.split()
    if not parts:
        raise ValueError(f"no value in {rest!r}")
    try:
        return float(parts[0])
    except ValueError as err:
        raise ValueError(f"not a number: {parts[0]!r}") from err


def _instance(labels: Mapping[str, str]) -> int | None:
    text = labels.get("GPU_I_ID", "")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return -1  # an instance of no id this agent can match: kept apart from the whole GPU
    return value if value >= 0 else -1
