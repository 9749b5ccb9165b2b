"""What a source is, and what it is given.

A source is one reader of the node (`/proc/stat`, NVML, ...). On the command line and in the
report it is a "collector" (`--collector.NAME`, `NodeReport.collectors`), as node_exporter names
its readers; in the code it is a `Source`, so that "collector" means the server alone. A source
may take settings of its own, as node_exporter's do (`--collector.diskstats.device-include`):
it declares them in ``options`` and checks them in ``check_options``."""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.v1 import nodeagent_pb2 as pb


@dataclass(frozen=True, slots=True)
class Roots:
    """Where procfs and sysfs are mounted; tests and containers point these elsewhere."""

    procfs: str = "/proc"
    sysfs: str = "/sys"

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def mountinfo(self) -> str:
        """The mount table of the node being watched.

        ``self`` is whoever reads, so under another root (a container given the host's /proc with
        hostPID) ``<procfs>/self/mountinfo`` would be the container's own mounts; the host's are
        those of its init, ``<procfs>/1/mountinfo``, when that is readable."""
        if os.path.normpath(self.procfs) != "/proc":
            init = self.proc("1", "mountinfo")
            if os.access(init, os.R_OK):
                return init
        return self.proc("self", "mountinfo")


@dataclass(frozen=True, slots=True)
class SourceOption:
    """A setting of one source: ``--collector.<source>.<name> VALUE`` on the command line."""

    name: str  # "device-include"
    help: str
    metavar: str = "TEXT"


@dataclass(slots=True)
class SourceContext:
    roots: Roots
    files: KernelFiles
    config: AgentConfig
    # The sources' settings that were given, "<source>.<option>" -> value (checked by ``check_options``).
    options: Mapping[str, str] = field(default_factory=dict)


class Source(abc.ABC):
    """One source of a node. ``collect`` runs every tick and must not raise for a missing
    device class or an unreadable attribute: that is "no data" for that value."""

    name: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    help: ClassVar[str] = ""
    options: ClassVar[tuple[SourceOption, ...]] = ()

    def __init__(self, ctx: SourceContext) -> None:
        self.ctx = ctx
        # Set by collect() when it meets a device the last scan did not know.
        self.needs_rescan = False

    @classmethod  # noqa: B027 - optional hook
    def check_options(cls, options: Mapping[str, str]) -> None:
        """Raise ``ValueError`` (one line, naming the flag) for settings this source cannot use;
        ``options`` holds every source's, "<source>.<option>" -> value."""

    def scan(self, info: pb.NodeInfo) -> None:  # noqa: B027 - optional hook
        """Describe the topology this source sees; called on the first tick and on rescans."""

    @abc.abstractmethod
    def collect(self, report: pb.NodeReport) -> None:
        """Add this source's sample of the current tick to ``report``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the source holds (NVML handles, threads)."""
