"""Compiling the fake NVML library.

``build_fake_nvml(out_dir)`` compiles ``fake_nvml.c`` against the official ``nvml.h`` (from the
``nvidia-nvml-dev`` wheel) into ``out_dir/libnvidia-ml.so.1`` and returns ``out_dir``: the
directory to put on ``LD_LIBRARY_PATH``. It recompiles only when the source, the header or the
flags changed. A missing compiler or header raises ``FakeNvmlUnavailable`` with the reason, so
tests can skip with it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"


class FakeNvmlUnavailable(RuntimeError):
    """The fake cannot be built here (no C compiler, no nvml.h)."""


def nvml_include_dir() -> Path:
    """Where nvml.h is: $NVML_INCLUDE_DIR, else the nvidia-nvml-dev wheel."""
    override = os.environ.get("NVML_INCLUDE_DIR")
    if override:
        if not (Path(override) / "nvml.h").is_file():
            raise FakeNvmlUnavailable(f"NVML_INCLUDE_DIR={override} has no nvml.h")
        return Path(override)
    try:
        files = importlib.metadata.files("nvidia-nvml-dev") or []
    except importlib.metadata.PackageNotFoundError as err:
        raise FakeNvmlUnavailable("nvidia-nvml-dev is not installed (it provides nvml.h)") from err
    for entry in files:
        if entry.name == "nvml.h":
            return Path(str(entry.locate())).parent
    raise FakeNvmlUnavailable("nvidia-nvml-dev is installed but ships no nvml.h")


def build_fake_nvml(out_dir: Path, *, legacy: bool = False) -> Path:
    """Compile the fake into ``out_dir`` (once) and return ``out_dir``.

    ``legacy`` leaves out the newer versioned symbols, as a driver before R535 would.
    """
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None:
        raise FakeNvmlUnavailable("no C compiler (gcc) on PATH to build the fake NVML library")
    include = nvml_include_dir()
    flags = [
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-deprecated-declarations",
        "-std=gnu11",
        f"-I{include}",
        f"-Wl,-soname,{LIBRARY_NAME}",
    ]
    if legacy:
        flags.append("-DFAKE_NVML_LEGACY")
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update((include / "nvml.h").read_bytes())
    digest.update(" ".join(flags).encode())
    stamp = out_dir / "build.sha256"
    library = out_dir / LIBRARY_NAME
    if library.is_file() and stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    # Written aside, then renamed: two processes building the same directory at once (the labs'
    # Ctrl-C and SIGTERM tests side by side) never load a half-written library.
    partial = out_dir / f".{LIBRARY_NAME}.{os.getpid()}"
    command = [compiler, *flags, "-o", str(partial), str(SOURCE), "-lpthread"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise FakeNvmlUnavailable(f"compiling the fake NVML failed:\n{result.stderr.strip()}")
    os.replace(partial, library)
    stamp.write_text(digest.hexdigest())
    return out_dir


def exported_symbols(library: Path) -> set[str]:
    """Names of the functions the library exports (``nm -D --defined-only``)."""
    nm = shutil.which("nm")
    if nm is None:
        raise FakeNvmlUnavailable("nm (binutils) is not on PATH")
    out = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    rows = (line.split() for line in out.stdout.splitlines())
    return {parts[2] for parts in rows if len(parts) == 3 and parts[1] == "T"}
