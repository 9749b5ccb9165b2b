"""Build ``nodeagent_<version>_<arch>.deb`` with Debian's own tools (``make deb``).

    python packaging/deb/build.py [--out DIR] [--work DIR] [--wheelhouse DIR]

One package for every release in ``TARGETS`` (Debian 12 and 13, Ubuntu 22.04 and 24.04). It
ships no file tied to one Python: nodeagent's wheel and, for each target's CPython, a wheel of
every distribution in ``requirements.lock`` (compiled ones once per CPython, pure ones once) in
/usr/lib/nodeagent/wheels, with pip's wheel and ``make_environment.py``, which postinst runs to
make the virtual environment /opt/nodeagent from the system's own interpreter, offline. Also:
/usr/bin links to the two commands, the systemd units, the example configuration as conffiles,
bash, zsh and fish completion, and the maintainer scripts. Wheels come from ``--wheelhouse`` when
it already holds them (no network needed) and from the package index otherwise; nothing is
compiled. Run as any user: ``dpkg-deb --root-owner-group`` makes every file root's.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PREFIX = "/opt/nodeagent"  # made by postinst (make_environment.py); the units run from it
LIB = "/usr/lib/nodeagent"  # what make_environment.py needs: wheels/, the lock, environment.json
# The modules that must import from a made environment (make_environment.py checks them on the
# machine it installs on; the tests too): the one place that names nodeagent's import packages.
IMPORTS = ("nodeagent.agent", "nodeagent.collector", "nodeagent.v1")
COMMANDS = ("nodeagent", "nodeagent-collector")
UNITS = ("nodeagent.service", "nodeagent-collector.service")
CONFFILES = ("agent.toml", "collector.toml")
DESCRIPTION = """\
GPU node health and telemetry agent, and its fleet collector
 nodeagent runs on every GPU server, samples NVML, NICs, RDMA ports, disks and
 CPUs, and streams reports to a collector that flags data-starved GPUs with
 the cause (network, storage, CPU, host-to-device copy, interconnect) and
 the GPU time it costs.
 .
 This package installs both programs with their pinned Python dependencies in
 /opt/nodeagent, and systemd units that are not enabled until configured."""


@dataclass(frozen=True, slots=True)
class Target:
    """A release the package installs on: the CPython its environment is made from (python3,
    or the named package where python3 is too old) and its glibc, which bounds the manylinux
    wheels it can load."""

    name: str
    python: tuple[int, int]
    python_package: str  # the Debian package providing /usr/bin/python<major.minor>
    glibc: tuple[int, int]

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"


# nodeagent needs Python 3.11 (tomllib, enum.StrEnum, datetime.UTC). Ubuntu 22.04's python3 is
# 3.10, so there the environment is made from its python3.11 package (universe) instead.
TARGETS = (
    Target("debian-12", (3, 11), "python3", (2, 36)),
    Target("debian-13", (3, 13), "python3", (2, 41)),
    Target("ubuntu-22.04", (3, 11), "python3.11", (2, 35)),
    Target("ubuntu-24.04", (3, 12), "python3", (2, 39)),
)
MIN_PYTHON = min(target.python for target in TARGETS)
# Debian architecture -> the wheels' platform suffix. amd64 only: the one built and tested here
# (arm64 would be {"arm64": "aarch64"}, built on an arm64 machine).
WHEEL_ARCH = {"amd64": "x86_64"}


class BuildError(RuntimeError):
    """The package cannot be built as asked; the message says why, in one line."""


# gzip, not xz: the package is almost all wheels, which are zip files already; xz made it 3.5%
# smaller (34.2 MB against 35.4) for 25 times the CPU (27 s against 1 s on 2 cores).
COMPRESSION = "gzip"


@dataclass(frozen=True, slots=True)
class Options:
    out: Path
    work: Path
    wheelhouse: Path
    lock: Path = HERE / "requirements.lock"
    installer_lock: Path = HERE / "installer.lock"
    compression: str = COMPRESSION


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the .deb goes (default dist/)")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "deb", help="scratch space (emptied)")
    parser.add_argument("--wheelhouse", type=Path, default=REPO / "build" / "wheelhouse", help="wheel cache")
    parser.add_argument("--compression", choices=["xz", "gzip", "zstd", "none"], default=COMPRESSION)
    args = parser.parse_args(argv)
    options = Options(out=args.out, work=args.work, wheelhouse=args.wheelhouse, compression=args.compression)
    try:
        deb = build(options)
    except (BuildError, subprocess.CalledProcessError) as err:
        sys.stderr.write(f"build-deb: error: {err}\n")
        return 1
    print(deb)
    return 0


def build(options: Options) -> Path:
    """Build the package and return its path."""
    version = project_version()
    changelog_date = check_changelog(version)
    pins = read_pins(options.lock)
    installer = read_pins(options.installer_lock)
    check_copyright(pins | installer)
    arch = run(["dpkg", "--print-architecture"]).strip()
    if arch not in WHEEL_ARCH:
        raise BuildError(f"architecture {arch}: no wheel platform known for it (WHEEL_ARCH)")
    if options.work.exists():
        shutil.rmtree(options.work)
    root = options.work / "root"
    lib = root / LIB.lstrip("/")

    wheels = fetch_wheels(pins | installer, options, WHEEL_ARCH[arch])
    (lib / "wheels").mkdir(parents=True)
    for wheel in [*wheels, build_project_wheel(options.work, changelog_date)]:
        shutil.copy2(wheel, lib / "wheels" / wheel.name)
    shutil.copy(options.lock, lib / "requirements.lock")
    shutil.copy(HERE / "make_environment.py", lib / "make_environment.py")
    (installer_wheel,) = [w for w in wheels if canonicalize_name(parse_wheel_filename(w.name)[0]) == "pip"]
    manifest = {
        "version": version,
        "pythons": [f"{major}.{minor}" for major, minor in sorted({t.python for t in TARGETS})],
        "installer": installer_wheel.name,
        "imports": list(IMPORTS),
    }
    (lib / "environment.json").write_text(json.dumps(manifest, indent=2) + "\n")
    install_system_files(root, options.work / "env", lib)
    normalise_permissions(root)
    write_control(root, version, arch, depends=shlib_depends(options.work, wheels))

    options.out.mkdir(parents=True, exist_ok=True)
    deb = options.out / f"nodeagent_{version}_{arch}.deb"
    # Every file's time is the changelog entry's, as dpkg-buildpackage does: the same inputs
    # give the same package.
    env = os.environ | {"SOURCE_DATE_EPOCH": str(changelog_date)}
    run(["dpkg-deb", "--root-owner-group", f"-Z{options.compression}", "--build", str(root), str(deb)], env=env)
    return deb


def project_version() -> str:
    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def check_changelog(version: str) -> int:
    """The changelog's latest entry must be this version; returns its time (Unix seconds)."""
    text = (HERE / "changelog").read_text()
    head = re.match(r"nodeagent \(([^)]+)\)", text)
    if head is None or head.group(1) != version:
        found = head.group(1) if head else "nothing"
        raise BuildError(f"packaging/deb/changelog starts with {found}, pyproject.toml says {version}: add an entry")
    trailer = re.search(r"^ -- .+>  (.+)$", text, re.MULTILINE)
    if trailer is None:
        raise BuildError("packaging/deb/changelog: first entry has no ' -- name <email>  date' line")
    return int(email.utils.parsedate_to_datetime(trailer.group(1)).timestamp())


