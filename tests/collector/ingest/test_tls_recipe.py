"""docs/security.md's certificate recipe, run as the page writes it: the CA and the certificates
with openssl, then a collector with mutual TLS, a node streaming to it, an operator's `nodes` and
a scraper's `curl` of /metrics. Only the addresses are the test's own (127.0.0.1 and free ports
for 10.0.0.5, 0.0.0.0, 50051 and 9477), and the node is simulated and stops after a few reports.

Then what a first hour gets wrong, each said in one line: a key that is not the certificate's,
a client without the CA, without a client certificate, with another CA's certificate, aimed at
the HTTP port, or given a URL.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakes.fleet import free_port
from tests.fakes.trees import REPO

PAGE = REPO / "docs" / "security.md"
SECTION = "## Certificates in ten minutes"
ONE_MACHINE = "## Certificates on one machine"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
PROGRAMS = {"nodeagent": "nodeagent.agent", "nodeagent-collector": "nodeagent.collector"}
# The simulated node of the test, finite: appended to the page's `nodeagent run`.
NODE_RUN = ("--simulate", "healthy", "--interval", "0.1", "--max-reports", "5", "--deadline", "60")


def _blocks(heading: str = SECTION) -> dict[str, str]:
    text = PAGE.read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return dict(FENCE.findall(section))


def _commands(body: str) -> Iterator[list[str]]:
    for line in body.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            yield argv


# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("tls_recipe")


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    require(shutil.which("openssl") is not None, "needs openssl (Debian package openssl)")
    require(shutil.which("curl") is not None, "needs curl (Debian package curl)")
    work = tmp_path_factory.mktemp("recipe")
    grpc_port, http_port = free_port(), free_port()
    swaps = {
        "0.0.0.0:50051": f"127.0.0.1:{grpc_port}", "0.0.0.0:9477": f"127.0.0.1:{http_port}",
        "10.0.0.5:50051": f"127.0.0.1:{grpc_port}", "10.0.0.5:9477": f"127.0.0.1:{http_port}",
        "IP:10.0.0.5": "IP:127.0.0.1",
    }  # fmt: skip
    blocks = _blocks()
    assert set(blocks) == {"bash", "sh"}, "the recipe is a bash block, then the commands' sh block"
    assert all(old in PAGE.read_text() for old in swaps), "the recipe's addresses changed: update the swaps"
    script = blocks["bash"]
    for old, new in swaps.items():
        script = script.replace(old, new)
    made = subprocess.run(
        ["bash", "-e", "-c", script], cwd=work, capture_output=True, text=True, timeout=120, check=False
    )
    assert made.returncode == 0, made.stderr
    commands = [[_swap(arg, swaps) for arg in argv] for argv in _commands(blocks["sh"])]
    assert [argv[0] for argv in commands] == ["nodeagent-collector", "nodeagent", "nodeagent-collector", "curl"]
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state"), "STATE_DIRECTORY": str(work / "state")}
    serve = subprocess.Popen(
        _python(commands[0]), cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert serve.stdout is not None
        assert serve.stdout.readline().startswith("listening on"), serve.stderr
        assert serve.stdout.readline().startswith("http on")
        yield {"work": work, "commands": commands, "grpc": grpc_port, "http": http_port, "env": env}
    finally:
        serve.kill()
        serve.wait(timeout=30)


def test_the_recipe_makes_certificates_named_by_their_sans(recipe: dict[str, object]) -> None:
    tls = Path(str(recipe["work"])) / "tls"
    names = {}
    for name in ("collector", "gpu-node-01", "ops", "prometheus"):
        text = subprocess.run(
            ["openssl", "x509", "-in", str(tls / f"{name}.crt"), "-noout", "-ext", "subjectAltName,extendedKeyUsage"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
        names[name] = " ".join(text.split())
        assert (tls / f"{name}.key").stat().st_mode & 0o077 == 0, f"{name}.key is readable by others"
    assert "DNS:collector.example.com, IP Address:127.0.0.1" in names["collector"]
    assert "TLS Web Server Authentication" in names["collector"]
    assert "DNS:gpu-node-01" in names["gpu-node-01"] and "TLS Web Client Authentication" in names["gpu-node-01"]


def test_a_node_an_operator_and_a_scraper_as_the_page_says(recipe: dict[str, object]) -> None:
    commands = recipe["commands"]
    assert isinstance(commands, list)
    node = _run([*commands[1], *NODE_RUN], recipe)
    assert node.returncode == 0, node.stderr[-2000:]
    nodes = _run(commands[2], recipe)
    assert nodes.returncode == 0, nodes.stderr
    row = next(line.split() for line in nodes.stdout.splitlines() if line.startswith("gpu-node-01 "))
    assert row[1] == "no" and int(row[2]) == 8  # it came, streamed its 8 GPUs, and went
    scrape = subprocess.run(
        [*commands[3], "-sS"], cwd=recipe["work"], capture_output=True, text=True, timeout=30, check=False
    )
    # What stays open, as the page says: /healthz for a probe without a certificate, and not the
    # fleet page (`/`), which asks a reader's credential like /metrics.
    base = commands[3][-1].removesuffix("/metrics")
    open_to_all = {
        path: subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", "tls/ca.crt", base + path],
            cwd=recipe["work"], capture_output=True, text=True, timeout=30, check=False,
        ).stdout
        for path in ("/healthz", "/", "/metrics")
    }  # fmt: skip
    assert open_to_all == {"/healthz": "200", "/": "401", "/metrics": "401"}
    stays_open = " ".join(PAGE.read_text().split("### What stays open", 1)[1].split("\n### ", 1)[0].split())
    assert "index page `/` answer" not in stays_open and "`/` included, does not stay open" in stays_open
    assert scrape.returncode == 0, scrape.stderr
    assert re.search(r'^nodeagent_node_reports_total\{node="gpu-node-01"\} 5(\.0)?$', scrape.stdout, re.MULTILINE)


def test_what_the_first_hour_gets_wrong_is_said_in_one_line(recipe: dict[str, object]) -> None:
    grpc_target, http_target = f"127.0.0.1:{recipe['grpc']}", f"127.0.0.1:{recipe['http']}"
    ca, ops = ["--tls-ca", "tls/ca.crt"], ["--tls-cert", "tls/ops.crt", "--tls-key", "tls/ops.key"]
    other = Path(str(recipe["work"])) / "other"
    other.mkdir(exist_ok=True)
    script = _blocks()["bash"]
    made = subprocess.run(["bash", "-e", "-c", script], cwd=other, capture_output=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    foreign = ["--tls-cert", "other/tls/ops.crt", "--tls-key", "other/tls/ops.key"]
    cases = {
        "no --tls-ca": (["--collector", grpc_target], 1, "it serves TLS; give --tls-ca"),
        "no client certificate": (["--collector", grpc_target, *ca], 1, "requires a client certificate"),
        "another CA's certificate": (["--collector", grpc_target, *ca, *foreign], 1, "refused the client certificate"),
        "the HTTP port": (["--collector", http_target, *ca, *ops], 1, "that is an HTTPS port"),
        "a URL": (["--collector", f"http://{grpc_target}", *ca, *ops], 2, f"give '{grpc_target}', without http://"),
    }  # fmt: skip
    for case, (args, status, words) in cases.items():
        done = _run(["nodeagent-collector", "nodes", *args], recipe)
        lines = done.stderr.strip().splitlines()
        assert (done.returncode, len(lines)) == (status, 1), (case, done.stderr)
        assert words in lines[0], (case, lines[0])
    mismatch = _run(
        ["nodeagent-collector", "serve", "--listen", f"127.0.0.1:{free_port()}", "--http-listen", "127.0.0.1:0",
         "--tls-cert", "tls/collector.crt", "--tls-key", "tls/ops.key"],
        recipe,
    )  # fmt: skip
    assert mismatch.returncode == 2
    assert mismatch.stderr.strip().splitlines() == [
        "nodeagent-collector: error: --tls-key tls/ops.key is not the key of --tls-cert tls/collector.crt "
        "(they do not make a pair)"
    ]
    # The clients' own pair, checked at start as serve's is: not gRPC's "Invalid private key" at
    # every handshake, retried for ever.
    node_pair = ["--tls-cert", "tls/gpu-node-01.crt", "--tls-key", "tls/ops.key"]
    said = "--tls-key tls/ops.key is not the key of --tls-cert tls/gpu-node-01.crt (they do not make a pair)"
    clients = {
        "nodeagent": ["nodeagent", "run", "--collector", grpc_target, "--node-id", "gpu-node-01", *ca, *node_pair],
        **{
            command: ["nodeagent-collector", command, "--collector", grpc_target, *ca, *node_pair]
            for command in ("nodes", "alerts", "jobs")
        },
        **{
            command: ["nodeagent-collector", command, "gpu-node-01", "--collector", grpc_target, *ca, *node_pair]
            for command in ("history", "forget")
        },
    }
    for case, argv in clients.items():
        done = _run(argv, recipe)
        assert (done.returncode, done.stderr.strip().splitlines()) == (2, [f"{argv[0]}: error: {said}"]), case


def test_the_one_machine_recipe_works_as_written(tmp_path: Path) -> None:
    """The one-machine variant, every command as the page writes it but for its two ports (free
    ones here): certificates for localhost and 127.0.0.1, a database in the directory, a node
    that stops after its reports and says goodbye."""
    require(shutil.which("openssl") is not None, "needs openssl (Debian package openssl)")
    require(shutil.which("curl") is not None, "needs curl (Debian package curl)")
    blocks = _blocks(ONE_MACHINE)
    assert set(blocks) == {"bash", "sh"}
    made = subprocess.run(
        ["bash", "-e", "-c", blocks["bash"]], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert made.returncode == 0, made.stderr
    ports = {":50051": f":{free_port()}", ":9477": f":{free_port()}"}
    commands = [[_swap(arg, ports) for arg in argv] for argv in _commands(blocks["sh"])]
    assert [argv[0] for argv in commands] == ["nodeagent-collector", "nodeagent", "nodeagent-collector", "curl"]
    assert "--db" in commands[0]
    # No state directory: the database is where the page puts it, nowhere else.
    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "XDG_STATE_HOME")}
    recipe: dict[str, object] = {"work": tmp_path, "env": env}
    serve = subprocess.Popen(
        _python(commands[0]), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert serve.stdout is not None
        assert serve.stdout.readline().startswith("listening on"), serve.stderr
        node = _run(commands[1], recipe)
        assert node.returncode == 0, node.stderr[-2000:]
        nodes = _run(commands[2], recipe)
        assert nodes.returncode == 0, nodes.stderr
        assert (tmp_path / "collector.db").is_file()
        row = next(line.split() for line in nodes.stdout.splitlines() if line.startswith("gpu-node-01 "))
        assert "stopped" in row, nodes.stdout
        scrape = subprocess.run(
            [*commands[3], "-sS"], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False
        )
        assert scrape.returncode == 0, scrape.stderr
        assert re.search(r'^nodeagent_node_reports_total\{node="gpu-node-01"\} 5(\.0)?$', scrape.stdout, re.M)
    finally:
        serve.kill()
        serve.wait(timeout=30)


def _run(argv: list[str], recipe: dict[str, object]) -> subprocess.CompletedProcess[str]:
    env = recipe["env"]
    assert isinstance(env, dict)
    return subprocess.run(
        _python(argv), cwd=recipe["work"], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _python(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", PROGRAMS[argv[0]], *argv[1:]]


def _swap(arg: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        arg = arg.replace(old, new)
    return arg
