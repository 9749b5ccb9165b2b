"""``serve --workers N`` with N > 1: the front's run, from its start to its last worker's drain.

In order: check that no other collector holds a worker's database (the one line a single
collector gives, exit status 2), bind ``--listen`` and ``--http-listen`` (a taken port fails
before any worker starts, as a single collector's does), start the workers, print the lines
scripts read, serve until SIGTERM or SIGINT, then stop the front's listeners and each worker
with its drain. A worker that cannot start does not stop the others: the front serves with the
workers that came up (its log names the others and why; the supervisor keeps starting them
again) and says so in its health, ``/metrics``, the merged answers and the fleet page. Only
when no worker starts does the front exit, in one line: every worker's reason, status 2 when
every one refused its input, else 1.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import click
import structlog

from nodeagent.collector.fleet.fanout import Shard, ShardClients
from nodeagent.collector.service.run import bind_error
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.database import lock_path
from nodeagent.collector.workers.front import FrontServer
from nodeagent.collector.workers.front_http import FrontHttp
from nodeagent.collector.workers.front_metrics import FrontMetrics
from nodeagent.collector.workers.front_query import FrontQueries
from nodeagent.collector.workers.supervisor import NoWorkerStartedError, Supervisor
from nodeagent.collector.workers.worker_args import WORKER_MODULE, WorkerSpec, worker_db_path, write_spec
from nodeagent.core.program.command_line import RuntimeFailure
from nodeagent.core.program.lock_file import LockedError, LockFile
from nodeagent.core.transport.channel import ClientSecurity, bind_problem, parse_target
from nodeagent.core.transport.rendezvous import worker_name
from nodeagent.core.transport.security import AccessPolicy

log = structlog.get_logger("nodeagent.collector")

# The front's directory of worker sockets: RUNTIME_PREFIX and 8 random characters.
RUNTIME_PREFIX = "nodeagent-collector-"
# The longest path a unix socket may have (sun_path less its NUL, on Linux).
UNIX_PATH_BYTES = 107
# How long a new front waits for a worker of a killed front to drain and let go of its database.
ORPHAN_DRAIN_SECONDS = 10.0


async def run_front(config: ServerConfig, workers: int, worker_ports: tuple[int, ...], log_level: str) -> None:
    """Serve as the front of ``workers`` workers until SIGTERM or SIGINT (``click`` errors as ``serve``'s)."""
    runtime_dir = Path(tempfile.mkdtemp(prefix=RUNTIME_PREFIX, dir=_runtime_parent(workers)))  # 0700
    try:
        await _run(config, WorkerSpec(config, workers, runtime_dir, log_level, worker_ports))
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)


async def _run(config: ServerConfig, spec: WorkerSpec) -> None:
    await _check_databases(config.db_path, spec.workers)
    spec_path = write_spec(spec)
    supervisor = Supervisor(spec, spec_path)
    shards = [
        Shard(name=worker_name(i), target=f"unix:{spec.socket_path(i)}", security=ClientSecurity())
        for i in range(spec.workers)
    ]
    # A worker that is down is not asked: the merged answer names it, with why, at once.
    clients = ShardClients(shards, unavailable=supervisor.down_reason)
    front = FrontServer(
        config,
        supervisor,
        FrontQueries(AccessPolicy(config.security), clients, config.query, max_message_bytes=config.max_message_bytes),
    )
    host, wanted = parse_target(config.listen, any_port=True)
    taken = bind_problem(host, wanted) if wanted else ""  # in one line, before gRPC's C-core line
    if taken:
        raise click.ClickException(f"cannot listen on {config.listen}: {taken}")
    try:
        port = await front.start()
    except RuntimeError as err:
        raise click.ClickException(f"cannot listen on {config.listen}: {bind_error(config.listen)}") from err
    metrics = FrontMetrics(front)
    web: FrontHttp | None = None
    fleet = config.settings.fleet
    others = fleet.others(config.listen, port)
    # The page's other collectors ([fleet] collectors but this one): asked beside the workers.
    fleet_clients = ShardClients(fleet.shards(others)) if others else None
    try:
        if config.http_listen is not None:
            web = FrontHttp(
                config.http_listen, config.security, front.policy, clients, asyncio.get_running_loop(),
                own_metrics=metrics.render, health=lambda: _health(supervisor),
                fleet=fleet_clients, fleet_timeout=fleet.timeout_seconds,
            )  # fmt: skip
            try:
                await asyncio.to_thread(web.server.start)
            except OSError as err:
                raise click.ClickException(
                    f"cannot listen on {config.http_listen} (--http-listen): {err.strerror or err}"
                ) from err
        try:
            await supervisor.start()
        except NoWorkerStartedError as err:
            raise (click.ClickException if err.status == 2 else RuntimeFailure)(str(err)) from err
        # Asked before the lines are printed: a script that reads them and stops the front at once
        # gets the drain, not SIGTERM's default death.
        stop = _stop_on_signals()
        _print_lines(config, port, web, supervisor)
        await stop.wait()
        log.info("collector stopping")
    finally:
        if web is not None:
            await asyncio.to_thread(web.server.stop)
        await front.stop()
        await supervisor.stop()
        await clients.close()
        if fleet_clients is not None:
            await fleet_clients.close()