def read_pins(lock: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            name, _, version = text.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def check_copyright(pins: dict[str, str]) -> None:
    """Every embedded distribution must have its paragraph in the copyright file."""
    named = set(re.findall(r"^X-Distribution: (\S+)$", (HERE / "copyright").read_text(), re.MULTILINE))
    missing = sorted(set(pins) - named)
    if missing:
        raise BuildError(f"packaging/deb/copyright has no paragraph for {', '.join(missing)}")


def fetch_wheels(pins: dict[str, str], options: Options, arch: str) -> list[Path]:
    """For every target, the wheel pip would pick for each pin, from the wheelhouse; what it
    lacks is downloaded (only binaries, for that target's CPython, ABI and glibc) first. Returns
    the distinct wheels: pure ones are shared by every target."""
    options.wheelhouse.mkdir(parents=True, exist_ok=True)
    chosen: set[Path] = set()
    for target in TARGETS:
        tags = target_tags(target, arch)
        picked = pick_wheels(pins, sorted(options.wheelhouse.glob("*.whl")), tags)
        if len(picked) < len(pins):
            run([
                *pip(sys.executable), "download", "--quiet", "--only-binary=:all:", "--no-deps",
                "--python-version", target.python_version, "--implementation", "cp",
                *(f"--abi={abi}" for abi in (f"cp{target.python[0]}{target.python[1]}", "abi3", "none")),
                *(f"--platform={platform}" for platform in [*platform_tags(target.glibc, arch), "any"]),
                "-d", str(options.wheelhouse), *(f"{name}=={version}" for name, version in pins.items()),
            ])  # fmt: skip
            picked = pick_wheels(pins, sorted(options.wheelhouse.glob("*.whl")), tags)
        missing = sorted(set(pins) - set(picked))
        if missing:
            raise BuildError(f"{target.name}: no wheel for {', '.join(missing)} (cp{target.python_version})")
        chosen.update(picked.values())
    return sorted(chosen)


def target_tags(target: Target, arch: str) -> list[Tag]:
    """The wheel tags ``target``'s CPython accepts, most preferred first (as pip orders them)."""
    platforms = platform_tags(target.glibc, arch)
    abi = f"cp{target.python[0]}{target.python[1]}"
    return [
        *cpython_tags(target.python, abis=[abi], platforms=platforms),
        *compatible_tags(target.python, interpreter=abi, platforms=platforms),
    ]


def platform_tags(glibc: tuple[int, int], arch: str) -> list[str]:
    """manylinux platforms a glibc of this version loads, newest first, with the legacy
    aliases (manylinux2014 is 2.17, manylinux2010 2.12, manylinux1 2.5; PEP 600)."""
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(glibc[1], 4, -1):
        tags.append(f"manylinux_{glibc[0]}_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return tags


def pick_wheels(pins: dict[str, str], wheels: list[Path], tags: list[Tag]) -> dict[str, Path]:
    """Pin name -> the wheel at that version with the most preferred tag in ``tags``."""
    rank = {tag: index for index, tag in enumerate(tags)}
    best: dict[str, tuple[int, Path]] = {}
    for wheel in wheels:
        name, version, _, wheel_tags = parse_wheel_filename(wheel.name)
        name = canonicalize_name(name)
        if pins.get(name) != str(version):
            continue
        score = min((rank[tag] for tag in wheel_tags if tag in rank), default=None)
        if score is not None and (name not in best or score < best[name][0]):
            best[name] = (score, wheel)
    return {name: wheel for name, (_, wheel) in best.items()}


def build_project_wheel(work: Path, source_date: int) -> Path:
    """nodeagent's own wheel, built from the files git would commit (not stale build output)."""
    source = work / "source"
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    for name in filter(None, listed.split("\0")):
        origin = REPO / name
        if origin.is_file():
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
    wheels = work / "wheels"
    # The wheel's member times are SOURCE_DATE_EPOCH's: the same checkout gives the same wheel.
    env = os.environ | {"SOURCE_DATE_EPOCH": str(source_date)}
    command = [*pip(sys.executable), "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels)]
    run([*command, str(source)], env=env)
    (wheel,) = wheels.glob("nodeagent-*.whl")
    return wheel


def made_environment(env: Path, lib: Path) -> Path:
    """The package's own make_environment.py, run here as postinst runs it: proves the wheels
    install and import on this machine's Python, and gives the commands whose completion
    scripts are shipped."""
    python = "/usr/bin/python3"
    if not Path(python).is_file():
        raise BuildError(f"{python} missing: apt-get install python3")
    run([python, "-I", str(lib / "make_environment.py"), "--prefix", str(env), "--lib", str(lib)])
    return env


def install_system_files(root: Path, env: Path, lib: Path) -> None:
    usr_bin = root / "usr" / "bin"
    usr_bin.mkdir(parents=True)
    for command in COMMANDS:
        (usr_bin / command).symlink_to(f"{PREFIX}/bin/{command}")

    units = root / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(REPO / "packaging" / "systemd" / unit, units / unit)

    etc = root / "etc" / "nodeagent"
    etc.mkdir(parents=True)
    for conffile in CONFFILES:
        shutil.copy(REPO / "packaging" / "etc" / conffile, etc / conffile)

    write_completions(root, made_environment(env, lib))

    doc = root / "usr" / "share" / "doc" / "nodeagent"
    doc.mkdir(parents=True)
    shutil.copy(HERE / "copyright", doc / "copyright")
    write_gzip(doc / "changelog.gz", (HERE / "changelog").read_bytes())
    shutil.copy(REPO / "packaging" / "README.md", doc / "README.md")

    if (HERE / "lintian-overrides").is_file():
        overrides = root / "usr" / "share" / "lintian" / "overrides"
        overrides.mkdir(parents=True)
        shutil.copy(HERE / "lintian-overrides", overrides / "nodeagent")


def write_completions(root: Path, venv: Path) -> None:
    """click's own completion scripts, generated by the packaged commands themselves."""
    python = str(venv / "bin" / "python3")
    targets = {
        "bash_source": root / "usr" / "share" / "bash-completion" / "completions" / "{command}",
        "zsh_source": root / "usr" / "share" / "zsh" / "vendor-completions" / "_{command}",
        "fish_source": root / "usr" / "share" / "fish" / "vendor_completions.d" / "{command}.fish",
    }
    for command in COMMANDS:
        variable = "_" + command.upper().replace("-", "_") + "_COMPLETE"
        for shell, pattern in targets.items():
            script = run([python, str(venv / "bin" / command)], env=os.environ | {variable: shell})
            if command not in script:
                raise BuildError(f"{command}: {shell} completion script does not name the command")
            target = Path(str(pattern).format(command=command))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(script)


def normalise_permissions(root: Path) -> None:
    """0755 for directories, scripts and ELF executables; 0644 for the rest (extension modules
    included, as in Debian's own Python packages)."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o755)
            continue
        with path.open("rb") as file:
            head = file.read(20)
        executable = head.startswith(b"#!") or (head.startswith(b"\x7fELF") and head[16] == 2)  # ET_EXEC
        path.chmod(0o755 if executable else 0o644)


def shlib_depends(work: Path, wheels: list[Path]) -> str:
    """The shared libraries the wheels' extension modules link against, as Debian dependencies
    (they are unpacked for dpkg-shlibdeps only; it wants a debian/control beside it)."""
    unpacked = work / "shlibs"
    objects = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if re.search(r"\.so(\.|$)", member):
                    objects.append(str(archive.extract(member, unpacked / wheel.stem)))
    if not objects:
        return ""
    (work / "debian").mkdir()
    (work / "debian" / "control").write_text("Source: nodeagent\n\nPackage: nodeagent\nArchitecture: any\n")
    output = run(["dpkg-shlibdeps", "-O", "--ignore-missing-info", *objects], cwd=work)
    match = re.search(r"^shlibs:Depends=(.*)$", output, re.MULTILINE)
    return match.group(1) if match else ""


def write_control(root: Path, version: str, arch: str, depends: str) -> None:
    control = root / "DEBIAN"
    control.mkdir()
    installed_kib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()) // 1024
    # python3 where it is new enough, else the package named for Ubuntu 22.04 (TARGETS); the venv
    # module is in libpython3.X-stdlib, so no python3-venv (ensurepip) is needed.
    others = sorted({t.python_package for t in TARGETS if t.python_package != "python3"})
    python = " | ".join([f"python3 (>= {MIN_PYTHON[0]}.{MIN_PYTHON[1]})", *others])
    all_depends = ", ".join(filter(None, [python, "adduser", "init-system-helpers (>= 1.54~)", depends]))
    fields = {
        "Package": "nodeagent",
        "Version": version,
        "Architecture": arch,
        "Maintainer": maintainer(),
        "Installed-Size": str(installed_kib),
        "Depends": all_depends,
        "Section": "admin",
        "Priority": "optional",
        "Description": DESCRIPTION,
    }
    (control / "control").write_text("".join(f"{key}: {value}\n" for key, value in fields.items()))
    (control / "conffiles").write_text("".join(f"/etc/nodeagent/{name}\n" for name in CONFFILES))
    shutil.copy(HERE / "triggers", control / "triggers")
    for script in ("postinst", "prerm", "postrm"):
        shutil.copy(HERE / script, control / script)
        (control / script).chmod(0o755)
    sums = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and control not in path.parents:
            sums.append(f"{hashlib.md5(path.read_bytes()).hexdigest()}  {path.relative_to(root)}\n")
    (control / "md5sums").write_text("".join(sums))


def maintainer() -> str:
    """The changelog's latest signer, as dpkg-gencontrol would take it."""
    trailer = re.search(r"^ -- (.+>)  ", (HERE / "changelog").read_text(), re.MULTILINE)
    assert trailer is not None  # check_changelog ran first
    return trailer.group(1)


def write_gzip(path: Path, data: bytes) -> None:
    # mtime 0 and no file name in the header: the same input gives the same bytes.
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
        gz.write(data)


def pip(python: str) -> list[str]:
    """This environment's pip, acting on ``python``'s environment (pip >= 22.3)."""
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]


def run(command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise BuildError(f"{' '.join(command[:4])} ... failed ({done.returncode}): {detail[0]}")
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())
