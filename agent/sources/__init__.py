"""Sources of a node report, one module each, registered by name."""

from nodeagent.agent.sources import (  # noqa: F401 - registers
    cpu,
    diskstats,
    gpu,
    infiniband,
    meminfo,
    netdev,
    netstat,
    pressure,
)
from nodeagent.agent.sources.base import Roots, Source, SourceContext, SourceOption
from nodeagent.agent.sources.registry import UnknownSourceError, available, enabled_names

__all__ = ["Roots", "Source", "SourceContext", "SourceOption", "UnknownSourceError", "available", "enabled_names"]
