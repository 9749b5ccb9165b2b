"""What `nodeagent-collector serve` imports: only its own command's modules. The daemon runs for
months; every module the other commands need (the demo, the load generator, the simulator behind
them, the query commands, replay) would stay resident in it, unused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# The console script's entry point as `serve` starts: the group resolves the settings (which
# imports the service command) and the command's own options are parsed; --help stops it there.
_PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules))))
from nodeagent.collector.cli.main import main
sys.argv = ["nodeagent-collector", "serve", "--help"]
main()
"""

# Loaded only when their command is named: a test line per reason.
_NOT_LOADED = {
    "nodeagent.tools": "the demo, the load generator and the simulator (demo, loadgen)",
    "nodeagent.collector.cli.demo": "the demo and loadgen commands",
    "nodeagent.collector.cli.nodes": "the nodes and alerts query commands",
    "nodeagent.collector.cli.client": "the query commands' client",
    "nodeagent.collector.cli.history": "the history query commands",
    "nodeagent.collector.cli.jobs": "the jobs query command",
    "nodeagent.collector.cli.replay": "the replay command",
    "nodeagent.collector.replay": "the detector over a trace (replay)",
    "nodeagent.core.settings.show": "config show",
}


@pytest.fixture(scope="module")
def loaded() -> list[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--listen" in done.stdout  # serve's own help: its module was imported
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    modules: list[str] = json.loads(line.removeprefix("MODULES "))
    return modules


@pytest.mark.parametrize("module", sorted(_NOT_LOADED))
def test_serve_does_not_load(loaded: list[str], module: str) -> None:
    found = [name for name in loaded if name == module or name.startswith(module + ".")]
    assert not found, f"{found[0]} is loaded by `nodeagent-collector serve`: {_NOT_LOADED[module]}"


def test_serve_loads_its_own_command(loaded: list[str]) -> None:
    # The probe itself: it saw the modules of a serve that was really set up.
    assert {"nodeagent.collector.cli.serve", "nodeagent.collector.service.server"} <= set(loaded)
