"""The .deb: it builds with Debian's tools, lintian finds no error in it, and the files it
installs run — from a scratch root, and (as root) at their real path /opt/nodeagent."""

from __future__ import annotations

import ctypes.util
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import require, require_root_tools
from tests.fakes.nvml.state import h100_sxm5
from tests.fakes.trees import REPO
from tests.syscall_sandbox import run_under_unit_filters


def _load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("nodeagent_deb_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


deb_build = _load_script(REPO / "packaging" / "deb" / "build.py")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# Shared between runs and with `make deb`: wheels are fetched once, later builds are offline.
WHEELHOUSE = REPO / "build" / "wheelhouse"
BUILD_TOOLS = ("dpkg-deb", "dpkg-shlibdeps", "strip", "git")


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    require(not missing, f"needs {', '.join(missing)} (Debian packages dpkg-dev, binutils, git)")
    require(Path(deb_build.PYTHON).is_file(), f"needs {deb_build.PYTHON} (Debian package python3.11-venv)")
    scratch = tmp_path_factory.mktemp("deb")
    options = deb_build.Options(out=scratch / "out", work=scratch / "work", wheelhouse=WHEELHOUSE)
    return deb_build.build(options)


@pytest.fixture(scope="module")
def extracted(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scratch-root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
    return root


def test_package_name_and_control_fields(deb: Path) -> None:
    arch = _run(["dpkg", "--print-architecture"]).strip()
    assert deb.name == f"nodeagent_{VERSION}_{arch}.deb"
    fields = _control(deb)
    assert fields["Package"] == "nodeagent"
    assert fields["Version"] == VERSION
    depends = [item.strip() for item in fields["Depends"].split(",")]
    assert "python3.11" in depends  # the environment's interpreter
    assert "adduser" in depends  # postinst creates the agent's user
    assert any(item.startswith("libc6 ") for item in depends)  # from dpkg-shlibdeps
    conffiles = _run(["dpkg-deb", "--info", str(deb), "conffiles"]).split()
    assert conffiles == ["/etc/nodeagent/agent.toml", "/etc/nodeagent/collector.toml"]


def test_lintian_reports_no_errors(deb: Path) -> None:
    lintian = shutil.which("lintian")
    require(lintian is not None, "needs lintian (Debian package lintian)")
    assert lintian is not None
    done = subprocess.run(
        [lintian, "--info", "--no-tag-display-limit", str(deb)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    tags = done.stdout.splitlines()
    assert [line for line in tags if line.startswith("E:")] == [], done.stdout
    # An override that no longer matches anything hides nothing and misleads readers.
    stale = [line for line in tags if "unused-override" in line or "mismatched-override" in line]
    assert stale == [], done.stdout


def test_maintainer_scripts_parse(deb: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "DEBIAN")], check=True, timeout=60)
    for script in ("postinst", "prerm", "postrm"):
        path = tmp_path / "DEBIAN" / script
        assert os.access(path, os.X_OK)
        subprocess.run(["sh", "-n", str(path)], check=True, timeout=60)


def test_installed_files(extracted: Path, tmp_path: Path) -> None:
    venv = extracted / "opt" / "nodeagent"
    for name in ("nodeagent", "nodeagent-collector"):
        link = extracted / "usr" / "bin" / name
        assert os.readlink(link) == f"/opt/nodeagent/bin/{name}"
        assert (venv / "bin" / name).read_text().startswith("#!/opt/nodeagent/bin/python3.11\n")
        assert name in (extracted / "usr" / "share" / "bash-completion" / "completions" / name).read_text()
    assert os.readlink(venv / "bin" / "python3.11") == "/usr/bin/python3.11"
    for unit in ("nodeagent.service", "nodeagent-collector.service"):
        shipped = extracted / "lib" / "systemd" / "system" / unit
        assert shipped.read_text() == (REPO / "packaging" / "systemd" / unit).read_text()
    for conffile in ("agent.toml", "collector.toml"):
        assert (extracted / "etc" / "nodeagent" / conffile).is_file()
    doc = extracted / "usr" / "share" / "doc" / "nodeagent"
    assert f"nodeagent ({VERSION})" in gzip.decompress((doc / "changelog.gz").read_bytes()).decode()
    assert "Files: *" in (doc / "copyright").read_text()
    # Nothing points back at where it was built, and no bytecode is shipped (postinst compiles it).
    leaks = [p for p in extracted.rglob("*") if p.is_file() and not p.is_symlink() and _mentions_build(p)]
    assert leaks == []
    assert list(extracted.rglob("__pycache__")) == []
    # Exactly the locked distributions, at the locked versions, plus nodeagent itself.
    installed = {
        canonicalize_name(p.name.split("-")[0]): p.name.removesuffix(".dist-info").split("-")[1]
        for p in venv.glob("lib/python3.11/site-packages/*.dist-info")
    }
    assert installed == deb_build.read_pins(deb_build.HERE / "requirements.lock") | {"nodeagent": VERSION}


def test_packaged_commands_run_from_a_scratch_root(extracted: Path) -> None:
    """The environment's interpreter finds its site-packages next to itself (pyvenv.cfg), so the
    extracted tree runs where it lies: the packaged code and dependencies, not this checkout's."""
    venv = extracted / "opt" / "nodeagent"
    python = str(venv / "bin" / "python3.11")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # nothing from this checkout's environment
    for name in ("nodeagent", "nodeagent-collector"):
        done = subprocess.run(
            [python, "-I", str(venv / "bin" / name), "--version"],
            cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{name}, version {VERSION}"

    code = (
        "import json, grpc, pynvml, psutil, structlog, click\n"
        "from nodeagent import agent, collector\n"
        "from nodeagent.v1 import nodeagent_pb2\n"
        "mods = (agent, collector, grpc, pynvml, psutil, structlog, click, nodeagent_pb2)\n"
        "print(json.dumps([m.__file__ for m in mods]))\n"
    )
    done = subprocess.run(
        [python, "-I", "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert all(path.startswith(f"{venv}/lib/python3.11/site-packages/") for path in json.loads(done.stdout))

    sample = subprocess.run(
        [python, "-I", str(venv / "bin" / "nodeagent"), "sample", "--json", "--count", "2", "--interval", "0.1"],
        cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert sample.returncode == 0, sample.stderr
    last = json.loads(sample.stdout.splitlines()[-1])
    assert last["host"]["cpu_count"] >= 1


def test_packaged_agent_samples_gpus_under_the_units_system_call_filters(
    extracted: Path, fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """The package's own interpreter, libffi and compiled wheels, as the unit runs them: under
    its SystemCallFilter= and MemoryDenyWriteExecute=, NVML (the fake, through pynvml's ctypes
    path) still answers for eight GPUs."""
    require(shutil.which("systemd-analyze") is not None, "needs systemd-analyze (Debian package systemd)")
    require(ctypes.util.find_library("seccomp") is not None, "needs libseccomp (Debian package libseccomp2)")
    state_path = tmp_path / "nvml.state"
    h100_sxm5().write(state_path)
    venv = extracted / "opt" / "nodeagent"
    command = [str(venv / "bin" / "python3.11"), "-I", str(venv / "bin" / "nodeagent"), "sample", "--json"]
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_path)}
    done = run_under_unit_filters(extracted / "lib" / "systemd" / "system" / "nodeagent.service", command, env)
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["gpu_unavailable_reason"] is None
    assert len(last["gpus"]) == 8


@pytest.mark.root
def test_packaged_files_run_at_their_installed_path(extracted: Path) -> None:
    """As installed: /opt/nodeagent (bind-mounted in a private mount namespace, the host's /opt
    untouched), entered through the /usr/bin link and the script's own #! line; and
    systemd-analyze verifies the shipped units against the shipped commands."""
    require_root_tools("unshare", "mount", "systemd-analyze")
    units = extracted / "lib" / "systemd" / "system"
    script = f"""
        set -e
        mount -t tmpfs tmpfs /opt
        mkdir /opt/nodeagent
        mount --bind {extracted}/opt/nodeagent /opt/nodeagent
        {extracted}/usr/bin/nodeagent --version
        {extracted}/usr/bin/nodeagent-collector --version
        systemd-analyze verify --man=no {units}/nodeagent.service {units}/nodeagent-collector.service
        echo verified
    """
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd="/", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split("\n")[:3] == [
        f"nodeagent, version {VERSION}",
        f"nodeagent-collector, version {VERSION}",
        "verified",
    ]
    assert [line for line in done.stderr.splitlines() if ".service" in line] == []


@pytest.mark.root
def test_dpkg_installs_upgrades_and_purges_it(deb: Path, tmp_path: Path) -> None:
    """The maintainer scripts for real: dpkg -i, a reinstall (the upgrade path), remove and
    purge, in a chroot whose root is an overlay of this machine's (a private mount namespace,
    changes on a tmpfs): nothing of it reaches the host."""
    require_root_tools("unshare", "mount", "chroot", "dpkg")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    inside = tmp_path / "inside.sh"
    inside.write_text("""
        set -e
        dpkg -i /tmp/nodeagent.deb >/dev/null
        echo "user=$(getent passwd nodeagent | cut -d: -f6,7)"
        echo "version=$(nodeagent --version)"
        echo "bytecode=$(find /opt/nodeagent -name '*.pyc' | wc -l)"
        echo "enabled=$(ls /etc/systemd/system/multi-user.target.wants 2>/dev/null | grep -c nodeagent || true)"
        dpkg -i /tmp/nodeagent.deb >/dev/null
        echo "reinstalled=$(nodeagent-collector --version)"
        dpkg --remove nodeagent >/dev/null
        echo "after-remove=$(ls -d /opt/nodeagent /etc/nodeagent/agent.toml 2>/dev/null | tr '\n' ' ')"
        mkdir -p /var/lib/nodeagent/spool
        dpkg --purge nodeagent >/dev/null
        echo "after-purge=$(ls -d /etc/nodeagent /var/lib/nodeagent 2>/dev/null | tr '\n' ' ')"
    """)
    script = f"""
        set -e
        mount -t tmpfs tmpfs {overlay}
        mkdir {overlay}/upper {overlay}/work {overlay}/root
        mount -t overlay overlay -o lowerdir=/,upperdir={overlay}/upper,workdir={overlay}/work {overlay}/root
        for fs in proc sys dev; do mount --rbind /$fs {overlay}/root/$fs; done
        mount -t tmpfs tmpfs {overlay}/root/run
        cp {deb} {overlay}/root/tmp/nodeagent.deb
        cp {inside} {overlay}/root/tmp/inside.sh
        chroot {overlay}/root sh /tmp/inside.sh
    """
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd="/", capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    facts = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert facts["user"] == "/var/lib/nodeagent:/usr/sbin/nologin"  # a system user, no login
    assert facts["version"] == f"nodeagent, version {VERSION}"
    assert int(facts["bytecode"]) > 100  # postinst compiled the environment
    assert facts["enabled"] == "0"  # not enabled before it is configured
    assert facts["reinstalled"] == f"nodeagent-collector, version {VERSION}"
    # Remove keeps the configuration and leaves no compiled files behind in /opt.
    assert facts["after-remove"].split() == ["/etc/nodeagent/agent.toml"]
    assert facts["after-purge"].strip() == ""


def test_lock_pins_what_pyproject_asks() -> None:
    """Every runtime dependency is pinned at a version its specifier accepts (the build's
    `pip check` then proves the pins are complete and consistent)."""
    pins = deb_build.read_pins(deb_build.HERE / "requirements.lock")
    for text in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} missing from requirements.lock: run `make deb-lock`"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {requirement}"


def test_build_refuses_a_changelog_behind_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deb_build, "project_version", lambda: "99.0.0")
    with pytest.raises(deb_build.BuildError, match=r"changelog starts with .*, pyproject.toml says 99.0.0"):
        deb_build.check_changelog(deb_build.project_version())


def test_build_refuses_an_embedded_distribution_without_copyright() -> None:
    with pytest.raises(deb_build.BuildError, match="no paragraph for left-pad"):
        deb_build.check_copyright({"click": "8.0", "left-pad": "1.0"})


def _control(deb: Path) -> dict[str, str]:
    return dict(re.findall(r"^(\S+): (.*)$", _run(["dpkg-deb", "-f", str(deb)]), re.MULTILINE))


def _run(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=120).stdout


def _mentions_build(path: Path) -> bool:
    """The file names this checkout or the test's scratch space (where the package was built)."""
    data = path.read_bytes()
    return str(REPO).encode() in data or b"/pytest-of-" in data


def test_example_agent_configuration_loads() -> None:
    """The conffile the package installs is accepted as it stands (its settings are commented
    examples), so an upgrade never ships a configuration the agent refuses."""
    from nodeagent.agent.config import load_config

    load_config(REPO / "packaging" / "etc" / "agent.toml")
