"""A simulated training node: a pipeline model (fetch, pre-process, host-to-device copy, compute,
all-reduce) that emits the `NodeReport`s an agent on such a node would send, with noise, and
the ground truth the detector is scored against. ``nodeagent run --simulate`` and
``nodeagent record --simulate`` use it; so do the tests and the accuracy benchmark.

``scenarios`` (what the node is and what its job does, a job across nodes, a faulty GPU's Xids;
the ``--set NAME=VALUE`` overrides), ``profiles`` (GPU boards), ``model`` (the pipeline model),
``simulation`` (the node in virtual time), ``emit`` (its counters and job samples as a report),
``source`` (the simulated `ReportSource`), ``suite`` (the labelled suite accuracy scores against)."""

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
