"""What rules hand to the alert book: one signal per alert instance per evaluation.

Rules (the detector for ``GPUDataStarved``, report checks for the hardware alerts) say, each
time they evaluate a node, which alert instances are firing and which are not; the alert book
turns those signals into lifecycles (firing -> resolved), persists them and feeds the sinks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AlertSignal:
    # Alert name, e.g. "GPUDataStarved", "NVLinkDown".
    name: str
    node_id: str
    # Tells apart instances of one alert on one node: "" (node-wide), "gpu:3", "nvlink:gpu0:link5", "nic:eth0".
    key: str
    firing: bool
    # "warning" or "critical" (Alertmanager's usual values); GPUDataStarved maps moderate/high onto them.
    severity: str = "warning"
    # Extra labels (cause, gpus, jobs, tier, ...); "alertname", "node" and "severity" are added by the book.
    labels: Mapping[str, str] = field(default_factory=dict)
    # Human text: "summary", "description", evidence values.
    annotations: Mapping[str, str] = field(default_factory=dict)
