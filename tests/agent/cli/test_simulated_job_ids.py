"""A simulated node's Slurm job id (``6613`` for ``sim-1``) is said where it shows: ``run --help``
explains it, and the ids the docs quote are the ones the simulator gives."""

from __future__ import annotations

from click.testing import CliRunner

from nodeagent.agent.cli.run import run
from nodeagent.tools.simulator import Simulation


def _job_id(node_id: str, *sets: tuple[str, str]) -> str:
    simulation = Simulation("ordinary-cloud", node_id=node_id, **dict(sets))
    return simulation.params.job_id


def test_run_help_explains_the_simulated_job_id() -> None:
    done = CliRunner().invoke(run, ["--help"], terminal_width=200)
    text = " ".join(done.output.split())
    assert "Its GPU processes run a Slurm job of its own, a 4-digit id made from --node-id (sim-1: job 6613" in text


def test_the_ids_the_docs_quote_are_the_simulators() -> None:
    assert _job_id("sim-1") == "6613"
    assert (_job_id("rental-10g-pcie"), _job_id("rental-50g-nvlink")) == ("7235", "1962")
    assert _job_id("train-3", ("job_key", "slurm/4242")) == "4242"
