"""A worker process: ``python -m nodeagent.collector.workers.worker_main SPEC INDEX [PORT]``.

A normal ``CollectorServer`` run as ``serve`` runs one (the same stdout lines: ``listening on``,
``database``; the supervisor reads the port from them), with the worker's own database and
agent port and the front's unix socket. It ends on SIGTERM (the front's stop: a drain, like
``serve``'s), and by itself when the front is gone (SIGKILLed: nobody would stop it otherwise;
the parent-death signal, ``core/program/child_restart.py``, else a watch on the front's pid).
When it cannot run (its database unusable, its port taken) it says why in one line in its
reason file, which the front logs, and exits as ``serve`` would: 1, or 2 for the operator's input.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import click

from nodeagent.collector.workers.worker_args import read_spec
from nodeagent.core.program.child_restart import die_with_parent
from nodeagent.core.program.command_line import EXIT_RUNTIME, EXIT_USAGE, RuntimeFailure
from nodeagent.core.program.log import configure_logging

# How often a worker looks whether its front still lives.
PARENT_POLL_SECONDS = 1.0


def main(argv: list[str]) -> int:
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    spec = read_spec(Path(argv[1]))
    index = int(argv[2])
    port = int(argv[3]) if len(argv) > 3 else None
    configure_logging(spec.log_level)
    config = spec.worker_config(index, port)
    if config.front_socket is not None:
        with contextlib.suppress(FileNotFoundError):  # left by a worker that was killed
            config.front_socket.unlink()
    front = os.getppid()
    if not die_with_parent(signal.SIGTERM):
        _stop_when_orphaned(front)
    if os.getppid() != front:
        return 0  # the front died before this worker could ask to die with it
    from nodeagent.collector.service.run import run_server  # noqa: PLC0415  (after logging is set up)

    try:
        asyncio.run(run_server(config))
    except click.ClickException as err:
        _say_why(spec.reason_path(index), index, " ".join(err.format_message().split()))
        # The statuses ``serve`` exits with (``run_cli``): 1 for the world, 2 for the operator's input.
        return EXIT_RUNTIME if isinstance(err, RuntimeFailure) else EXIT_USAGE
    except Exception as err:  # a bug or a failure nothing expected: its traceback, and one line for the front
        traceback.print_exc()
        _say_why(spec.reason_path(index), index, f"{type(err).__name__}: {err}")
        return 1
    finally:
        if os.getppid() != front:
            _leave_runtime_dir(spec.runtime_dir, config.front_socket)
    return 0


def _say_why(path: Path, index: int, reason: str) -> None:
    """Why this worker stops, for the front to log (one line, its own log line then names the
    worker); on stderr when the file cannot be written."""
    try:
        path.write_text(" ".join(reason.split()) + "\n")
    except OSError:
        sys.stderr.write(f"nodeagent-collector: error: worker {index}: {reason}\n")


def _leave_runtime_dir(runtime_dir: Path, own_socket: Path | None) -> None:
    """A front that was killed removed nothing: each of its workers takes its socket away as it
    stops, and the last one the directory (without it, every SIGKILL left one in /tmp)."""
    if own_socket is not None:
        with contextlib.suppress(FileNotFoundError):
            own_socket.unlink()
    if not any(runtime_dir.glob("worker*.sock")):
        shutil.rmtree(runtime_dir, ignore_errors=True)


def _stop_when_orphaned(parent: int) -> None:
    """SIGTERM this process (its drain) once its parent, the front, is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="front-watch", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
