"""The lock file: a second owner is refused with the first one's pid; a dead owner's lock is gone."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.core.program.lock_file import LockedError, LockFile

HOLD = """
import sys, time
from pathlib import Path
from nodeagent.core.program.lock_file import LockFile
lock = LockFile(Path(sys.argv[1]), "the thing")
print("held", flush=True)
time.sleep(120)
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def test_a_second_process_is_refused_and_told_who_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    child = _holder(path)
    try:
        with pytest.raises(LockedError) as refused:
            LockFile(path, "spool directory /x")
        assert str(refused.value) == f"spool directory /x is in use by process {child.pid} (lock file {path})"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    # SIGKILL leaves the file behind with the dead pid in it; the kernel dropped the lock.
    assert path.read_text() == f"{child.pid}\n"
    lock = LockFile(path, "spool directory /x")
    assert lock.held and path.read_text().strip().isdigit()
    lock.release()
    assert not lock.held


def test_a_second_owner_in_the_same_process_takes_it_over(tmp_path: Path) -> None:
    """A store reopened by the process that held it (a restart in a test) is the same owner; the
    first object then holds nothing, and releasing it does not drop the second's lock."""
    path = tmp_path / "lock"
    first = LockFile(path, "database c.db")
    second = LockFile(path, "database c.db")
    assert second.held and not first.held
    first.release()
    child = subprocess.run(
        [sys.executable, "-c", HOLD, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 1 and "is in use by process" in child.stderr  # still held: by us
    second.release()
    second.release()  # twice is harmless
    LockFile(path, "database c.db").release()
