"""Sources of a node report, one module each, registered by name."""

from nodeagent.agent.collectors import cpu, diskstats, infiniband, meminfo, netdev, pressure  # noqa: F401 - registers
from nodeagent.agent.collectors.base import Collector, Roots, SourceContext
from nodeagent.agent.collectors.registry import UnknownCollectorError, available, enabled_names
from nodeagent.agent.gpu import collector as gpu  # noqa: F401 - registers

__all__ = ["Collector", "Roots", "SourceContext", "UnknownCollectorError", "available", "enabled_names"]
