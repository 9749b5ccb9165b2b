"""Only the agent/gpu/nvml_*.py modules named here import pynvml; every NVML function they can reach is
listed in nvml_library.NVML_SYMBOLS, exported by the fake, and exercised through pynvml's real
loader; a new call cannot slip in untested."""

from __future__ import annotations

import ast
import ctypes
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu import nvml_library, nvml_readings
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.wire.clock_events import CLOCK_EVENT_REASONS
from tests.conftest import require
from tests.fakes.nvml.build import LIBRARY_NAME, FakeNvmlUnavailable, exported_symbols, nvml_include_dir
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4, a800_sxm4, h100_sxm5

AGENT = Path(__file__).resolve().parents[3] / "agent"
# The modules that touch NVML: exactly these import pynvml (one per role, agent/gpu/__init__.py).
NVML_MODULES = (
    "gpu/nvml_events.py", "gpu/nvml_handle.py", "gpu/nvml_library.py", "gpu/nvml_readings.py",
    "gpu/nvml_sampling.py", "gpu/nvml_topology.py",
)  # fmt: skip
_SYMBOL = re.compile(r"^nvml[A-Z]\w*$")


def _nvml_trees() -> list[ast.Module]:
    return [ast.parse((AGENT / module).read_text()) for module in NVML_MODULES]


def _symbol_literals_outside_the_list() -> set[str]:
    trees = _nvml_trees()
    listed: set[int] = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "NVML_SYMBOLS":
            listed = {id(n) for n in ast.walk(node)}
    return {
        node.value
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SYMBOL.match(node.value)
        and id(node) not in listed
    }  # fmt: skip


def _pynvml_functions_used() -> set[str]:
    return {
        node.attr
        for tree in _nvml_trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pynvml"
        and callable(getattr(pynvml, node.attr, None)) and node.attr.startswith("nvml")
    }  # fmt: skip


def _c_symbols_reached(function: str, seen: set[str] | None = None) -> set[str]:
    """The C symbols a pynvml wrapper looks up, following the wrappers it calls."""
    seen = set() if seen is None else seen
    if function in seen:
        return set()
    seen.add(function)
    source = inspect.getsource(getattr(pynvml, function))
    found = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', source))
    for callee in set(re.findall(r"\b(nvml\w+)\(", source)) - {function}:
        if inspect.isfunction(getattr(pynvml, callee, None)):
            found |= _c_symbols_reached(callee, seen)
    return found


def _symbols_called_on_the_library_directly() -> set[str]:
    """``pynvml.nvmlLib.<symbol>``: C functions called without a pynvml wrapper."""
    return {
        node.attr
        for tree in _nvml_trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "nvmlLib"
    }


def test_symbol_list_is_exactly_what_the_module_names() -> None:
    assert len(set(nvml_library.NVML_SYMBOLS)) == len(nvml_library.NVML_SYMBOLS)
    assert _symbol_literals_outside_the_list() == set(nvml_library.NVML_SYMBOLS)
    direct = _symbols_called_on_the_library_directly()
    assert direct == {"nvmlDeviceGetFieldValues"}
    assert direct <= set(nvml_library.NVML_SYMBOLS)


def test_every_pynvml_wrapper_used_reaches_only_listed_symbols() -> None:
    used = _pynvml_functions_used()
    assert "nvmlDeviceGetUtilizationRates" in used and "nvmlEventSetWait_v2" in used
    reached: set[str] = set()
    for function in used:
        reached |= _c_symbols_reached(function)
    assert reached <= set(nvml_library.NVML_SYMBOLS), sorted(reached - set(nvml_library.NVML_SYMBOLS))


def test_field_value_layout_is_nvml_h_one() -> None:
    assert nvml_readings.FIELD_LAYOUT_MATCHES  # else field values are decoded wrongly or not at all


