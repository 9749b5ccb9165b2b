"""One collector process run until SIGTERM or SIGINT (``serve --workers 1``, or one worker of a
front), and why a listen address could not be bound, said in one line."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys

import click
import structlog

from nodeagent.collector.service.server import CollectorServer, HttpListenError
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.database import StoreUnreadableError
from nodeagent.core.program.command_line import RuntimeFailure
from nodeagent.core.program.lock_file import LockedError
from nodeagent.core.transport.channel import bind_problem, parse_target

log = structlog.get_logger("nodeagent.collector")


def bind_error(listen: str) -> str:
    """Why gRPC could not bind ``listen``: it says only "Failed to bind", so ask the OS."""
    host, port = parse_target(listen, any_port=True)
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as err:
        return str(err.strerror or err)
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind(address)
            except OSError as err:
                return str(err.strerror or err).lower()
    return "gRPC could not bind it"


async def run_server(config: ServerConfig) -> None:
    """One collector process (``--workers 1``, or one worker of a front) until SIGTERM or SIGINT."""
    try:
        server = CollectorServer(config)
    except LockedError as err:  # another collector writes this database
        raise click.BadParameter(str(err), param_hint="--db") from err
    except StoreUnreadableError as err:  # not a database, damaged, or its files unusable ("disk I/O error")
        raise RuntimeFailure(f"cannot open database {config.db_path}: {err}") from err
    host, wanted = parse_target(config.listen, any_port=True)
    # A taken port said in one line, before gRPC tries it (it would print a C-core line first).
    taken = bind_problem(host, wanted) if wanted else ""
    if taken:
        raise click.ClickException(f"cannot listen on {config.listen}: {taken}")
    try:
        port = await server.start()
    except HttpListenError as err:
        raise click.ClickException(str(err)) from err
    except RuntimeError as err:
        raise click.ClickException(f"cannot listen on {config.listen}: {bind_error(config.listen)}") from err
    # One plain line on stdout, so scripts and tests learn the port when --listen asked for :0.
    click.echo(f"listening on {host}:{port}", err=False)
    http = server.http.address if server.http is not None else None
    if http is not None:
        click.echo(f"http on {http}", err=False)
    click.echo(f"database {config.db_path}", err=False)
    sys.stdout.flush()
    log.info("collector serving", listen=f"{host}:{port}", http=http, db=str(config.db_path), tls=config.security.tls)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(server.wait())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    log.info("collector stopping")
    await server.stop()
    for task in (waiter, stopper):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
