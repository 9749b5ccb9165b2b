"""Running a program's click group the way both programs do: one-line errors, exit statuses.

``prog: error: ...`` on stderr and status 2 for bad input (DESIGN.md's contract), 1 for a runtime
failure (``RuntimeFailure``: a collector that cannot be reached), 130 for an interrupt, 0 when
stdout is closed under us (``| head``).
"""

from __future__ import annotations

import os
import sys

import click

EXIT_USAGE = 2
EXIT_RUNTIME = 1


class RuntimeFailure(click.ClickException):
    """Not the operator's input but the world (a collector that cannot be reached): one line, exit 1."""

    exit_code = EXIT_RUNTIME


def run_cli(group: click.Group, prog: str, args: list[str] | None = None) -> int:
    """Run a click group with one-line errors: ``prog: error: ...`` and status 2 (1 for a
    ``RuntimeFailure``)."""
    # gRPC's C core prints its own INFO lines to stderr (a failed TLS handshake's, before the
    # error that says why): errors only, unless the operator asks for more.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        # Without standalone mode click returns a command's ``Exit`` code instead of raising it.
        status = group.main(args=args, prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.exceptions.Abort:
        return 130
    except click.ClickException as err:
        message = " ".join(err.format_message().split())
        sys.stderr.write(f"{prog}: error: {message}\n")
        return EXIT_RUNTIME if isinstance(err, RuntimeFailure) else EXIT_USAGE
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return status if isinstance(status, int) else 0
