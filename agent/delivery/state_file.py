"""``state.json``: what the segments alone cannot say, so a restart neither resends what the
collector has nor forgets where the epoch was.

It holds the epoch, the highest acknowledged seq, the highest seq dropped for lack of room, the
drop count and the runs of dropped seqs not counted yet (they may have reached the collector;
``nodeagent.agent.delivery.unresolved``). It also holds the last seq handed out (never behind
the records on disk; exact at a clean stop and while the disk is failing) and how far a
recovery already counted seqs that are on no record (``counted_through``), so no loss is
counted twice.

It is written to a temporary file, synced and renamed over the old one. It is padded to a fixed
size so that, when the disk is full and that cannot allocate, it can still be rewritten in
place. A file that cannot be read, or holds anything but non-negative integers, reads as no
state at all (logged): the spool starts a new epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from nodeagent.agent.delivery.disk_io import BLOCK_BYTES, SpoolDiskError, fsync_dir, overwrite, write_file

log = structlog.get_logger("nodeagent.spool")

STATE_FILE = "state.json"
# state.json is padded to this size: an in-place rewrite never needs a new block (the runs of
# unresolved drops, at most 2 x unresolved.MAX_RANGES of them, fit with room to spare).
STATE_BYTES = 1024
# What state.json and its temporary file take against the spool's bound: a block each.
STATE_RESERVE_BYTES = 2 * BLOCK_BYTES


@dataclass(slots=True)
class State:
    """The file's fields, in the order it holds them (0 and empty for a field it lacks)."""

    epoch: int = 0
    acked_seq: int = 0
    skipped_through: int = 0
    dropped_total: int = 0
    # Never behind what is on disk; exact at a clean stop and while degraded.
    last_seq: int = 0
    # Seqs up to here that are on no record were counted as dropped by a recovery already.
    counted_through: int = 0
    # Dropped after they may have been sent; counted once the collector says it lacks them.
    unresolved: list[int] = field(default_factory=list)


def read_state(directory: Path) -> State:
    raw = _read_raw(directory / STATE_FILE)
    return State(
        epoch=int(raw.get("epoch", 0)),
        acked_seq=int(raw.get("acked_seq", 0)),
        skipped_through=int(raw.get("skipped_through", 0)),
        dropped_total=int(raw.get("dropped_total", 0)),
        last_seq=int(raw.get("last_seq", 0)),
        counted_through=int(raw.get("counted_through", 0)),
        unresolved=list(raw.get("unresolved", [])),
    )


def write_state(directory: Path, state: State) -> None:
    """Replace ``state.json`` durably; in place when there is no room for a new file."""
    blob = json.dumps(dataclasses.asdict(state)).encode().ljust(STATE_BYTES - 1) + b"\n"
    path = directory / STATE_FILE
    tmp = directory / (STATE_FILE + ".tmp")
    try:
        write_file(tmp, blob)
        tmp.replace(path)
        fsync_dir(directory)  # the rename itself survives a power cut
    except OSError as err:
        if not path.exists():
            raise SpoolDiskError(err.errno, err.strerror or str(err)) from err
        with contextlib.suppress(OSError):
            tmp.unlink()
        overwrite(path, blob)  # no room for a new file: the padded old one takes it in place


def _read_raw(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("spool state unreadable; starting a new epoch", path=str(path), error=str(err))
        return {}
    if not isinstance(raw, dict) or not all(_state_value(k, v) for k, v in raw.items()):
        log.warning("spool state malformed; starting a new epoch", path=str(path))
        return {}
    return raw


def _state_value(key: object, value: object) -> bool:
    if key == "unresolved":
        return isinstance(value, list) and all(isinstance(v, int) and v >= 0 for v in value)
    return isinstance(value, int) and value >= 0
