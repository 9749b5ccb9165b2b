"""``[metrics]`` of ``collector.toml``: which fleet families the collector's ``/metrics`` carries.

    [metrics]
    per_node_families = true     # nodeagent_node_* and nodeagent_gpu_seconds_total, per node
    per_gpu_families = true      # nodeagent_gpu_* per GPU (state, ratios, data-starved seconds)
    per_gpu_max_nodes = 1000     # ... while this process holds at most this many reporting nodes (0: no bound)

Why: a reporting 8-GPU node is about 80 lines of ``/metrics``, 40 of them per GPU, so 10,000
nodes are 800,000 lines a scrape. The fleet summary (``nodeagent_fleet_*``: nodes by state,
GPUs by state) is always there and is what the shipped fleet rules read first; the per-GPU
series are on every agent's own ``/metrics`` and in remote write whatever is set here
(docs/metrics.md#how-big-the-page-grows). A bad value stops start-up with one line naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.core.settings.tables import check_table

DEFAULT_PER_GPU_MAX_NODES: Final = 1000

METRICS_KEYS: dict[str, tuple[type, object]] = {
    "per_node_families": (bool, True),
    "per_gpu_families": (bool, True),
    "per_gpu_max_nodes": (int, DEFAULT_PER_GPU_MAX_NODES),
}


class MetricsConfigError(ValueError):
    """One line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    per_node_families: bool = True
    per_gpu_families: bool = True
    # Above this many reporting nodes in one process the per-GPU families are left out; 0: never.
    per_gpu_max_nodes: int = DEFAULT_PER_GPU_MAX_NODES

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, source: str) -> MetricsConfig:
        values = check_table(raw, METRICS_KEYS, source=source, table="metrics", error=MetricsConfigError)
        if values["per_gpu_max_nodes"] < 0:
            raise MetricsConfigError(
                f"{source}: metrics.per_gpu_max_nodes: expected 0 (no bound) or more, got {values['per_gpu_max_nodes']}"
            )
        return cls(**values)

    def to_plain(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in METRICS_KEYS}

    def per_gpu_shown(self, reporting_nodes: int) -> bool:
        """Whether the per-GPU families are written for a page of this many reporting nodes."""
        if not self.per_gpu_families:
            return False
        return self.per_gpu_max_nodes == 0 or reporting_nodes <= self.per_gpu_max_nodes
