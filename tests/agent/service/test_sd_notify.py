"""The notify protocol against a real AF_UNIX datagram socket, as systemd would listen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent.service import sd_notify


@pytest.fixture
def path_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


@pytest.fixture
def abstract_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    name = f"nodeagent-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    yield sock
    sock.close()


def test_ready_watchdog_stopping_arrive_as_single_datagrams(path_socket: socket.socket) -> None:
    assert sd_notify.ready()
    assert sd_notify.watchdog()
    assert sd_notify.stopping()
    received = [path_socket.recv(4096) for _ in range(3)]
    assert received == [b"READY=1", b"WATCHDOG=1", b"STOPPING=1"]


def test_multi_line_state_is_one_datagram(path_socket: socket.socket) -> None:
    assert sd_notify.notify("STATUS=sampling 8 GPUs\nWATCHDOG=1")
    assert path_socket.recv(4096) == b"STATUS=sampling 8 GPUs\nWATCHDOG=1"


def test_abstract_namespace_socket(abstract_socket: socket.socket) -> None:
    assert sd_notify.ready()
    assert abstract_socket.recv(4096) == b"READY=1"


def test_without_notify_socket_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not sd_notify.ready()
    assert not sd_notify.watchdog()


@pytest.mark.parametrize("value", ["", "relative/path", "vsock:2:1234"])
def test_unusable_socket_names_are_ignored(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert not sd_notify.notify("READY=1")


def test_vanished_socket_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert not sd_notify.watchdog()


def test_watchdog_interval_for_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sd_notify.watchdog_interval_seconds() == 30.0
    monkeypatch.delenv("WATCHDOG_PID")
    assert sd_notify.watchdog_interval_seconds() == 30.0


@pytest.mark.parametrize(
    ("usec", "pid"),
    [(None, None), ("0", None), ("-5", None), ("soon", None), ("30000000", "1"), ("30000000", "me")],
)
def test_no_watchdog_interval(monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None) -> None:
    for key, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    assert sd_notify.watchdog_interval_seconds() is None


def test_a_child_process_reaches_the_socket(path_socket: socket.socket) -> None:
    """The daemon is a separate process from whoever listens: the same path a service takes."""
    code = "from nodeagent.agent.service import sd_notify; raise SystemExit(0 if sd_notify.ready() else 1)"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy(), timeout=60)
    assert path_socket.recv(4096) == b"READY=1"


def test_a_receiver_that_does_not_read_never_blocks_the_caller(path_socket: socket.socket) -> None:
    # The kernel queues only net.unix.max_dgram_qlen datagrams (10 by default) for a reader.
    results = [sd_notify.watchdog() for _ in range(200)]
    assert results[0] is True
    assert results[-1] is False  # the queue is full: dropped, not waited for
