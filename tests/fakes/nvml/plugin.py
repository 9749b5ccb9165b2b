"""pytest fixtures for the fake NVML (register with ``pytest_plugins = ["tests.fakes.nvml.plugin"]``).

In-process tests (``fake_nvml``): the fake is loaded once into the test process by its path, with
its SONAME ``libnvidia-ml.so.1``; when pynvml then dlopens "libnvidia-ml.so.1" the dynamic loader
returns that already-loaded library, so pynvml's real ctypes path, struct layouts and return codes
are exercised, and tests can read the fake's call counters through the same handle.

Out-of-process tests (``run_gpu_probe``): a fresh interpreter runs the GPU source
(``tests/fakes/nvml/probe.py``) with ``LD_LIBRARY_PATH`` set before it starts, the way a real
deployment finds the library, or pointing at an empty directory to play a node without a driver.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.gpu import nvml_library
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from tests.fakes.nvml.build import LIBRARY_NAME, FakeNvmlUnavailable, build_fake_nvml
from tests.fakes.nvml.state import FakeNvmlState

REPO = Path(__file__).resolve().parents[3]
STATE_ENV = "FAKE_NVML_STATE"
POWER_ENV = "FAKE_NVML_POWER_LIVE"  # the live draw, mW per GPU (fake_nvml.c, power_now_mw)
_loaded: dict[Path, ctypes.CDLL] = {}


@dataclass
class FakeNvml:
    """The fake library loaded in this process and the state file it reads."""

    lib: ctypes.CDLL
    lib_dir: Path
    state_path: Path
    state: FakeNvmlState | None = None

    def load(self, state: FakeNvmlState) -> FakeNvmlState:
        self.state = state
        self.write()
        return state

    def write(self) -> None:
        """Publish ``state`` (after a test changed it) to the library."""
        assert self.state is not None, "load a state first"
        self.state.write(self.state_path)

    def calls(self, symbol: str | None = None, gpu: int = -1) -> int:
        """Calls the library received (since the test began), of ``symbol`` (all when None), on ``gpu``."""
        return int(self.lib.fake_nvml_calls(symbol.encode() if symbol else None, gpu))

    def field_requests(self, gpu: int, field_id: int) -> int:
        return int(self.lib.fake_nvml_field_requests(gpu, field_id))

    def called_symbols(self) -> set[str]:
        buffer = ctypes.create_string_buffer(16384)
        self.lib.fake_nvml_called_symbols(buffer, len(buffer))
        return set(buffer.value.decode().split())

    def reset_counts(self) -> None:
        self.lib.fake_nvml_reset_counts()

    def live_gpm_samples(self) -> int:
        return int(self.lib.fake_nvml_live_gpm_samples())

    def live_event_sets(self) -> int:
        return int(self.lib.fake_nvml_live_event_sets())


def _build(out_dir: Path, legacy: bool = False) -> Path:
    try:
        return build_fake_nvml(out_dir, legacy=legacy)
    except FakeNvmlUnavailable as err:
        # CI installs gcc and nvidia-nvml-dev: there a missing fake is a failure, not a skip.
        if os.environ.get("NODEAGENT_REQUIRE_LIVE_TESTS") == "1":
            pytest.fail(f"fake NVML cannot be built in CI: {err}")
        pytest.skip(f"fake NVML unavailable: {err}")


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the compiled fake ``libnvidia-ml.so.1``."""
    return _build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def fake_nvml_legacy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake as an old driver: without the _v2/V/ClocksEvent symbols."""
    return _build(tmp_path_factory.mktemp("fake-nvml-legacy"), legacy=True)


def _preload(lib_dir: Path) -> ctypes.CDLL:
    if lib_dir in _loaded:
        return _loaded[lib_dir]
    import pynvml  # tests may; in the agent only the nvml_*.py modules of agent/gpu/ do

    if pynvml.nvmlLib is not None and not hasattr(pynvml.nvmlLib, "fake_nvml_calls"):
        pytest.skip("a real libnvidia-ml.so.1 is already loaded in this test process")
    lib = ctypes.CDLL(str(lib_dir / LIBRARY_NAME), mode=ctypes.RTLD_GLOBAL)
    lib.fake_nvml_calls.restype = ctypes.c_ulonglong
    lib.fake_nvml_calls.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.fake_nvml_field_requests.restype = ctypes.c_ulonglong
    lib.fake_nvml_field_requests.argtypes = [ctypes.c_int, ctypes.c_uint]
    nvml_library.init()
    try:
        if not hasattr(pynvml.nvmlLib, "fake_nvml_calls"):
            pytest.skip("pynvml bound to another libnvidia-ml.so.1 than the fake")
    finally:
        nvml_library.shutdown()
    _loaded[lib_dir] = lib
    return lib


@pytest.fixture
def fake_nvml(fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    """The fake NVML for this test, with no GPUs until the test loads a state (``fake.load(...)``).
    NVML is shut down after the test, so each test starts afresh."""
    state_path = tmp_path / "nvml.state"
    monkeypatch.setenv(STATE_ENV, str(state_path))
    nvml_library.shutdown()
    fake = FakeNvml(lib=_preload(fake_nvml_dir), lib_dir=fake_nvml_dir, state_path=state_path)
    fake.reset_counts()
    nvml_library.reset_call_counts()
    yield fake
    nvml_library.shutdown()


@pytest.fixture
def make_gpu_source() -> Iterator[Callable[..., GpuSource]]:
    """Build GPU sources (over given procfs and sysfs roots); closed after the test."""
    made: list[GpuSource] = []

    def build(procfs: Path | str = "/proc", sysfs: Path | str = "/sys") -> GpuSource:
        ctx = SourceContext(
            roots=Roots(procfs=str(procfs), sysfs=str(sysfs)), files=KernelFiles(), config=AgentConfig()
        )
        source = GpuSource(ctx)
        made.append(source)
        return source

    yield build
    for gpu_source in made:
        gpu_source.close()
        gpu_source.ctx.files.close()


@pytest.fixture
def run_gpu_probe(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Run the GPU source in a fresh interpreter; returns what ``probe.py`` printed."""

    def run(lib_dir: Path, state: FakeNvmlState | None = None, ticks: int = 2) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if k not in (STATE_ENV, "LD_PRELOAD")}
        env["LD_LIBRARY_PATH"] = str(lib_dir)
        env["PYTHONPATH"] = str(REPO)
        if state is not None:
            state_path = tmp_path / "probe.state"
            state.write(state_path)
            env[STATE_ENV] = str(state_path)
        command = [sys.executable, "-m", "tests.fakes.nvml.probe", "--ticks", str(ticks)]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"probe failed ({done.returncode}):\n{done.stderr}"
        result: dict[str, Any] = json.loads(done.stdout)
        result["stderr"] = done.stderr
        return result

    return run


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake's live draw file ($FAKE_NVML_POWER_LIVE: mW per GPU index, fake_nvml.c's
    power_now_mw), 100 W on GPU 0 until the test writes its own."""
    path = tmp_path / "power.live"
    path.write_text("100000\n")
    monkeypatch.setenv(POWER_ENV, str(path))
    return path


@pytest.fixture
def sources() -> Iterator[list[GpuSource]]:
    """GPU sources a test makes, closed after it (their threads and kernel files)."""
    made: list[GpuSource] = []
    yield made
    for source in made:
        source.close()
        source.ctx.files.close()
