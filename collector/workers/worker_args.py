"""How a worker is started: its settings, its database, its ports and its command line.

The front hands each worker the ``ServerConfig`` it parsed itself, written once into the
front's private (0700) runtime directory: a worker then runs with exactly the flags, config
file and defaults the front resolved (its environment is the front's too). The file is a pickle
because it is only ever read by a process of the same user, from a directory no one else can
enter, written by that same run: nothing outside the run can put one there.
"""

from __future__ import annotations

import copyreg
import dataclasses
import os
import pickle
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.core.transport.channel import bind_problem, parse_target

# The module a worker runs (``python -m``): worker_main.py beside this one.
WORKER_MODULE = "nodeagent.collector.workers.worker_main"
SPEC_NAME = "workers.spec"
MAX_PORT = 65535


# The settings hold read-only mappings (MappingProxyType), which pickle cannot write by itself.
def _read_only(mapping: dict[object, object]) -> types.MappingProxyType[object, object]:
    return types.MappingProxyType(mapping)


copyreg.pickle(types.MappingProxyType, lambda proxy: (_read_only, (dict(proxy),)))


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What every worker of one front is started with; ``worker_config(i)`` is worker i's own."""

    config: ServerConfig
    workers: int
    runtime_dir: Path
    log_level: str = "info"
    # Each worker's agent port (``worker_ports``); empty: each an ephemeral port.
    worker_ports: tuple[int, ...] = ()

    def socket_path(self, index: int) -> Path:
        return self.runtime_dir / f"worker{index}.sock"

    def reason_path(self, index: int) -> Path:
        """Where worker ``index`` writes why it failed, in one line, for the front's log."""
        return self.runtime_dir / f"worker{index}.reason"

    def worker_config(self, index: int, port: int | None = None) -> ServerConfig:
        """Worker ``index``'s settings: its database and agent port, no HTTP (the front's), the socket.

        ``port``: the one it had before a restart, so agents redirected there find it again."""
        host, _ = parse_target(self.config.listen, any_port=True)
        if port is None:
            port = self.worker_ports[index] if self.worker_ports else 0
        return dataclasses.replace(
            self.config, listen=f"{host}:{port}", db_path=worker_db_path(self.config.db_path, index),
            http_listen=None, worker_index=index, front_socket=self.socket_path(index),
            worker_sockets=tuple(self.socket_path(i) for i in range(self.workers)), front_listen=self.config.listen,
        )  # fmt: skip


def pick_worker_ports(listen: str, http_listen: str | None, workers: int, base: int | None) -> tuple[int, ...]:
    """Each worker's agent port; ``ValueError`` (the ``--worker-ports`` to give) when they cannot be had.

    ``base`` given (``--worker-ports``): base + i, which must not be one of the collector's own
    ports. Not given: from ``--listen``'s port + 1 up, passing over ``--http-listen``'s port and
    any port something on this host holds now (``serve --listen :50151 --http-listen :50152``
    must not put worker 0 on the HTTP port). ``--listen``'s port 0: ephemeral ports (empty)."""
    host, listen_port = parse_target(listen, any_port=True)
    own = {listen_port: "--listen"}
    if http_listen is not None:
        own.setdefault(parse_target(http_listen, any_port=True)[1], "--http-listen")
    own.pop(0, None)
    if base == 0 or (base is None and not listen_port):
        return ()
    if base is not None:
        ports = tuple(range(base, base + workers))
        if ports[-1] > MAX_PORT:
            raise ValueError(f"{workers} workers from port {base} run past {MAX_PORT}")
        for index, port in enumerate(ports):
            if port in own:
                raise ValueError(
                    f"worker {index}'s port {port} is {own[port]}'s: give a base whose {workers} ports are free"
                )
        return ports
    picked: list[int] = []
    port = listen_port
    while len(picked) < workers:
        port += 1
        if port > MAX_PORT:
            raise ValueError(f"no {workers} free ports above --listen's {listen_port}: give --worker-ports")
        if port not in own and not bind_problem(host, port):
            picked.append(port)
    return tuple(picked)


def worker_db_path(db_path: Path, index: int) -> Path:
    """Worker 0 keeps ``--db`` as given; worker i >= 1 ``<stem>.worker<i><suffix>``."""
    if index == 0:
        return db_path
    return db_path.with_name(f"{db_path.stem}.worker{index}{db_path.suffix}")


def write_spec(spec: WorkerSpec) -> Path:
    """Write ``spec`` into its runtime directory, readable by this user only."""
    path = spec.runtime_dir / SPEC_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        pickle.dump(spec, out)
    return path


def read_spec(path: Path) -> WorkerSpec:
    with path.open("rb") as spec_file:
        spec = pickle.load(spec_file)  # written by this run, in its own 0700 directory
    if not isinstance(spec, WorkerSpec):
        raise TypeError(f"{path}: not a worker spec")
    return spec


def worker_command(spec_path: Path, index: int, port: int | None = None) -> list[str]:
    """The command line of worker ``index`` (``port``: the agent port to keep after a restart)."""
    command = [sys.executable, "-m", WORKER_MODULE, str(spec_path), str(index)]
    if port is not None:
        command.append(str(port))
    return command
