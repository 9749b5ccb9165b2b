"""One segment file of the disk spool: its name, the seqs it holds, what it takes on disk.

A segment is ``seg-<first seq, 20 digits>.log``: the records (``record``) of consecutive seqs
from its first one on. Once a recovery has counted the seqs that damage destroyed in it, and
that count is durable, it is renamed ``seg-<first>.lost-<n>.log``, ``n`` the seqs it lacked
then (the ones counted, and any destroyed after they were acknowledged or dropped), so a later
recovery counts only what is lost beyond those ``n``. (An older agent's ``n`` is only the
first kind: a later recovery then errs high, never low.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import structlog

from nodeagent.agent.delivery.disk_io import blocks

log = structlog.get_logger("nodeagent.spool")

_SEGMENT_NAME = re.compile(r"seg-(\d{20})(?:\.lost-(\d+))?\.log")


@dataclass(slots=True)
class Segment:
    path: Path
    first_seq: int
    last_seq: int
    size: int = 0
    lost_counted: int = 0
    # What the filesystem reports it holds (st_blocks): whole blocks, and on ext4 also the
    # extent block a file appended in many small synced writes can need.
    allocated: int = 0

    @property
    def disk_bytes(self) -> int:
        return max(blocks(self.size), self.allocated)


def segment_path(directory: Path, first_seq: int, lost: int = 0) -> Path:
    """Where the segment starting at ``first_seq`` lives (``lost``: the losses counted in it)."""
    suffix = f".lost-{lost}" if lost else ""
    return directory / f"seg-{first_seq:020d}{suffix}.log"


def segment_files(directory: Path) -> list[tuple[Path, int, int]]:
    """Every segment file in ``directory``, oldest first: its path, first seq, losses counted."""
    found = []
    for path in directory.glob("seg-*.log"):
        match = _SEGMENT_NAME.fullmatch(path.name)
        if match is None:
            log.warning("not a spool segment; left alone", path=str(path))
            continue
        found.append((path, int(match[1]), int(match[2] or 0)))
    return sorted(found, key=lambda item: item[1])
