"""Make nodeagent's environment from the wheels the package ships (postinst runs this).

    python3 /usr/lib/nodeagent/make_environment.py [--prefix /opt/nodeagent] [--python PATH] [--if-changed]

The package carries no file tied to one Python version, so the same .deb installs on releases
whose python3 differs (Debian 12: 3.11, Debian 13: 3.13, Ubuntu 24.04: 3.12; Ubuntu 22.04's
python3 is 3.10, too old, so its python3.11 package is used). This picks the interpreter —
/usr/bin/python3 when its version has wheels here, else the newest /usr/bin/python3.X that has —
makes a virtual environment of it at PREFIX (no pip in it), and installs into it, offline, exactly
requirements.lock and nodeagent from wheels/ with the bundled pip, then checks the result imports.
``--if-changed`` (the python3 trigger) does nothing when the environment already runs on the
interpreter it would pick, so a dist-upgrade that changes python3 remakes it and nothing else does.

Runs on any python3 the supported releases have (3.10 and newer): it only chooses and launches.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = "environment.json"  # written by build.py: version, pythons, installer wheel, imports
PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


class EnvironmentFailure(RuntimeError):
    """The environment cannot be made; the message says why, in one line."""


@dataclass(frozen=True)
class Manifest:
    """What build.py recorded about the package's contents (environment.json)."""

    version: str  # nodeagent's, as in wheels/nodeagent-VERSION-py3-none-any.whl
    pythons: list[str]  # the major.minor versions every locked wheel is here for
    installer: str  # the pip wheel's file name
    imports: list[str]  # what must import once installed

    @classmethod
    def read(cls, lib: Path) -> Manifest:
        data = json.loads((lib / MANIFEST).read_text())
        return cls(
            version=str(data["version"]),
            pythons=[str(v) for v in data["pythons"]],
            installer=str(data["installer"]),
            imports=[str(name) for name in data["imports"]],
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=Path("/opt/nodeagent"))
    parser.add_argument("--python", type=Path, help="interpreter to use (default: chosen from /usr/bin)")
    parser.add_argument("--if-changed", action="store_true", help="only when the chosen Python differs")
    parser.add_argument("--lib", type=Path, default=HERE, help="the package's wheels and lock (default: here)")
    args = parser.parse_args(argv)
    try:
        manifest = Manifest.read(args.lib)
        python = args.python or choose_python(manifest.pythons, Path("/usr/bin"))
        version = python_version(python)
        if version not in manifest.pythons:
            supported = ", ".join(manifest.pythons)
            raise EnvironmentFailure(f"{python} is Python {version}; wheels here are for {supported}")
        if args.if_changed and environment_python(args.prefix) == version:
            return 0
        make(args.prefix, python, args.lib, manifest)
    except (EnvironmentFailure, OSError, KeyError, ValueError) as err:
        sys.stderr.write(f"nodeagent: cannot make {args.prefix}: {err}\n")
        return 1
    print(f"nodeagent: made {args.prefix} with {python} (Python {version})")
    return 0


def choose_python(supported: list[str], bindir: Path) -> Path:
    """python3 when its version is supported, else the newest supported python3.X present."""
    newest_first = sorted(supported, key=lambda v: tuple(int(p) for p in v.split(".")), reverse=True)
    found = []
    for candidate in [bindir / "python3", *(bindir / f"python{v}" for v in newest_first)]:
        if candidate.is_file():
            version = python_version(candidate)
            if version in supported:
                return candidate
            found.append(f"{candidate} is {version}")
    seen = "; ".join(found) or f"no python3 in {bindir}"
    raise EnvironmentFailure(f"no supported Python ({seen}); wheels here are for {', '.join(supported)}")


def python_version(python: Path) -> str:
    return _run([str(python), "-I", "-c", PROBE]).strip()


def environment_python(prefix: Path) -> str | None:
    """The major.minor of the interpreter the environment at ``prefix`` runs, if it is whole."""
    config = prefix / "pyvenv.cfg"
    if not config.is_file() or not (prefix / "bin" / "nodeagent").is_file():
        return None
    for line in config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "version":
            return ".".join(value.strip().split(".")[:2])
    return None


def make(prefix: Path, python: Path, lib: Path, manifest: Manifest) -> None:
    if prefix.exists():
        if not (prefix / "pyvenv.cfg").is_file() and any(prefix.iterdir()):
            raise EnvironmentFailure(f"{prefix} holds something that is not nodeagent's environment")
        shutil.rmtree(prefix)
    try:
        _run([str(python), "-I", "-m", "venv", "--without-pip", str(prefix)])
        env_python = str(prefix / "bin" / "python3")
        # pip runs from its wheel (pip's documented way to bootstrap), so none lands in the
        # environment; --no-index --no-deps: exactly the lock, from the wheels shipped here.
        pip = [env_python, "-I", str(lib / "wheels" / manifest.installer / "pip")]
        pip_options = ["--disable-pip-version-check", "--no-cache-dir", "--quiet"]
        _run([
            *pip, "install", *pip_options, "--root-user-action=ignore", "--no-index", "--no-deps",
            "--only-binary=:all:", "--no-compile", "--find-links", str(lib / "wheels"),
            "-r", str(lib / "requirements.lock"), f"nodeagent=={manifest.version}",
        ])  # fmt: skip
        _run([*pip, "check", *pip_options])  # the lock is complete and consistent on this Python
        if manifest.imports:
            _run([env_python, "-I", "-c", f"import {', '.join(manifest.imports)}"])
        (prefix / "bin" / "Activate.ps1").unlink(missing_ok=True)
        # The services see /opt read-only (ProtectSystem=strict): compile the bytecode once here,
        # as py3compile does for Debian's own Python packages. Not fatal: what does not compile
        # (a file of a dependency this Python rejects but never imports) still runs from source.
        compiled = subprocess.run(
            [env_python, "-I", "-m", "compileall", "-q", "-j", "0", str(prefix / "lib")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if compiled.returncode != 0:
            sys.stderr.write(f"nodeagent: warning: some of {prefix} did not compile to bytecode\n")
    except BaseException:
        shutil.rmtree(prefix, ignore_errors=True)  # nothing half made: a later attempt starts clean
        raise


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise EnvironmentFailure(f"{' '.join(command[:3])} ... failed ({done.returncode}): {detail[0]}")
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())
