"""The sources of a node report, one module each, registered by name (node_exporter's collectors:
their flags keep its ``--collector.NAME`` form). ``gpu`` (NVML: the entry to ``agent/gpu/``),
``cpu`` (``/proc/stat``, loadavg), ``meminfo``, ``pressure`` (``/proc/pressure``), ``netdev``
(``/proc/net/dev``, ``/sys/class/net``), ``netstat`` (TCP segments sent and retransmitted),
``infiniband``, ``diskstats`` (with node_exporter's device include and exclude). ``registry``:
the sources by name, on or off by default; ``base``: `Source`, the settings a source declares
(`SourceOption`, `check_options`) and the ``--procfs``/``--sysfs`` roots every reader takes."""

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
