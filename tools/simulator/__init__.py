"""A simulated training node: a pipeline model (fetch, pre-process, host-to-device copy, compute,
all-reduce) that emits the ``NodeReport``s an agent on such a node would send, with noise, and
the ground truth the detector is scored against. ``nodeagent run --simulate`` and
``nodeagent record --simulate`` use it; so do the tests and the accuracy benchmark."""

from nodeagent.tools.simulator.scenarios import SCENARIOS, Params, Scenario, ScenarioError, UnknownScenarioError
from nodeagent.tools.simulator.simulation import DEFAULT_START_TIME, GpuTruth, Simulation, Truth

__all__ = [
    "DEFAULT_START_TIME",
    "SCENARIOS",
    "GpuTruth",
    "Params",
    "Scenario",
    "ScenarioError",
    "Simulation",
    "Truth",
    "UnknownScenarioError",
]
