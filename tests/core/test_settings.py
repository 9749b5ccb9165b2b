"""Configuration: every flag from the file and NODEAGENT_* variables, flag > env > file > default,
and every way a configuration can be wrong ends start-up with one line and status 2."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import structlog
import yaml

from nodeagent.agent.cli import main as agent_cli
from nodeagent.collector.cli import main as collector_cli
from nodeagent.core.program.command_line import run_cli
from nodeagent.core.settings.framework import ConfiguredGroup, Layout, settable
from nodeagent.core.settings.show import config_command, redact
from tests.fakes.fleet import Collector, free_port, processes
from tests.fakes.trees import REPO

AGENT = agent_cli.cli
COLLECTOR = collector_cli.cli
ETC = REPO / "packaging" / "etc"
# An example setting in the shipped files: a commented `key = value` line.
EXAMPLE_LINE = re.compile(r'^# ?([A-Za-z0-9_"./-]+ = .*)$', re.MULTILINE)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No NODEAGENT_* variable of the caller, and no file at the default locations; afterwards the
    logging the programs configured (onto this test's captured stderr) is put back."""
    for var in list(os.environ):
        if var.startswith("NODEAGENT_") and var != "NODEAGENT_REQUIRE_LIVE_TESTS":
            monkeypatch.delenv(var)
    for group in (AGENT, COLLECTOR):
        assert isinstance(group, ConfiguredGroup)
        default = tmp_path / "etc-absent" / group.layout.default_file.name
        monkeypatch.setattr(group, "layout", dataclasses.replace(group.layout, default_file=default))
    logging_config = structlog.get_config()
    yield
    structlog.configure(**logging_config)