def test_only_the_nvml_modules_import_pynvml() -> None:
    importers = sorted(
        str(path.relative_to(AGENT))
        for path in AGENT.rglob("*.py")
        if re.search(r"^\s*(import pynvml|from pynvml)", path.read_text(), re.M)
    )
    assert importers == sorted(NVML_MODULES)


def test_fake_exports_every_symbol(fake_nvml_dir: Path) -> None:
    library = fake_nvml_dir / LIBRARY_NAME
    missing = set(nvml_library.NVML_SYMBOLS) - exported_symbols(library)
    assert not missing, f"the fake NVML lacks {sorted(missing)}"
    loaded = ctypes.CDLL(str(library))
    for symbol in nvml_library.NVML_SYMBOLS:
        assert getattr(loaded, symbol) is not None


def test_legacy_fake_lacks_exactly_the_newer_variants(fake_nvml_legacy_dir: Path) -> None:
    missing = set(nvml_library.NVML_SYMBOLS) - exported_symbols(fake_nvml_legacy_dir / LIBRARY_NAME)
    newest = {symbols[0] for symbols in nvml_library._VARIANTS.values()}
    assert missing == newest


def test_field_metric_and_reason_ids_are_nvml_h_ones() -> None:
    try:
        header = (nvml_include_dir() / "nvml.h").read_text()
    except FakeNvmlUnavailable as err:
        require(False, str(err))  # a failure in CI, where nvidia-nvml-dev is installed
        return
    defines = {m[0]: int(m[1], 0) for m in re.findall(r"#define\s+(\w+)\s+(0x[0-9A-Fa-f]+|\d+)\b", header)}
    enums = {m[0]: int(m[1]) for m in re.findall(r"\b(NVML_GPM_METRIC_\w+)\s*=\s*(\d+)", header)}
    checked = 0
    for name, value in vars(gpu_fields).items():
        if name.startswith("FI_"):
            # nvml.h is the reference; a pynvml older than it may lack the newest ids (GPU_TEMP, 308).
            bound = getattr(pynvml, "NVML_FI_DEV_" + name[3:], value)
            assert defines["NVML_FI_DEV_" + name[3:]] == value == bound, name
            checked += 1
        elif name.startswith("GPM_") and isinstance(value, int):
            header_name = "NVML_GPM_METRIC_" + name[4:]
            assert enums[header_name] == value, name
            checked += 1
    assert checked >= 25
    reasons = {
        re.sub(r"(?<!^)(?=[A-Z])", "_", m[1]).lower(): int(m[2], 16)
        for m in re.findall(r"#define\s+nvmlClocks(Event|Throttle)Reason(\w+)\s+0x([0-9A-Fa-f]+)LL", header)
    }
    for bit, name in CLOCK_EVENT_REASONS:
        assert reasons[name] == bit, name