async def _check_databases(db_path: Path, workers: int) -> None:
    """A database another collector holds stops the front before anything starts, in the one line a
    single collector gives (each worker takes its lock again as it opens its database).

    A worker holding it is waited for a while: the worker of a front that was SIGKILLed drains
    and stops by itself within seconds, and a collector restarted at once must not fail on it."""
    deadline = time.monotonic() + ORPHAN_DRAIN_SECONDS
    for index in range(workers):
        path = worker_db_path(db_path, index)
        while True:
            try:
                LockFile(lock_path(path), f"database {path}").release()
                break
            except LockedError as err:
                if time.monotonic() > deadline or not _held_by_a_worker(lock_path(path)):
                    raise click.BadParameter(str(err), param_hint="--db") from err
            await asyncio.sleep(0.1)


def _held_by_a_worker(lock: Path) -> bool:
    try:
        pid = int(lock.read_text().strip())
        return WORKER_MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False


def _print_lines(config: ServerConfig, port: int, web: FrontHttp | None, supervisor: Supervisor) -> None:
    host, _ = parse_target(config.listen, any_port=True)
    # The lines a single collector prints (the front's addresses; scripts read them), then one per worker.
    click.echo(f"listening on {host}:{port}")
    if web is not None:
        click.echo(f"http on {web.address}")
    click.echo(f"database {config.db_path}")
    for worker in supervisor.workers:
        if worker.up:
            click.echo(f"worker {worker.index} on {host}:{worker.port} database {worker.db_path}")
        else:
            click.echo(f"worker {worker.index} not started ({worker.last_error}); restarting it")
    databases = ", ".join(str(worker_db_path(config.db_path, w.index)) for w in supervisor.workers)
    click.echo(f"workers' ports take agents only, queries go to {host}:{port}; one database per worker: {databases}")
    sys.stdout.flush()
    down = [w.index for w in supervisor.workers if not w.up]
    log.info(
        "collector serving", listen=f"{host}:{port}", http=web.address if web else None,
        workers=len(supervisor.workers), workers_down=down, tls=config.security.tls,
    )  # fmt: skip


def _health(supervisor: Supervisor) -> tuple[bool, str]:
    """Healthy while at least one worker serves: the agents of the others are refused (the front
    says UNAVAILABLE and they retry), but a load balancer or a liveness probe that took the
    whole front away would refuse every agent. The reason names the workers that are down."""
    if supervisor.stopping:
        return False, "stopping"
    down = [supervisor.down_reason(w.index) for w in supervisor.workers if not w.up]
    if not supervisor.any_up:
        return False, "; ".join(down)
    return True, "; ".join(["ok", *down])


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _runtime_parent(workers: int) -> str:
    """systemd's ``RuntimeDirectory=``, else ``$XDG_RUNTIME_DIR``, else the temporary directory,
    else /tmp: the first that exists and is short enough for the workers' socket paths (a unix
    socket's path is at most 107 bytes; gRPC would only say it "could not bind")."""
    names = [os.environ.get(name, "").split(":")[0] for name in ("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR")]
    candidates = [*names, tempfile.gettempdir(), "/tmp"]
    # mkdtemp's name (the prefix and 8 characters) and the longest worker's socket.
    longest = len(f"/{RUNTIME_PREFIX}xxxxxxxx/worker{workers - 1}.sock")
    for value in candidates:
        if value and os.path.isdir(value) and len(os.fsencode(value)) + longest <= UNIX_PATH_BYTES:
            return value
    raise click.ClickException(
        f"no directory for the workers' sockets: {', '.join(v for v in candidates if v)} are missing or their "
        f"paths too long for a unix socket ({UNIX_PATH_BYTES} bytes); set RUNTIME_DIRECTORY to a short one"
    )
