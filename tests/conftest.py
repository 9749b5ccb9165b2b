"""Shared fixtures. Tests that need root or Debian tools skip with the reason, except
under CI (NODEAGENT_REQUIRE_LIVE_TESTS=1), where a missing tool is a failure."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots, enabled_names
from tests.fakes.trees import SHARED_FIXTURES, materialize

pytest_plugins = ["tests.fakes.nvml.plugin", "tests.fakes.alertmanager"]

REQUIRE_LIVE = os.environ.get("NODEAGENT_REQUIRE_LIVE_TESTS") == "1"


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command run in-process configures logging (its level too); the next test starts from
    structlog's defaults again, so ``capture_logs`` sees what a test's code logs at any level."""
    yield
    structlog.reset_defaults()


def require(condition: bool, reason: str) -> None:
    """Skip (or, in CI, fail) when a live test cannot run here."""
    if condition:
        return
    if REQUIRE_LIVE:
        pytest.fail(f"live test cannot run in CI: {reason}")
    pytest.skip(reason)


def require_root_tools(*tools: str) -> None:
    require(os.geteuid() == 0, "needs root")
    missing = [t for t in tools if shutil.which(t) is None]
    require(not missing, f"needs {', '.join(missing)} (Debian packages; `make system-deps`)")


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"reference fixtures not present at {SHARED_FIXTURES}")
    return SHARED_FIXTURES


@pytest.fixture(scope="session")
def node_exporter_roots(shared_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Roots:
    tree = materialize(shared_fixtures / "node_exporter", tmp_path_factory.mktemp("ne") / "tree")
    return Roots(procfs=str(tree / "proc"), sysfs=str(tree / "sys"))


@pytest.fixture(scope="session")
def procfs_roots(shared_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Roots:
    tree = materialize(shared_fixtures / "procfs", tmp_path_factory.mktemp("procfs") / "tree")
    return Roots(procfs=str(tree / "proc"), sysfs=str(tree / "sys"))


@pytest.fixture
def make_sampler() -> Iterator[object]:
    """Build samplers over given roots with the host sources; closed after the test."""
    made: list[Sampler] = []

    def build(roots: Roots, config: AgentConfig | None = None, sources: list[str] | None = None) -> Sampler:
        names = sources or [n for n in enabled_names({}) if n != "gpu"]
        sampler = Sampler(names, node_id="test-node", roots=roots, config=config, clock=_Clock())
        made.append(sampler)
        return sampler

    yield build
    for sampler in made:
        sampler.close()


class _Clock:
    """A clock that advances exactly one second per reading: rates are exact in tests."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now
