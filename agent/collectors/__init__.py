"""Sources of a node report, one module each, registered by name."""

from agent.collectors import cpu, diskstats, gpu, infiniband, meminfo, netdev, pressure  # noqa: F401 - registers
from agent.collectors.base import Collector, Roots, SourceContext
from agent.collectors.registry import UnknownCollectorError, available, enabled_names

__all__ = ["Collector", "Roots", "SourceContext", "UnknownCollectorError", "available", "enabled_names"]
