"""What every check is given."""

from __future__ import annotations

from dataclasses import dataclass

from agent.collectors import Roots
from agent.diag.kernel_log import KernelLog
from agent.diag.observe import Observation
from agent.diag.profile import Profile


@dataclass(frozen=True, slots=True)
class DiagContext:
    profile: Profile
    roots: Roots
    observation: Observation
    kernel_log: KernelLog
