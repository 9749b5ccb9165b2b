"""Build ``nodeagent_<version>_<arch>.deb`` with Debian's own tools (``make deb``).

    python packaging/deb/build.py [--out DIR] [--work DIR] [--wheelhouse DIR]

The package holds nodeagent and exactly the dependency versions of ``requirements.lock`` in a
virtual environment at /opt/nodeagent, made with Debian's python3.11 so it follows the system's
interpreter and security updates; /usr/bin links to its two commands; the systemd units; the
example configuration as conffiles; bash, zsh and fish completion; and the maintainer scripts.
Wheels come from ``--wheelhouse`` when it already holds them (no network needed) and from the
package index otherwise; nothing is compiled. Run as any user: ``dpkg-deb --root-owner-group``
makes every file root's.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PREFIX = "/opt/nodeagent"
# Debian 12's python3; the environment's compiled wheels (grpcio, protobuf, psutil) are cp311.
PYTHON = "/usr/bin/python3.11"
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


class BuildError(RuntimeError):
    """The package cannot be built as asked; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Options:
    out: Path
    work: Path
    wheelhouse: Path
    lock: Path = HERE / "requirements.lock"
    compression: str = "xz"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the .deb goes (default dist/)")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "deb", help="scratch space (emptied)")
    parser.add_argument("--wheelhouse", type=Path, default=REPO / "build" / "wheelhouse", help="wheel cache")
    parser.add_argument("--compression", choices=["xz", "gzip", "zstd", "none"], default="xz")
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
    check_copyright(read_pins(options.lock))
    arch = run(["dpkg", "--print-architecture"]).strip()
    if options.work.exists():
        shutil.rmtree(options.work)
    root = options.work / "root"
    venv = root / PREFIX.lstrip("/")

    fetch_wheels(options.lock, options.wheelhouse)
    project_wheel = build_project_wheel(options.work)
    make_environment(venv, options.lock, options.wheelhouse, project_wheel, version)
    relocate(venv, staged=str(venv), final=PREFIX)
    install_system_files(root, venv)
    normalise_permissions(root)
    write_control(root, version, arch, depends=shlib_depends(options.work, root))

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


def fetch_wheels(lock: Path, wheelhouse: Path) -> None:
    """Fill the wheelhouse for Debian's interpreter; offline when it already has every pin."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    download = [*pip(PYTHON), "download", "--quiet", "--only-binary=:all:", "--no-deps", "-d", str(wheelhouse)]
    offline = subprocess.run(
        [*download, "--no-index", "--find-links", str(wheelhouse), "-r", str(lock)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if offline.returncode != 0:
        run([*download, "-r", str(lock)])


def build_project_wheel(work: Path) -> Path:
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
    run([*pip(sys.executable), "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)])
    (wheel,) = wheels.glob("nodeagent-*.whl")
    return wheel


def make_environment(venv: Path, lock: Path, wheelhouse: Path, project_wheel: Path, version: str) -> None:
    if not Path(PYTHON).is_file():
        raise BuildError(f"{PYTHON} missing: apt-get install python3.11-venv")
    run([PYTHON, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python3.11")
    install = [*pip(python), "install", "--quiet", "--no-index", "--no-deps", "--only-binary=:all:", "--no-compile"]
    sources = ["--find-links", str(wheelhouse), "--find-links", str(project_wheel.parent)]
    run([*install, *sources, "-r", str(lock), f"nodeagent=={version}"])
    # --no-deps above installs the lock and nothing else; this proves the lock is complete.
    run([*pip(python), "check"])
    (venv / "bin" / "Activate.ps1").unlink(missing_ok=True)
    include = venv / "include" / "python3.11"
    if include.is_dir() and not any(include.iterdir()):
        shutil.rmtree(venv / "include")
    for cache in venv.rglob("__pycache__"):
        shutil.rmtree(cache)
    strip_extension_modules(venv)


def strip_extension_modules(venv: Path) -> None:
    """Debug symbols and notes out of the wheels' extension modules, as dh_strip does."""
    objects = [str(p) for p in venv.rglob("*.so") if p.is_file() and not p.is_symlink()]
    if objects:
        run(["strip", "--remove-section=.comment", "--remove-section=.note", "--strip-unneeded", *objects])


def relocate(venv: Path, staged: str, final: str) -> None:
    """Rewrite the staging path to the installed one (script shebangs, activate, pyvenv.cfg)."""
    old, new = staged.encode(), final.encode()
    for path in venv.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if old in data:
                if b"\0" in data:
                    raise BuildError(f"{path}: binary file embeds the staging path")
                path.write_bytes(data.replace(old, new))


def install_system_files(root: Path, venv: Path) -> None:
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

    write_completions(root, venv)

    doc = root / "usr" / "share" / "doc" / "nodeagent"
    doc.mkdir(parents=True)
    shutil.copy(HERE / "copyright", doc / "copyright")
    write_gzip(doc / "changelog.gz", (HERE / "changelog").read_bytes())
    shutil.copy(REPO / "packaging" / "README.md", doc / "README.md")

    overrides = root / "usr" / "share" / "lintian" / "overrides"
    overrides.mkdir(parents=True)
    shutil.copy(HERE / "lintian-overrides", overrides / "nodeagent")


def write_completions(root: Path, venv: Path) -> None:
    """click's own completion scripts, generated by the packaged commands themselves."""
    python = str(venv / "bin" / "python3.11")
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


def shlib_depends(work: Path, root: Path) -> str:
    """The shared libraries the embedded extension modules link against, as Debian
    dependencies (dpkg-shlibdeps wants a debian/control beside it)."""
    objects = [str(p) for p in (root / PREFIX.lstrip("/")).rglob("*.so*") if p.is_file() and not p.is_symlink()]
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
    all_depends = ", ".join(filter(None, ["python3.11", "adduser", "init-system-helpers (>= 1.54~)", depends]))
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
