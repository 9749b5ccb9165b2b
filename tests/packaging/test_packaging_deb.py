"""The .deb: it builds with Debian's tools, lintian finds no error in it, it carries a wheel of
every pin for each supported release's CPython and its Depends are met by each release's
packages, and the environment its postinst makes runs — in a scratch prefix, and (as root) at its
real path /opt/nodeagent and through dpkg itself."""

from __future__ import annotations

import ctypes.util
import email.parser
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.conftest import require, require_root_tools
from tests.fakes.nvml.state import h100_sxm5
from tests.fakes.trees import REPO
from tests.syscall_sandbox import run_under_unit_filters


def _load_script(path: Path, name: str = "nodeagent_deb_build") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


deb_build = _load_script(REPO / "packaging" / "deb" / "build.py")
make_environment = _load_script(REPO / "packaging" / "deb" / "make_environment.py", "nodeagent_deb_make_environment")

# One test process builds the package once for every test here (make test: --dist loadgroup);
# spread over two, each would build its own.
pytestmark = pytest.mark.xdist_group("deb")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# Shared between runs and with `make deb`: wheels are fetched once, later builds are offline.
WHEELHOUSE = REPO / "build" / "wheelhouse"
SYSTEM_PYTHON = "/usr/bin/python3"
# Root file systems of other releases to install the package in too (colon-separated), besides
# this machine's own; none by default (making one takes a debootstrap and the network).
RELEASE_ROOTS = ["/", *filter(None, os.environ.get("NODEAGENT_DEB_RELEASE_ROOTS", "").split(":"))]
BUILD_TOOLS = ("dpkg-deb", "dpkg-shlibdeps", "git")
# What each target release's archive has, for the Depends check: every package the control file
# names, at a version the release ships. Debian's are read from its archive (apt-cache madison);
# Ubuntu's are the versions those releases published, written in by hand (Ubuntu's mirrors are
# out of this machine's reach). python3.11 on Ubuntu 22.04 is in universe.
# libgcc-s1 (cramjam's Rust extension needs it) comes from the same gcc source as libstdc++6.
ARCHIVES = {
    "debian-12": {
        "python3": "3.11.2-1+b1", "python3.11": "3.11.2-6+deb12u8", "adduser": "3.134",
        "init-system-helpers": "1.65.2+deb12u1", "libc6": "2.36-9+deb12u14", "libstdc++6": "12.2.0-14+deb12u1",
        "libgcc-s1": "12.2.0-14+deb12u1",
    },
    "debian-13": {
        "python3": "3.13.5-1", "python3.13": "3.13.5-2+deb13u5", "adduser": "3.152",
        "init-system-helpers": "1.69~deb13u1", "libc6": "2.41-12+deb13u5", "libstdc++6": "14.2.0-19",
        "libgcc-s1": "14.2.0-19",
    },
    "ubuntu-22.04": {
        "python3": "3.10.6-1~22.04", "python3.10": "3.10.12-1~22.04", "python3.11": "3.11.0-1~22.04",
        "adduser": "3.118ubuntu5", "init-system-helpers": "1.62", "libc6": "2.35-0ubuntu3",
        "libstdc++6": "12.3.0-1ubuntu1~22.04",
        "libgcc-s1": "12.3.0-1ubuntu1~22.04",
    },
    "ubuntu-24.04": {
        "python3": "3.12.3-0ubuntu1", "python3.12": "3.12.3-1", "adduser": "3.137ubuntu1",
        "init-system-helpers": "1.66ubuntu1", "libc6": "2.39-0ubuntu8", "libstdc++6": "14-20240412-0ubuntu1",
        "libgcc-s1": "14-20240412-0ubuntu1",
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    require(not missing, f"needs {', '.join(missing)} (Debian packages dpkg-dev, git)")
    require(Path(SYSTEM_PYTHON).is_file(), f"needs {SYSTEM_PYTHON} (Debian package python3)")
    scratch = tmp_path_factory.mktemp("deb")
    options = deb_build.Options(out=scratch / "out", work=scratch / "work", wheelhouse=WHEELHOUSE)
    return deb_build.build(options)


@pytest.fixture(scope="module")
def extracted(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scratch-root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
    return root


@pytest.fixture(scope="module")
def environment(extracted: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What postinst makes, made by the package's own make_environment.py in a scratch prefix
    from this machine's python3 (Debian 12's 3.11) and the extracted wheels."""
    prefix = tmp_path_factory.mktemp("prefix") / "opt" / "nodeagent"
    lib = extracted / "usr" / "lib" / "nodeagent"
    done = subprocess.run(
        [SYSTEM_PYTHON, "-I", str(lib / "make_environment.py"), "--prefix", str(prefix), "--lib", str(lib)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"nodeagent: made {prefix} with {SYSTEM_PYTHON} (Python {_system_python()})"
    return prefix


def test_the_size_the_docs_say_is_the_packages(deb: Path) -> None:
    """ "The package is about N MB" in packaging/README.md and docs/agent.md, within 5%."""
    for page in (REPO / "packaging" / "README.md", REPO / "docs" / "agent.md"):
        said = re.search(r"The package is about (\d+(?:\.\d+)?) MB", " ".join(page.read_text().split()))
        assert said is not None, page
        assert abs(deb.stat().st_size / 1e6 - float(said[1])) <= 0.05 * float(said[1]), (page, deb.stat().st_size)


def test_package_name_and_control_fields(deb: Path) -> None:
    arch = _run(["dpkg", "--print-architecture"]).strip()
    assert deb.name == f"nodeagent_{VERSION}_{arch}.deb"
    fields = _control(deb)
    assert fields["Package"] == "nodeagent"
    assert fields["Version"] == VERSION
    depends = [item.strip() for item in fields["Depends"].split(",")]
    # The environment's interpreter: python3 where it is 3.11 or newer, else Ubuntu 22.04's python3.11.
    assert depends[0] == "python3 (>= 3.11) | python3.11"
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


def test_installed_files(extracted: Path) -> None:
    for name in ("nodeagent", "nodeagent-collector"):
        link = extracted / "usr" / "bin" / name
        assert os.readlink(link) == f"/opt/nodeagent/bin/{name}"
        assert name in (extracted / "usr" / "share" / "bash-completion" / "completions" / name).read_text()
    for unit in ("nodeagent.service", "nodeagent-collector.service"):
        shipped = extracted / "lib" / "systemd" / "system" / unit
        assert shipped.read_text() == (REPO / "packaging" / "systemd" / unit).read_text()
    for conffile in ("agent.toml", "collector.toml"):
        assert (extracted / "etc" / "nodeagent" / conffile).is_file()
    doc = extracted / "usr" / "share" / "doc" / "nodeagent"
    assert f"nodeagent ({VERSION})" in gzip.decompress((doc / "changelog.gz").read_bytes()).decode()
    assert "Files: *" in (doc / "copyright").read_text()
    # The environment is postinst's to make: nothing of it, and nothing tied to one Python, ships.
    assert not (extracted / "opt").exists()
    assert [p for p in extracted.rglob("*") if "python3." in p.name or p.suffix in (".so", ".pyc")] == []
    # Nothing points back at where it was built.
    leaks = [p for p in extracted.rglob("*") if p.is_file() and not p.is_symlink() and _mentions_build(p)]
    assert leaks == []
    manifest = json.loads((extracted / "usr" / "lib" / "nodeagent" / "environment.json").read_text())
    assert manifest["version"] == VERSION
    assert manifest["pythons"] == ["3.11", "3.12", "3.13"]
    assert manifest["imports"] == list(deb_build.IMPORTS)


def test_wheels_cover_every_target_release(extracted: Path) -> None:
    """For each release's CPython, ABI and glibc, every pin (and pip, and nodeagent) has a wheel
    in the package that it can install; the tags are read from the wheels' names and matched by
    rules written here, not by the build's own selection."""
    wheels = [p.name for p in (extracted / "usr" / "lib" / "nodeagent" / "wheels").glob("*.whl")]
    wanted = _pins() | {"nodeagent": VERSION}
    assert {target.name for target in deb_build.TARGETS} == set(ARCHIVES)
    for target in deb_build.TARGETS:
        assert _uninstallable(wanted, wheels, target.python, target.glibc) == [], target.name
    # The check can fail: CPython 3.14 has no grpcio wheel here, and glibc 2.16 predates them all.
    assert "grpcio" in _uninstallable(wanted, wheels, (3, 14), (2, 41))
    assert "grpcio" in _uninstallable(wanted, wheels, (3, 11), (2, 16))
    # One wheel per pin and CPython at most: nothing ships that no target installs.
    assert len(wheels) == len({_wheel_key(name) for name in wheels})


def test_locked_requirements_hold_on_every_target_release(extracted: Path) -> None:
    """`pip check` for each release's Python, offline: what every shipped wheel requires there
    (its Requires-Dist markers evaluated for that Python) is pinned, at a version it accepts. The
    lock is resolved on one Python; a requirement only a newer one has would be missed."""
    metadata = {}
    for wheel in sorted((extracted / "usr" / "lib" / "nodeagent" / "wheels").glob("*.whl")):
        distribution, version, _, _ = parse_wheel_filename(wheel.name)
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA")
        requires = email.parser.BytesParser().parsebytes(text).get_all("Requires-Dist") or []
        metadata[canonicalize_name(distribution)] = (str(version), [Requirement(r) for r in requires])
    pins = {name: version for name, (version, _) in metadata.items()}
    for target in deb_build.TARGETS:
        python = {"python_version": target.python_version, "python_full_version": f"{target.python_version}.0"}
        for name, (_, requirements) in metadata.items():
            for requirement in requirements:
                if requirement.marker is not None and not requirement.marker.evaluate(python | {"extra": ""}):
                    continue
                needed = canonicalize_name(requirement.name)
                assert needed in pins, f"{target.name}: {name} needs {requirement}, which is not pinned"
                assert requirement.specifier.contains(pins[needed], prereleases=True), (target.name, requirement)


def test_depends_are_met_on_every_target_release(deb: Path, tmp_path: Path) -> None:
    """dpkg's own dependency check (dpkg-checkbuilddeps evaluates a dependency field against a
    dpkg database) over each release's packages at their versions; and a release without a new
    enough Python is refused."""
    require(shutil.which("dpkg-checkbuilddeps") is not None, "needs dpkg-checkbuilddeps (Debian package dpkg-dev)")
    depends = _control(deb)["Depends"]
    for release, packages in ARCHIVES.items():
        assert _unmet(depends, packages, tmp_path / release) == "", release
    without_python311 = {k: v for k, v in ARCHIVES["ubuntu-22.04"].items() if k != "python3.11"}
    assert "python3 (>= 3.11) | python3.11" in _unmet(depends, without_python311, tmp_path / "too-old")


def test_packaged_commands_run_from_a_scratch_prefix(environment: Path) -> None:
    """The made environment's interpreter finds its site-packages next to itself (pyvenv.cfg),
    so it runs where it lies: the packaged code and dependencies, not this checkout's."""
    python = str(environment / "bin" / "python3")
    assert os.path.realpath(python) == os.path.realpath(SYSTEM_PYTHON)
    site = environment / "lib" / f"python{_system_python()}" / "site-packages"
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # nothing from this checkout's environment
    for name in ("nodeagent", "nodeagent-collector"):
        assert (environment / "bin" / name).read_text().startswith(f"#!{environment}/bin/python3\n")
        done = subprocess.run(
            [python, "-I", str(environment / "bin" / name), "--version"],
            cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{name}, version {VERSION}"

    # Exactly the locked distributions, at the locked versions, plus nodeagent (pip ran from its
    # wheel and is not installed); bytecode compiled.
    installed = {
        canonicalize_name(p.name.split("-")[0]): p.name.removesuffix(".dist-info").split("-")[1]
        for p in site.glob("*.dist-info")
    }
    assert installed == deb_build.read_pins(deb_build.HERE / "requirements.lock") | {"nodeagent": VERSION}
    assert len(list(site.rglob("*.pyc"))) > 100

    modules = [*deb_build.IMPORTS, "grpc", "pynvml", "psutil", "structlog", "click"]
    code = f"import importlib, json; print(json.dumps([importlib.import_module(m).__file__ for m in {modules!r}]))"
    done = subprocess.run(
        [python, "-I", "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert all(path.startswith(f"{site}/") for path in json.loads(done.stdout))

    sample = subprocess.run(
        [python, "-I", str(environment / "bin" / "nodeagent"), "sample", "--json", "--count", "2", "--interval", "0.1"],
        cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert sample.returncode == 0, sample.stderr
    last = json.loads(sample.stdout.splitlines()[-1])
    assert last["host"]["cpu_count"] >= 1


def test_packaged_agent_samples_gpus_under_the_units_system_call_filters(
    extracted: Path, environment: Path, fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """The made environment's interpreter, libffi and compiled wheels, as the unit runs them:
    under its SystemCallFilter= and MemoryDenyWriteExecute=, NVML (the fake, through pynvml's
    ctypes path) still answers for eight GPUs."""
    require(shutil.which("systemd-analyze") is not None, "needs systemd-analyze (Debian package systemd)")
    require(ctypes.util.find_library("seccomp") is not None, "needs libseccomp (Debian package libseccomp2)")
    state_path = tmp_path / "nvml.state"
    h100_sxm5().write(state_path)
    command = [str(environment / "bin" / "python3"), "-I", str(environment / "bin" / "nodeagent"), "sample", "--json"]
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_path)}
    done = run_under_unit_filters(extracted / "lib" / "systemd" / "system" / "nodeagent.service", command, env)
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["gpu_unavailable_reason"] is None
    assert len(last["gpus"]) == 8


@pytest.mark.root
def test_packaged_files_run_at_their_installed_path(extracted: Path) -> None:
    """As installed: the environment made at /opt/nodeagent (a tmpfs in a private mount
    namespace, the host's /opt untouched), entered through the /usr/bin link and the script's own
    #! line; and systemd-analyze verifies the shipped units against the made commands."""
    require_root_tools("unshare", "mount", "systemd-analyze")
    units = extracted / "lib" / "systemd" / "system"
    lib = extracted / "usr" / "lib" / "nodeagent"
    script = f"""
        set -e
        mount -t tmpfs tmpfs /opt
        {SYSTEM_PYTHON} -I {lib}/make_environment.py --prefix /opt/nodeagent --lib {lib} >/dev/null
        {extracted}/usr/bin/nodeagent --version
        {extracted}/usr/bin/nodeagent-collector --version
        systemd-analyze verify --man=no {units}/nodeagent.service {units}/nodeagent-collector.service
        echo verified
    """
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd="/", capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split("\n")[:3] == [
        f"nodeagent, version {VERSION}",
        f"nodeagent-collector, version {VERSION}",
        "verified",
    ]
    assert [line for line in done.stderr.splitlines() if ".service" in line] == []


@pytest.mark.root
@pytest.mark.parametrize("system_root", RELEASE_ROOTS, ids=lambda root: "host" if root == "/" else Path(root).name)
def test_dpkg_installs_upgrades_and_purges_it(deb: Path, tmp_path: Path, system_root: str) -> None:
    """The maintainer scripts for real: dpkg -i, the python3 trigger, a reinstall (the upgrade
    path), remove and purge, in a chroot whose root is an overlay of this machine's (a private
    mount namespace, changes on a tmpfs): nothing of it reaches the host. The same runs on
    another release's root file system when NODEAGENT_DEB_RELEASE_ROOTS names one (a
    debootstrap of it: packaging/README.md)."""
    require_root_tools("unshare", "mount", "chroot", "dpkg")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    inside = tmp_path / "inside.sh"
    inside.write_text("""
        set -e
        dpkg -i /tmp/nodeagent.deb >/dev/null
        echo "user=$(getent passwd nodeagent | cut -d: -f6,7)"
        echo "version=$(nodeagent --version)"
        echo "env-python=$(/opt/nodeagent/bin/python3 -c 'import sys; print(sys.version)')"
        echo "system-python=$(/usr/bin/python3 -c 'import sys; print(sys.version)')"
        echo "bytecode=$(find /opt/nodeagent -name '*.pyc' | wc -l)"
        echo "enabled=$(ls /etc/systemd/system/multi-user.target.wants 2>/dev/null | grep -c nodeagent || true)"
        # The python3 trigger: nothing to do while the environment runs on python3's version...
        dpkg-trigger --no-await /usr/bin/python3
        echo "trigger-unchanged=$(dpkg --triggers-only nodeagent | grep -c 'nodeagent: made' || true)"
        # ...and remade when it no longer does (here: its commands are gone).
        rm /opt/nodeagent/bin/nodeagent
        dpkg-trigger --no-await /usr/bin/python3
        echo "trigger-remade=$(dpkg --triggers-only nodeagent | grep -c 'nodeagent: made' || true)"
        echo "after-trigger=$(nodeagent --version)"
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
        mount -t overlay overlay -o lowerdir={system_root},upperdir={overlay}/upper,workdir={overlay}/work \\
            {overlay}/root
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
    assert facts["env-python"] == facts["system-python"]  # made from that release's own python3
    assert int(facts["bytecode"]) > 100  # postinst compiled the environment
    assert facts["enabled"] == "0"  # not enabled before it is configured
    assert facts["trigger-unchanged"] == "0"
    assert facts["trigger-remade"] == "1"
    assert facts["after-trigger"] == f"nodeagent, version {VERSION}"
    assert facts["reinstalled"] == f"nodeagent-collector, version {VERSION}"
    # Remove keeps the configuration and takes the environment postinst made.
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


def test_make_environment_chooses_python3_or_the_newest_supported_one(tmp_path: Path) -> None:
    """Ubuntu 22.04 (python3 is 3.10, python3.11 installed) gets python3.11; a release whose
    python3 is supported gets python3, even beside a newer python3.X; none supported: one line
    naming what was found."""
    supported = ["3.11", "3.12", "3.13"]
    jammy = _fake_bindir(tmp_path / "jammy", {"python3": "3.10", "python3.10": "3.10", "python3.11": "3.11"})
    assert make_environment.choose_python(supported, jammy) == jammy / "python3.11"
    noble = _fake_bindir(tmp_path / "noble", {"python3": "3.12", "python3.13": "3.13"})
    assert make_environment.choose_python(supported, noble) == noble / "python3"
    old = _fake_bindir(tmp_path / "old", {"python3": "3.10"})
    with pytest.raises(make_environment.EnvironmentFailure, match=r"python3 is 3\.10\); wheels here are for 3\.11"):
        make_environment.choose_python(supported, old)


def test_make_environment_reads_the_environments_python(tmp_path: Path) -> None:
    prefix = tmp_path / "nodeagent"
    assert make_environment.environment_python(prefix) is None
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.13.5\nexecutable = /usr/bin/python3.13\n")
    assert make_environment.environment_python(prefix) is None  # no commands: not whole, remake it
    (prefix / "bin" / "nodeagent").write_text("#!/opt/nodeagent/bin/python3\n")
    assert make_environment.environment_python(prefix) == "3.13"


def test_make_environment_refuses_an_unsupported_python_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What apt prints when postinst cannot make the environment: one line, exit 1, nothing made."""
    lib = tmp_path / "lib"
    lib.mkdir()
    manifest = {"version": VERSION, "pythons": ["3.11", "3.12", "3.13"], "installer": "pip.whl", "imports": []}
    (lib / make_environment.MANIFEST).write_text(json.dumps(manifest))
    bindir = _fake_bindir(tmp_path / "bin", {"python3": "3.10"})
    prefix = tmp_path / "opt" / "nodeagent"
    assert make_environment.main(["--prefix", str(prefix), "--lib", str(lib), "--python", str(bindir / "python3")]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"nodeagent: cannot make {prefix}: {bindir}/python3 is Python 3.10; wheels here are for 3.11, 3.12, 3.13\n"
    )
    assert not prefix.exists()


def test_make_environment_leaves_a_foreign_directory_alone(tmp_path: Path) -> None:
    prefix = tmp_path / "nodeagent"
    prefix.mkdir()
    (prefix / "data").write_text("not ours")
    manifest = make_environment.Manifest(version=VERSION, pythons=["3.11"], installer="pip.whl", imports=[])
    with pytest.raises(make_environment.EnvironmentFailure, match="not nodeagent's environment"):
        make_environment.make(prefix, Path(SYSTEM_PYTHON), tmp_path, manifest)
    assert (prefix / "data").read_text() == "not ours"


def _fake_bindir(bindir: Path, versions: dict[str, str]) -> Path:
    """Interpreters that only answer make_environment's version probe."""
    bindir.mkdir(parents=True)
    for name, version in versions.items():
        (bindir / name).write_text(f"#!/bin/sh\necho {version}\n")
        (bindir / name).chmod(0o755)
    return bindir


def _pins() -> dict[str, str]:
    return deb_build.read_pins(deb_build.HERE / "requirements.lock") | deb_build.read_pins(
        deb_build.HERE / "installer.lock"
    )


def _uninstallable(
    wanted: dict[str, str], wheels: list[str], python: tuple[int, int], glibc: tuple[int, int]
) -> list[str]:
    """The wanted distributions with no wheel that CPython ``python`` on ``glibc`` installs."""
    abi = f"cp{python[0]}{python[1]}"
    # Interpreter and ABI pairs this CPython accepts (cpXY-cpXY, cp3N-abi3 for N <= Y, py3*-none...).
    accepted = {(t.interpreter, t.abi) for t in cpython_tags(python, abis=[abi], platforms=["x"])}
    accepted |= {(t.interpreter, t.abi) for t in compatible_tags(python, interpreter=abi, platforms=["x"])}
    installable = set()
    for name in wheels:
        distribution, version, _, tags = parse_wheel_filename(name)
        if wanted.get(canonicalize_name(distribution)) != str(version):
            continue
        if any((t.interpreter, t.abi) in accepted and _loads(t.platform, glibc) for t in tags):
            installable.add(canonicalize_name(distribution))
    return sorted(set(wanted) - installable)


def _loads(platform: str, glibc: tuple[int, int]) -> bool:
    """Whether a glibc of this version loads a wheel of this platform tag (PEP 600, PEP 599)."""
    if platform == "any":
        return True
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", platform)
    needed = (int(match[1]), int(match[2])) if match else legacy.get(platform.removesuffix("_x86_64"))
    return needed is not None and platform.endswith("_x86_64") and needed <= glibc


def _wheel_key(name: str) -> tuple[str, str]:
    distribution, _, _, tags = parse_wheel_filename(name)
    return canonicalize_name(distribution), min(t.abi for t in tags)


def _unmet(depends: str, packages: dict[str, str], admindir: Path) -> str:
    """What of ``depends`` a dpkg database holding ``packages`` leaves unmet ("" when none)."""
    (admindir / "updates").mkdir(parents=True)
    (admindir / "info").mkdir()
    (admindir / "available").touch()
    (admindir / "status").write_text("".join(
        f"Package: {name}\nStatus: install ok installed\nVersion: {version}\nArchitecture: amd64\n"
        f"Maintainer: x <x@example.org>\nDescription: x\n\n"
        for name, version in packages.items()
    ))  # fmt: skip
    (admindir / "debian").mkdir()
    (admindir / "debian" / "control").write_text("Source: x\n\nPackage: x\nArchitecture: any\n")
    done = subprocess.run(
        ["dpkg-checkbuilddeps", f"--admindir={admindir}", "-d", depends, "debian/control"],
        cwd=admindir, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.stderr.partition("Unmet build dependencies: ")[2].strip()


def _system_python() -> str:
    return _run([SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).strip()


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