def test_calls_made_are_listed_and_counted_as_the_library_saw_them(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    """Run every path (each profile, GPM, fallbacks, events, a lost GPU) and compare both ledgers."""
    for profile in (a100_sxm4, a800_sxm4, h100_sxm5):
        state = fake_nvml.load(profile())
        state.gpus[0].procs = {1: 1024}
        fake_nvml.write()
        gpu_source = make_gpu_source()
        gpu_source.scan(_info())
        for t in range(3):
            state.advance(1.0)
            if t == 1:
                state.inject_xid(1, 13)
                state.gpus[2].lost = 1
            fake_nvml.write()
            gpu_source.collect(_report(t))
        gpu_source.close()
    called = fake_nvml.called_symbols()
    assert called <= set(nvml_library.NVML_SYMBOLS), sorted(called - set(nvml_library.NVML_SYMBOLS))
    ours = nvml_library.call_counts()
    for symbol in called:
        library_saw = fake_nvml.calls(symbol)
        if symbol == "nvmlDeviceGetComputeRunningProcesses_v3":
            assert library_saw >= ours[symbol]  # pynvml asks twice when processes run
        else:
            assert library_saw == ours.get(symbol, 0), symbol


def _info() -> Any:
    from nodeagent.v1 import nodeagent_pb2 as pb

    return pb.NodeInfo()


def _report(t: int) -> Any:
    from nodeagent.v1 import nodeagent_pb2 as pb

    return pb.NodeReport(time_unix_seconds=1000.0 + t)


@pytest.mark.parametrize("legacy", [False, True], ids=["current-driver", "legacy-driver"])
def test_library_found_through_ld_library_path_picks_variants_by_driver(
    run_gpu_probe: Callable[..., dict[str, Any]], fake_nvml_dir: Path, fake_nvml_legacy_dir: Path, legacy: bool
) -> None:
    state = a100_sxm4()
    g = state.gpus[0]
    g.mem_used, g.temp, g.clock_reasons = 7 * 1024**3, 61, 0x48  # HW thermal slowdown, and so HW slowdown
    g.temp_fraction = 0.75  # field 308 reads 61.75 where the driver has it: reported in whole degrees
    result = run_gpu_probe(fake_nvml_legacy_dir if legacy else fake_nvml_dir, state, ticks=2)
    assert result["unavailable_reason"] == ""
    assert len(result["info"]["gpu"]["gpus"]) == 8
    want = {
        "memory": "nvmlDeviceGetMemoryInfo" if legacy else "nvmlDeviceGetMemoryInfo_v2",
        "temperature": "nvmlDeviceGetTemperature" if legacy else "nvmlDeviceGetTemperatureV",
        "clock_event_reasons": (
            "nvmlDeviceGetCurrentClocksThrottleReasons" if legacy else "nvmlDeviceGetCurrentClocksEventReasons"
        ),
    }
    assert result["variants"] == want
    sample = result["reports"][-1]["gpus"][0]
    # The v1 memory call counts reserved memory as used, as nvidia-smi did before R510.
    assert int(sample["memory_used_bytes"]) == g.mem_used + (g.mem_reserved if legacy else 0)
    assert sample["temperature_celsius"] == 61
    # The bitmask's on the legacy driver, the counters' on the current one (fields 269-271): the same names.
    assert sample["clock_event_reason_names"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert set(result["calls"]) <= set(nvml_library.NVML_SYMBOLS)
    assert "Traceback" not in result["stderr"]


def test_blackwell_mig_fabric_and_process_paths_are_listed_and_counted(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    """The fabric, MIG (devices, instance ids, attributes, per-instance GPM) and per-process
    utilization paths, on B200 and GB200 trays: both ledgers agree, every symbol listed."""
    from tests.fakes.nvml.state import b200, gb200

    for profile in (b200, gb200):
        state = fake_nvml.load(profile())
        state.split_mig(1, [(1, "3g.90gb", 3, 90), (2, "4g.90gb", 4, 90)])
        state.gpus[1].mig[0].procs = {7: 1024}
        state.gpus[0].procs = {1: 1024, 2: 2048}
        state.gpus[0].proc_util = {1: (40, 10), 2: (20, 5)}
        state.gpus[2].fabric_state = 2
        fake_nvml.write()
        gpu_source = make_gpu_source()
        gpu_source.scan(_info())
        for t in range(3):
            state.advance(1.0)
            fake_nvml.write()
            gpu_source.collect(_report(t))
        gpu_source.scan(_info())  # a rescan re-reads the MIG layout
        gpu_source.close()
    called = fake_nvml.called_symbols()
    assert {"nvmlDeviceGetGpuFabricInfoV", "nvmlGpmMigSampleGet", "nvmlDeviceGetAttributes_v2"} <= called
    assert called <= set(nvml_library.NVML_SYMBOLS), sorted(called - set(nvml_library.NVML_SYMBOLS))
    ours = nvml_library.call_counts()
    for symbol in called:
        library_saw = fake_nvml.calls(symbol)
        if symbol in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization"):
            assert library_saw >= ours[symbol]  # pynvml asks for the size first when there are entries
        else:
            assert library_saw == ours.get(symbol, 0), symbol
