"""Fixture trees: the shared reference trees of node_exporter and procfs, and small
hand-made procfs/sysfs trees for cases those do not cover."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# ../shared beside the checkout; NODEAGENT_SHARED_FIXTURES points elsewhere (a worktree one level deeper).
SHARED_FIXTURES = Path(os.environ.get("NODEAGENT_SHARED_FIXTURES") or REPO.parent / "shared" / "fixtures")

NET_DEV_HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast"
    "|bytes    packets errs drop fifo colls carrier compressed\n"
)


def materialize(src: Path, dst: Path) -> Path:
    """Copy a reference tree, turning the files that stand for symlinks back into links.

    The shared trees store each symlink of the original fixture as a small file holding
    the link target (``../../devices/...``); the readers must see real links, as on a
    live sysfs."""
    shutil.copytree(src, dst, symlinks=True)
    candidates = [Path(d) / f for d, _, names in os.walk(dst) for f in names]
    for path in candidates:
        if path.is_symlink() or path.stat().st_size > 512:
            continue
        try:
            target = path.read_text().strip()
        except UnicodeDecodeError:
            continue
        if target.startswith("../") and "\n" not in target:
            path.unlink()
            os.symlink(target.rstrip("/"), path)
    return dst


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Create ``files`` (relative path -> content) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def rewrite(path: Path, content: str) -> None:
    """Rewrite a file in place (same inode), as the kernel updates an attribute."""
    with open(path, "r+") as handle:
        handle.seek(0)
        handle.write(content)
        handle.truncate()