def call(group: click.Group, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The program as its entry point runs it (``main`` is ``sys.exit(run_cli(...))``)."""
    prog = "nodeagent" if group is AGENT else "nodeagent-collector"
    status = run_cli(group, prog, list(args))
    out, err = capsys.readouterr()
    return status, out, err


def show(group: click.Group, *args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    status, out, err = call(group, "config", "show", "--json", *args, capsys=capsys)
    assert status == 0, err
    settings: dict[str, dict[str, object]] = json.loads(out)["settings"]
    return settings


def one_line_error(status: int, err: str, prog: str) -> str:
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return err.removeprefix(f"{prog}: error: ").rstrip("\n")


# ---- every error path: one line, status 2 -------------------------------------------------------

# Should a bad setting get past the check, these end the command at once instead of leaving a
# daemon running inside the test (neither touches what is being checked).
STOP_AGENT = ("--simulate", "healthy", "--max-reports", "1", "--deadline", "0.5")


def stop_collector(tmp_path: Path) -> tuple[str, ...]:
    return ("--db", str(tmp_path / "no-such-directory" / "c.db"))


AGENT_FILE_ERRORS = [
    # unknown keys, tables and commands
    ("intervall = 1", "intervall: unknown key (did you mean 'interval'?)"),
    ("[linkspeeds]\neth0 = '1G'", "[linkspeeds]: unknown table (did you mean 'link_speeds'?)"),
    ("[command.sample]\ncont = 3", "command.sample.cont: unknown key (did you mean 'count'?)"),
    ("[command.nosuch]\ncount = 3", "command.nosuch: unknown command (known: collectors, config, "),
    ("[command.run]\ninterval = 3", "command.run: the settings of run are the file's top-level keys"),
    ("command = 3", "command: expected a table of [command.NAME] tables, got 3"),
    ("[command]\nsample = 3", "command.sample: expected a table, got 3"),
    ("config = '/etc/other.toml'", "config: a file cannot name another; use --config or NODEAGENT_CONFIG"),
    ("link_speed = ['eth0=1G']", "link_speed: written as the [link_speeds] table in a file"),
    # wrong types
    ("interval = 'abc'", 'interval: expected a number at least 0.01, got "abc"'),
    ("interval = true", "interval: expected a number at least 0.01, got true"),
    ("spool_max_bytes = 1.5", "spool_max_bytes: expected an integer at least 65536, got 1.5"),
    ("node_id = 17", "node_id: expected a string, got 17"),
    ("collector = 'a:70000'", "collector: 'a:70000' is not HOST:PORT"),  # one string: a list of one, checked
    ("collector = [50051]", "collector: expected a string (HOST:PORT), got 50051"),
    ("collector_gpu = 'yes'", 'collector_gpu: expected true or false, got "yes"'),
    ("[command.sample]\ncount = '3'", 'command.sample.count: expected an integer at least 1, got "3"'),
    ("link_speeds = 5", 'link_speeds: expected a table of interface = "rate", got 5'),
    ("[link_speeds]\neth0 = 5", 'link_speeds.eth0: expected a rate string such as "50G", got 5'),
    # impossible values
    ("interval = -1", "interval: expected a number at least 0.01, got -1"),
    ("spool_max_bytes = 10", "spool_max_bytes: expected an integer at least 65536, got 10"),
    ("time_scale = 1e9", "time_scale: expected a number from 0.01 to 10000, got 1000000000.0"),
    ("log_level = 'loud'", 'log_level: expected one of debug, info, warning, error, got "loud"'),
    ("collector = ['a:70000']", "collector: 'a:70000' is not HOST:PORT"),
    ("procfs = '/nonexistent'", "procfs: /nonexistent: not a readable directory"),
    ("rescan_seconds = 0", "rescan_seconds: expected a number of seconds above 0, got 0"),
    ("[link_speeds]\neth0 = 'fast'", "link_speeds.eth0: "),
    ("[command.record]\ngpus = 65", "command.record.gpus: expected an integer from 1 to 64, got 65"),
    ("[command.record]\nprocfs = '/nonexistent'", 'command.record.procfs: expected a path, got "/nonexistent" ('),
]


@pytest.mark.parametrize(("body", "message"), AGENT_FILE_ERRORS)
def test_agent_file_errors_stop_start_up_with_one_line(
    body: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(body + "\n")
    status, out, err = call(AGENT, "run", "--config", str(config), *STOP_AGENT, capsys=capsys)
    assert one_line_error(status, err, "nodeagent").startswith(f"{config}: {message}")
    assert out == ""


COLLECTOR_FILE_ERRORS = [
    ("listen = '0.0.0.0:70000'", "listen: '0.0.0.0:70000' is not HOST:PORT"),
    ("max_message_bytes = 10", "max_message_bytes: expected an integer from 4096 to 67108864, got 10"),
    ("flush_seconds = 'soon'", 'flush_seconds: expected a number from 0.001 to 5.0, got "soon"'),
    ("insecure = 1", "insecure: expected true or false, got 1"),
    ("alertmanager_url = 'http://am:9093'", "alertmanager_url: written as the [sinks] table in a file"),
    ("[alert]\nnode_down_seconds = 5", "[alert]: unknown table (did you mean 'alerts'?)"),
    ("[alerts]\nnode_down_seconds = 'soon'", "alerts.node_down_seconds: expected a number, got 'soon'"),
    ("[alerts]\nnode_down_seconds = -5", "alerts.node_down_seconds: must be positive, got -5"),
    ("[prices]\ndefault_per_gpu_hour = -1", "prices.default_per_gpu_hour: expected a price per GPU-hour, a number"),
    ("[sinks]\nwebhook_url = 'ftp://x'", "sinks.webhook_url: "),
    ("[detector]\nmoderate_ratio = 2", "\b[detector]: moderate_ratio: a ratio must be within 0..1, got 2"),
    ("[command.nodes]\ntimeout = 0", "command.nodes.timeout: expected a number at least 0.1, got 0"),
    ("[command.alerts]\ncollector = 5", "command.alerts.collector: expected a string, got 5"),
    ("[fleet]\ncollectors = 'a:1'", "fleet.collectors: expected a list of HOST:PORT strings, got 'a:1'"),
    ("[fleet]\ntimeout = 2", "fleet.timeout: unknown key (known: collectors, insecure, timeout_seconds, "),
    ("[fleet]\ncollectors = ['127.0.0.1:1']\ntls_ca = '/no/ca.pem'", "fleet: /no/ca.pem: no such file"),
]


@pytest.mark.parametrize(("body", "message"), COLLECTOR_FILE_ERRORS)
def test_collector_file_errors_stop_start_up_with_one_line(
    body: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "collector.toml"
    config.write_text(body + "\n")
    status, _out, err = call(COLLECTOR, "serve", "--config", str(config), *stop_collector(tmp_path), capsys=capsys)
    # The detector names its table its own way: "FILE [detector]: KEY: ...".
    prefix = f"{config} " if message.startswith("\b") else f"{config}: "
    assert one_line_error(status, err, "nodeagent-collector").startswith(prefix + message.removeprefix("\b"))


def test_files_that_cannot_be_read_stop_start_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "missing.toml": "no such file",
        "a-directory.toml": "is a directory, expected a TOML file",
        "latin1.toml": "not UTF-8 text (byte 11)",
        "broken.toml": "not valid TOML: Expected '=' after a key in a key/value pair (at line 2, column 9)",
    }
    (tmp_path / "a-directory.toml").mkdir()
    (tmp_path / "latin1.toml").write_bytes(b"node_id = '\xe9'\n")
    (tmp_path / "broken.toml").write_text("interval = 1\nnode_id 'x'\n")
    for name, message in cases.items():
        status, _out, err = call(AGENT, "run", "--config", str(tmp_path / name), capsys=capsys)
        assert one_line_error(status, err, "nodeagent") == f"{tmp_path / name}: {message}"


def test_a_file_without_read_permission_stops_start_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("interval = 1.0\n")
    if os.geteuid() == 0:  # root reads a mode-000 file all the same: have the read fail as it would
        real = Path.read_text

        def denied(path: Path, *args: object, **kwargs: object) -> str:
            if path == config:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "read_text", denied)
    else:
        config.chmod(0)
    status, _out, err = call(AGENT, "run", "--config", str(config), *STOP_AGENT, capsys=capsys)
    assert one_line_error(status, err, "nodeagent") == f"{config}: cannot read: Permission denied"


@pytest.mark.parametrize(
    ("group", "var", "value", "message"),
    [
        (AGENT, "NODEAGENT_INTERVAL", "abc", '$NODEAGENT_INTERVAL: expected a number at least 0.01, got "abc"'),
        (AGENT, "NODEAGENT_INTERVAL", "-1", '$NODEAGENT_INTERVAL: expected a number at least 0.01, got "-1"'),
        (AGENT, "NODEAGENT_COLLECTOR", "a:1,b:70000", "$NODEAGENT_COLLECTOR: 'b:70000' is not HOST:PORT"),
        (AGENT, "NODEAGENT_COLLECTOR_GPU", "maybe", '$NODEAGENT_COLLECTOR_GPU: expected true or false, got "maybe"'),
        (AGENT, "NODEAGENT_LOG_LEVEL", "loud", "$NODEAGENT_LOG_LEVEL: expected one of debug, info, warning, error"),
        (AGENT, "NODEAGENT_CONFIG", "/nonexistent/agent.toml", "/nonexistent/agent.toml: no such file"),
        (COLLECTOR, "NODEAGENT_LISTEN", "nowhere", "$NODEAGENT_LISTEN: 'nowhere' is not HOST:PORT"),
        (COLLECTOR, "NODEAGENT_FLUSH_SECONDS", "10", "$NODEAGENT_FLUSH_SECONDS: expected a number from 0.001 to 5.0"),
        (COLLECTOR, "NODEAGENT_MAX_MESSAGE_BYTES", "1.5", "$NODEAGENT_MAX_MESSAGE_BYTES: expected an integer from"),
    ],
)
def test_bad_variables_stop_start_up_with_one_line(
    group: click.Group,
    var: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(var, value)
    command = ["run", *STOP_AGENT] if group is AGENT else ["serve", *stop_collector(tmp_path)]
    status, _out, err = call(group, *command, capsys=capsys)
    prog = "nodeagent" if group is AGENT else "nodeagent-collector"
    assert one_line_error(status, err, prog).startswith(message)


def test_real_processes_say_it_in_one_line_and_exit_2(tmp_path: Path) -> None:
    """The installed entry points, not just run_cli: status 2 and one line on stderr."""
    config = tmp_path / "agent.toml"
    config.write_text("interval = 'abc'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    agent = subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "run", "--config", str(config)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert agent.returncode == 2 and agent.stdout == ""
    assert agent.stderr == f'nodeagent: error: {config}: interval: expected a number at least 0.01, got "abc"\n'
    collector = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "serve"],
        cwd=REPO, env={**env, "NODEAGENT_LISTEN": "0.0.0.0:70000"}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert collector.returncode == 2
    assert collector.stderr == "nodeagent-collector: error: $NODEAGENT_LISTEN: '0.0.0.0:70000' is not HOST:PORT\n"


def test_help_and_version_work_with_a_broken_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    config = tmp_path / "agent.toml"
    config.write_text("nonsense = 1\n")
    monkeypatch.setenv("NODEAGENT_CONFIG", str(config))
    status, out, _err = call(AGENT, "run", "--help", capsys=capsys)
    assert status == 0 and "Usage: nodeagent run" in out
    status, _out, err = call(AGENT, "run", capsys=capsys)
    assert one_line_error(status, err, "nodeagent").startswith(f"{config}: nonsense: unknown key")


# ---- precedence: flag > env > file > default ----------------------------------------------------


def test_precedence_on_a_real_agent_run(tmp_path: Path) -> None:
    """`nodeagent run` streaming to a real collector: the node id it uses comes from the default,
    the file, the environment or the flag, and the collector list (a required flag) from the file
    or the environment."""
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    config = tmp_path / "agent.toml"
    config.write_text(f'collector = ["{collector.address}"]\nnode_id = "from-file"\n')
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    base = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    finite = ["run", "--simulate", "healthy", "--interval", "0.05", "--max-reports", "2", "--deadline", "30"]

    def node_id(env: dict[str, str], *flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent.agent", *finite, *flags], cwd=REPO, env={**base, **env},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        summary: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
        assert summary["acked_seq"] == 2
        return str(summary["node_id"])

    with processes() as started:
        started.append(collector.start())
        default = node_id({"NODEAGENT_CONFIG": str(empty), "NODEAGENT_COLLECTOR": collector.address})
        from_file = node_id({"NODEAGENT_CONFIG": str(config)})
        from_env = node_id({"NODEAGENT_CONFIG": str(config), "NODEAGENT_NODE_ID": "from-env"})
        from_flag = node_id({"NODEAGENT_CONFIG": str(config), "NODEAGENT_NODE_ID": "from-env"}, "--node-id", "flag")
        known = {node["node_id"] for node in collector.nodes()}
    assert (default, from_file, from_env, from_flag) == (platform.node(), "from-file", "from-env", "flag")
    assert known == {platform.node(), "from-file", "from-env", "flag"}


def test_precedence_of_every_layer_in_config_show(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(
        'log_level = "info"\ninterval = 2.0\nseed = 7\nspool_max_age = 60.0\ncollector = ["a:1"]\n'
        '[link_speeds]\neth0 = "50G"\n[command.sample]\ncount = 5\n'
    )
    monkeypatch.setenv("NODEAGENT_INTERVAL", "3")
    monkeypatch.setenv("NODEAGENT_SEED", "8")
    monkeypatch.setenv("NODEAGENT_COLLECTOR", "b:2, c:3")
    settings = show(AGENT, "--config", str(config), "run", "--seed", "9", capsys=capsys)
    assert settings["seed"] == {"value": 9, "source": "flag", "from": "--seed"}
    assert settings["interval"] == {"value": 3.0, "source": "env", "from": "NODEAGENT_INTERVAL"}
    assert settings["collector"] == {"value": ["b:2", "c:3"], "source": "env", "from": "NODEAGENT_COLLECTOR"}
    assert settings["spool_max_age"] == {"value": 60.0, "source": "file", "from": f"{config}: spool_max_age"}
    assert settings["log_level"]["source"] == "file"
    assert settings["spool_max_bytes"] == {"value": 64 * 1024 * 1024, "source": "default"}
    assert settings["link_speeds.eth0"] == {"value": "50G", "source": "file", "from": f"{config}: link_speeds.eth0"}
    assert settings["rescan_seconds"] == {"value": 30.0, "source": "default"}
    assert "count" not in settings  # sample's, not run's
    sample = show(AGENT, "--config", str(config), "sample", capsys=capsys)
    assert sample["command.sample.count"]["value"] == 5 and sample["command.sample.count"]["source"] == "file"
    # The variable applies to whatever command has the flag: sample's interval too.
    assert sample["command.sample.interval"]["value"] == 3.0


def test_collector_serve_listens_where_the_file_says(tmp_path: Path) -> None:
    config = tmp_path / "collector.toml"
    # Its own HTTP port too: a collector already serving on this machine holds the default one.
    config.write_text(
        f'listen = "127.0.0.1:0"\nhttp_listen = "127.0.0.1:0"\ndb = "{tmp_path / "c.db"}"\n'
        "[alerts]\nnode_down_seconds = 30.0\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    env["NODEAGENT_CONFIG"] = str(config)
    with subprocess.Popen(
        [sys.executable, "-m", "nodeagent.collector", "serve"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
        finally:
            process.terminate()
            _out, err = process.communicate(timeout=30)
    assert re.fullmatch(r"listening on 127\.0\.0\.1:\d+\n", line), (line, err)
    assert (tmp_path / "c.db").exists()


# ---- the file: where it is found ----------------------------------------------------------------


def toy_group(default_file: Path) -> ConfiguredGroup:
    layout = Layout(default_file=default_file, service="go", sections=frozenset(), check_sections=lambda _r, _s: {})

    @click.group(cls=ConfiguredGroup, layout=layout)
    def toy() -> None:
        pass

    @toy.command()
    @click.option("--config", "config_path", type=click.Path())
    @click.option("--frobnicate-seconds", type=click.FloatRange(min=0), default=1.0)
    @click.option("--peer", "peers", multiple=True)
    @click.option("--loud/--quiet", default=False)
    @click.option("--api-token", default="")
    def go(
        config_path: str | None, frobnicate_seconds: float, peers: tuple[str, ...], loud: bool, api_token: str
    ) -> None:
        click.echo(json.dumps([config_path, frobnicate_seconds, list(peers), loud, api_token]))

    toy.add_command(config_command)
    return toy


def test_a_new_flag_is_settable_without_listing_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toy = toy_group(tmp_path / "toy.toml")
    (tmp_path / "toy.toml").write_text('frobnicate_seconds = 2.5\npeer = ["x", "y"]\nloud = true\n')
    assert run_cli(toy, "toy", ["go"]) == 0
    assert json.loads(capsys.readouterr().out) == [str(tmp_path / "toy.toml"), 2.5, ["x", "y"], True, ""]
    monkeypatch.setenv("NODEAGENT_PEER", "p q,r")
    monkeypatch.setenv("NODEAGENT_LOUD", "no")
    assert run_cli(toy, "toy", ["go", "--frobnicate-seconds", "0"]) == 0
    assert json.loads(capsys.readouterr().out)[1:4] == [0.0, ["p", "q", "r"], False]
    monkeypatch.setenv("NODEAGENT_API_TOKEN", "hunter2")
    assert run_cli(toy, "toy", ["config", "show", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["api_token"] == {"value": "<redacted>", "source": "env", "from": "NODEAGENT_API_TOKEN"}
    assert settings["frobnicate_seconds"]["source"] == "file" and settings["peer"]["source"] == "env"


def test_where_the_file_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    default, other, flagged = (tmp_path / name for name in ("default.toml", "env.toml", "flag.toml"))
    toy = toy_group(default)
    # No default file: not an error, the built-in defaults apply.
    assert run_cli(toy, "toy", ["go"]) == 0
    assert json.loads(capsys.readouterr().out)[:2] == [None, 1.0]
    for path, seconds in ((default, 1.5), (other, 2.5), (flagged, 3.5)):
        path.write_text(f"frobnicate_seconds = {seconds}\n")
    assert run_cli(toy, "toy", ["go"]) == 0
    assert json.loads(capsys.readouterr().out)[1] == 1.5
    monkeypatch.setenv("NODEAGENT_CONFIG", str(other))
    assert run_cli(toy, "toy", ["go"]) == 0
    assert json.loads(capsys.readouterr().out)[1] == 2.5
    assert run_cli(toy, "toy", ["go", "--config", str(flagged)]) == 0
    assert json.loads(capsys.readouterr().out)[1] == 3.5
    # A file named explicitly must exist; the default one need not.
    monkeypatch.setenv("NODEAGENT_CONFIG", str(tmp_path / "gone.toml"))
    assert run_cli(toy, "toy", ["go"]) == 2
    assert capsys.readouterr().err == f"toy: error: {tmp_path / 'gone.toml'}: no such file\n"


def test_keys_follow_the_flags() -> None:
    run = AGENT.get_command(click.Context(AGENT), "run")
    assert run is not None
    keys = settable(run)
    assert {"collector", "node_id", "interval", "spool_dir", "spool_max_bytes", "token_file", "collector_gpu"} <= set(
        keys
    )
    assert "config" not in keys and "help" not in keys
    assert keys["collector_gpu"].opts == ["--collector.gpu"]


# ---- config show --------------------------------------------------------------------------------


def test_config_show_text_is_laid_out_as_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "collector.toml"
    config.write_text(
        'listen = "127.0.0.1:6000"\n[sinks]\nwebhook_url = "https://user:pw@hooks.example/T0/B1/s3cr3t"\n'
    )
    status, out, err = call(COLLECTOR, "config", "show", "--config", str(config), capsys=capsys)
    assert status == 0, err
    assert out.startswith("# nodeagent-collector serve: effective configuration; precedence: flag > env")
    assert f"# file: {config} (from --config)" in out
    assert re.search(r'^listen = "127\.0\.0\.1:6000" +# file$', out, re.MULTILINE)
    assert re.search(r'^log_level = "info" +# default$', out, re.MULTILINE)
    assert "\n[sinks]\n" in out and "\n[alerts]\n" in out and "\n[detector]\n" in out
    # Secrets stay out: a webhook URL's path and credentials are its secret.
    assert "s3cr3t" not in out and "pw" not in out
    assert re.search(r'^webhook_url = "https://hooks\.example/…" +# file$', out, re.MULTILINE)


def test_one_collector_in_a_file_may_be_a_string_or_a_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "agent.toml"
    for body in ('collector = "10.0.0.5:50051"', 'collector = ["10.0.0.5:50051"]'):
        config.write_text(body + "\n")
        assert show(AGENT, "--config", str(config), capsys=capsys)["collector"]["value"] == ["10.0.0.5:50051"], body


def test_config_show_names_variables_nothing_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NODEAGENT_INTERVL", "5")
    status, out, _err = call(AGENT, "config", "show", capsys=capsys)
    assert status == 0
    assert "# ignored: $NODEAGENT_INTERVL (no option of nodeagent reads it)" in out


def test_secrets_are_redacted() -> None:
    assert redact("api_token", "hunter2") == "<redacted>"
    assert redact("token_file", "/etc/nodeagent/token") == "/etc/nodeagent/token"
    assert redact("alertmanager_url", "http://am.example:9093") == "http://am.example:9093/"
    assert redact("webhook_url", "https://hooks.example/services/T0/B0/XYZ?key=1") == "https://hooks.example/…"
    assert redact("sinks", {"password": "x", "n": 1}) == {"password": "<redacted>", "n": 1}


# ---- the shipped examples -----------------------------------------------------------------------


@pytest.mark.parametrize(("group", "name"), [(AGENT, "agent.toml"), (COLLECTOR, "collector.toml")])
def test_example_files_load_as_shipped_and_with_every_example_set(
    group: click.Group, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = ETC / name
    settings = show(group, "--config", str(shipped), capsys=capsys)
    assert all(item["source"] == "default" for item in settings.values())  # everything is commented out
    every = tmp_path / name
    every.write_text(EXAMPLE_LINE.sub(r"\1", shipped.read_text()))
    assert len(EXAMPLE_LINE.findall(shipped.read_text())) >= 10
    settings = show(group, "--config", str(every), capsys=capsys)
    assert sum(item["source"] == "file" for item in settings.values()) >= 10


def test_kubernetes_agent_configuration_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents = list(yaml.safe_load_all((REPO / "packaging" / "k8s" / "agent.yaml").read_text()))
    config_map = next(d for d in documents if d and d["kind"] == "ConfigMap")
    config = tmp_path / "agent.toml"
    config.write_text(config_map["data"]["agent.toml"])
    show(AGENT, "--config", str(config), capsys=capsys)


def test_documented_configuration_examples_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        name = block.splitlines()[0].removeprefix("# /etc/nodeagent/")
        config = tmp_path / name
        config.write_text(block)
        settings = show(AGENT if name == "agent.toml" else COLLECTOR, "--config", str(config), capsys=capsys)
        assert sum(item["source"] == "file" for item in settings.values()) >= 4


# The tables other pages show, each as its program's configuration file would hold it.
DOCUMENTED_TABLES = {
    "agent.md": AGENT, "alerts.md": COLLECTOR, "collector.md": COLLECTOR, "detector.md": COLLECTOR,
    "ledger.md": COLLECTOR,
}  # fmt: skip


@pytest.mark.parametrize("page", sorted(DOCUMENTED_TABLES))
def test_documented_configuration_tables_load(page: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "docs" / page).read_text()
    blocks = re.findall(r"```toml\n(\[[a-z_]+\].*?)```", text, re.DOTALL)
    assert blocks
    for number, block in enumerate(blocks):
        config = tmp_path / f"{number}.toml"
        config.write_text(block)
        show(DOCUMENTED_TABLES[page], "--config", str(config), capsys=capsys)
