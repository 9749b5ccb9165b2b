"""What every check is given."""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.agent.diag.kernel_log import KernelLog
from nodeagent.agent.diag.observe import Observation
from nodeagent.agent.diag.profile import Profile
from nodeagent.agent.sources import Roots


@dataclass(frozen=True, slots=True)
class DiagContext:
    profile: Profile
    roots: Roots
    observation: Observation
    kernel_log: KernelLog
