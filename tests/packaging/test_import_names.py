"""The distribution installs one import name, ``nodeagent``: no generic top-level packages such as
``agent`` or ``collector`` land in site-packages."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.fakes.trees import REPO
from tests.packaging.test_packaging_deb import deb_build

# Read in the fresh environment from the installed distribution's metadata: the top-level names
# setuptools recorded, and the first part of every file the distribution installed (RECORD).
_METADATA = """
import json
from importlib.metadata import distribution
dist = distribution("nodeagent")
tops = {p.parts[0] for p in dist.files or () if p.parts[0] != ".." and not p.parts[0].endswith(".dist-info")}
print(json.dumps({"top_level": (dist.read_text("top_level.txt") or "").split(), "from_files": sorted(tops)}))
"""


def test_installs_only_the_nodeagent_package(tmp_path: Path) -> None:
    wheel = deb_build.build_project_wheel(tmp_path / "work", source_date=1_700_000_000)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [*deb_build.pip(python), "install", "--quiet", "--no-deps", "--no-index", "--no-compile", str(wheel)],
        check=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    done = subprocess.run(
        [python, "-I", "-c", _METADATA], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(done.stdout)
    assert found["from_files"] == ["nodeagent"]
    assert found["top_level"] == ["nodeagent"]
    installed = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (installed / "nodeagent" / "agent" / "cli" / "main.py").is_file()
    assert (installed / "nodeagent" / "collector" / "cli" / "main.py").is_file()
    assert (installed / "nodeagent" / "core" / "wire" / "validate.py").is_file()
    assert (installed / "nodeagent" / "agent" / "diag" / "profiles" / "8xH100-sxm-ib.toml").is_file()
    assert not (installed / "agent").exists() and not (installed / "collector").exists()


def test_every_package_folder_is_in_the_distribution() -> None:
    """pyproject lists the packages by name (package-dir maps them onto folders): a new folder that
    ships files (modules, or data such as diag's profiles) and is not listed would be left out of the
    wheel and the .deb, or make setuptools warn at every install."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders: set[str] = set()
    for package, folder in setuptools["package-dir"].items():
        root = REPO / folder
        for sub in (root, *root.rglob("*")):
            if sub.is_dir() and sub.name != "__pycache__" and any(f.is_file() for f in sub.iterdir()):
                folders.add(".".join((package, *sub.relative_to(root).parts)))
    # proto/nodeagent holds nodeagent itself; proto/ above it is the wire's sources, not a package.
    assert folders == set(setuptools["packages"])
