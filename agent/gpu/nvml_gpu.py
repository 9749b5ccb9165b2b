"""The ``Gpu`` every caller holds: one NVML handle (``nvml_handle.py``) with all its queries, by role:
what a scan asks (``nvml_topology.py``), what a tick reads (``nvml_readings.py``), and what is read
over an interval, GPM and the power between ticks (``nvml_sampling.py``).

No NVML here: the queries live with their role, and this class only puts them on one object."""

from __future__ import annotations

from nodeagent.agent.gpu.nvml_readings import TickReadings
from nodeagent.agent.gpu.nvml_sampling import IntervalSamples
from nodeagent.agent.gpu.nvml_topology import TopologyQueries


class Gpu(TopologyQueries, TickReadings, IntervalSamples):
    """One GPU's (or MIG device's) handle, what NVML has told us it cannot do, and every query."""

    __slots__ = ()
