"""What the daemon imports: its resident memory has a budget (45 MB with the GPU reader and
/metrics on), and every module that `nodeagent run` loads but never uses stays resident."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Loaded by the command line and the run command's modules, as `nodeagent run` loads them.
_PROBE = """
import json, sys
import click
from nodeagent.agent.cli.main import cli
assert cli.get_command(click.Context(cli), "run") is not None
import nodeagent.agent.cli.run
# What a tick does beyond the imports, where it could load more: the report's repair walks its
# maps, and the kubelet's pod-resources API is asked only once its socket exists (its last answer
# stamps each report's namespaces).
from nodeagent.agent.exposition.pod_resources import PodResources, stamp_namespaces
from nodeagent.core.wire.validate import repair
from nodeagent.v1 import nodeagent_pb2 as pb
report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
report.rdma_ports.add(device="mlx5_0", port=1).counters["symbol_error"] = 2**64 - 1
report.events.add(kind="k").attributes["key"] = "value"
assert len(repair(report)) == 1 and not report.rdma_ports[0].counters
pods = PodResources("/nonexistent/kubelet.sock")
pods.refresh()
stamp_namespaces(report, pods.namespaces())
maps = open("/proc/self/maps").read()
print(json.dumps({"modules": sorted(sys.modules), "libcrypto": "libcrypto" in maps, "libssl": "libssl" in maps}))
"""

# Heavy and unused by the daemon: a test line per reason.
_NOT_LOADED = {
    "rich": "structlog's rich tracebacks (top alone uses rich)",
    "pygments": "structlog's rich tracebacks",
    "ssl": "asyncio's own TLS; gRPC has its own and /metrics imports ssl for HTTPS only",
    "_ssl": "OpenSSL through Python's ssl",
    "_hashlib": "OpenSSL's digests (blake2b is built in)",
    "lzma": "shutil's archive codecs",
    "bz2": "shutil's archive codecs",
    "prometheus_client": "the process_* families are read from /proc",
    "http.server": "core/exposition/http_server.py serves /metrics on httptools",
    "email": "http.server's header parsing",
    "nodeagent.agent.diag": "diag's checks (lazy commands)",
    "nodeagent.agent.cli.top": "top's live view",
    "nodeagent.tools": "the simulator (only with --simulate)",
    "difflib": "the settings' suggestion for a mistyped key",
    "google.protobuf.descriptor_pb2": "descriptor options (repair tells a map by its value)",
    "nodeagent.podresources": "the kubelet's pod-resources API (while its socket does not exist)",
    "nodeagent.agent.exposition.page": "/metrics's page (only with --metrics-listen)",
    "nodeagent.core.exposition.http_server": "/metrics's HTTP server (only with --metrics-listen)",
    "nodeagent.core.exposition.dcgm": "/metrics's GPU families and labels (only with --metrics-listen)",
    "nodeagent.core.exposition.node": "/metrics's node_exporter families (only with --metrics-listen)",
    "httptools": "/metrics's request parser (only with --metrics-listen)",
    "isal": "/metrics's gzip (only with --metrics-listen)",
    "socketserver": "/metrics's HTTP server (only with --metrics-listen)",
}


@pytest.fixture(scope="module")
def loaded() -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("module", sorted(_NOT_LOADED))
def test_run_does_not_load(loaded: dict[str, object], module: str) -> None:
    modules = loaded["modules"]
    assert isinstance(modules, list)
    found = [name for name in modules if name == module or name.startswith(module + ".")]
    assert not found, f"{found[0]} is loaded by `nodeagent run`: {_NOT_LOADED[module]}"


def test_run_does_not_map_openssl(loaded: dict[str, object]) -> None:
    assert not loaded["libcrypto"] and not loaded["libssl"]


def test_what_run_leaves_out_still_works_in_the_same_process() -> None:
    """Hidden only while the daemon's libraries are imported: rich, ssl, OpenSSL's hashlib, bz2
    and lzma still import afterwards, for top, for HTTPS and for anyone who asks."""
    probe = """
import bz2, click, hashlib, lzma, ssl
from nodeagent.agent.cli.main import cli
import rich.console, structlog.dev
assert cli.get_command(click.Context(cli), "top") is not None
assert cli.get_command(click.Context(cli), "diag") is not None
ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
assert lzma.decompress(lzma.compress(b"x")) == bz2.decompress(bz2.compress(b"x")) == b"x"
print(hashlib.blake2b(b"node\\0target", digest_size=8).hexdigest())
"""
    done = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    import hashlib

    # The collector order (rendezvous) hashes the same with or without OpenSSL's digests.
    assert done.stdout.strip() == hashlib.blake2b(b"node\0target", digest_size=8).hexdigest()


def test_run_limits_malloc_arenas_before_it_starts_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit (core/program/malloc_arenas.py) binds only threads that allocate after it: `run`
    sets it before it opens the spool or builds a source, which start the daemon's threads."""
    from click.testing import CliRunner

    import nodeagent.agent.cli.run as run_module
    from nodeagent.agent.cli.main import cli

    steps: list[str] = []

    def open_spool(_flags: object) -> None:
        steps.append("spool")
        raise SystemExit(3)

    monkeypatch.setattr(run_module, "limit_malloc_arenas", lambda: steps.append("arenas"))
    monkeypatch.setattr(run_module, "_open_spool", open_spool)
    result = CliRunner().invoke(cli, ["run", "--collector", "127.0.0.1:9", "--node-id", "n1"])
    assert result.exit_code == 3, result.output
    assert steps == ["arenas", "spool"]
